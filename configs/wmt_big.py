"""The paper's big model on WMT14 English->German (Table 3 "big", §5.2, §6.1)."""

from t2t_jax.configs import wmt_base


def get_config():
  c = wmt_base.get_config()
  c.d_model, c.d_ff, c.num_heads = 1024, 4096, 16
  c.dropout_rate = 0.3
  c.num_train_steps = 300_000
  c.average_last = 20  # §6.1: big models average the last 20 checkpoints
  return c
