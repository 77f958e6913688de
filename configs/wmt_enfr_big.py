"""The paper's big model on WMT14 English->French (§5.1, §6.1: P_drop 0.1, 32000 word pieces).

Batched as `wmt_base`: packed training rows (one train shape), two dev/decode buckets
(64, 256).
"""

from t2t_jax.configs import wmt_big


def get_config():
  c = wmt_big.get_config()
  c.dataset = 'wmt14_translate/fr-en'
  c.source_lang, c.target_lang = 'en', 'fr'
  c.vocab_size = 32000
  c.dropout_rate = 0.1
  return c
