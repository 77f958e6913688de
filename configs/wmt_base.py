"""The paper's base model on WMT14 English->German (Table 3 "base", §5)."""

from t2t_jax.configs import default


def get_config():
  c = default.get_config()  # the defaults are the base recipe; named here for clarity
  c.dataset = 'wmt14_translate/de-en'
  c.source_lang, c.target_lang = 'en', 'de'
  c.vocab_size = 37000
  c.d_model, c.d_ff, c.num_heads, c.num_layers = 512, 2048, 8, 6
  c.dropout_rate = 0.1
  c.num_train_steps = 100_000
  c.average_last = 5  # §6.1: base models average the last 5 checkpoints
  return c
