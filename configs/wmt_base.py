"""The paper's base model on WMT14 English->German (Table 3 "base", §5).

Batching for accelerators, as tensor2tensor's `_packed` TPU problems, flax's WMT example and
maxtext train: packed rows of one length (the largest bucket, 256) at the paper's ~25000
target tokens per batch (§5.1; `tokens_per_batch` counts padded slots, packing fills ~0.9 of
them), so training compiles one batch shape instead of ten. Dev evaluation and decoding
batch by length over two buckets (`bucket_lengths` 64 and 256): dev loss and BLEU score
every pair as before, in 2 shapes instead of 10. `--mode=plan` on v5e:2x4 in bfloat16:
4.2 CPU-minutes of compiling before the first steady step instead of ~53 (README
"Before you rent a slice").
"""

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
  # One packed train shape [rows, 256]; each XLA compilation of the unrolled base train step
  # costs minutes of CPU on a TPU host, one per shape.
  c.pack_examples = True
  # Dev loss and decoding: two shapes each instead of ten (each eval compile ~15 CPU s,
  # each beam search ~90). Most newstest sentences fit 64 tokens; a sorted decode batch
  # pads its longer tail to 256 (beyond 256, to a multiple of 32).
  c.bucket_lengths = (64, 256)
  return c
