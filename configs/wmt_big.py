"""The paper's big model on WMT14 English->German (Table 3 "big", §5.2, §6.1).

Batched as `wmt_base` (packed training rows of 256 tokens, one train shape; dev loss and
decoding over two buckets), so a TPU run compiles 1 train and 2 eval shapes before its
steady step: 192 CPU s on v5e:2x4 in bfloat16 (`--mode=plan`, README "Before you rent a
slice").
"""

from t2t_jax.configs import wmt_base


def get_config():
  c = wmt_base.get_config()
  c.d_model, c.d_ff, c.num_heads = 1024, 4096, 16
  c.dropout_rate = 0.3
  c.num_train_steps = 300_000
  c.average_last = 20  # §6.1: big models average the last 20 checkpoints
  return c
