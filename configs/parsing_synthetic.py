"""Constituency parsing on a synthetic treebank: the whole parsing path in minutes on a CPU.

  python -m t2t_jax.parsing.grammar --out /tmp/synthetic_treebank
  python main.py --config=configs/parsing_synthetic.py --workdir=/tmp/parse \\
      --config.treebank_dir=/tmp/synthetic_treebank

The grammar (`t2t_jax/parsing/grammar.py`) gives every sentence one possible tree, so a test
F1 near 100 is reachable; benchmarks/studies/parsing_synthetic.py measures it.
"""

from t2t_jax.configs import default


def get_config():
  c = default.get_config()
  c.dataset = 'treebank'
  c.source_lang = c.target_lang = 'en'  # English sentences -> their trees
  c.treebank_dir = ''             # set it to the folder grammar.py wrote
  c.vocab_size = 600              # ~330 words and ~40 tree symbols: every word one piece
  c.vocab_sample_sentences = 20_000
  c.d_model, c.d_ff, c.num_heads, c.num_layers = 128, 512, 4, 2
  c.max_len = 256
  # Targets are ~2.5x as long as their sentences (mean 36 tokens, longest ~150): buckets
  # follow the target length, which decides a pair's bucket.
  c.max_length = 128
  c.bucket_lengths = (24, 32, 48, 64, 96, 128)
  c.tokens_per_batch = 4096
  c.warmup_steps = 1000
  c.learning_rate_scale = 1.0
  c.dropout_rate = 0.1
  c.num_train_steps = 3000
  c.checkpoint_every_steps = 250
  c.checkpoint_every_minutes = 0.0
  c.keep_checkpoints = 5
  c.log_every_steps = 100
  c.eval_every_steps = 1000
  c.final_eval_split = 'test'     # then average, parse the test split and print its F1
  c.average_last = 3
  # Decoding: an output is up to input + 100 tokens (the longest target needs ~1.6 x its
  # sentence + 8).
  c.beam_size = 4
  c.length_penalty_alpha = 0.3
  c.max_decode_extra = 100
  c.decode_batch_sentences = 64
  return c
