"""The embedded default: a small EN->ES model on the bundled Bible corpus, minutes on a CPU."""

from configs import default


def get_config():
  c = default.get_config()
  c.dataset = 'local'            # local_corpus_dir '' selects the bundled bible_en_es corpus
  c.source_lang, c.target_lang = 'en', 'es'
  # Sized for minutes on 2 CPU cores (about 2.7 epochs of the 29.5k training verses).
  c.vocab_size = 4000
  c.vocab_sample_sentences = 30_000
  c.d_model, c.d_ff, c.num_heads, c.num_layers = 128, 512, 4, 3
  c.max_len = 256
  c.max_length = 64
  c.bucket_lengths = (16, 32, 48, 64)
  c.tokens_per_batch = 2048
  c.warmup_steps = 400
  c.learning_rate_scale = 2.0
  c.num_train_steps = 1200
  c.checkpoint_every_steps = 200
  c.checkpoint_every_minutes = 0.0
  c.keep_checkpoints = 5
  c.log_every_steps = 50
  c.eval_every_steps = 400
  c.average_last = 3
  c.decode_batch_sentences = 64
  return c
