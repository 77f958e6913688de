"""English constituency parsing on the WSJ only (§6.3, Table 4: F1 91.3).

  python main.py --config=configs/wsj_parsing.py --workdir=runs/wsj \\
      --config.treebank_dir=/data/treebank_3/parsed/mrg/wsj

The paper: a 4-layer Transformer with d_model 1024, every other value the base model's
(Table 3), trained on the ~40K sentences of WSJ sections 02-21 with a 16K vocabulary; beam
21, alpha 0.3, outputs up to input length + 300. It tuned dropout and learning rate on
section 22 without giving the values; the base ones are kept here, and so is its training
length, which §6.3 does not give either.
"""

from t2t_jax.configs import wmt_base


def get_config():
  c = wmt_base.get_config()
  c.dataset = 'treebank'
  c.source_lang = c.target_lang = 'en'  # English sentences -> their trees
  c.treebank_dir = ''             # WSJ sections 02-23 (*.mrg), or train/dev/test.trees
  c.vocab_size = 16000
  c.num_layers = 4
  c.d_model = 1024
  # A linearized tree is ~3 tokens per word (a tag, and an opening and a closing token per
  # constituent): the longest WSJ sentences give ~450-token targets. Pairs are bucketed by
  # their longer side, the target.
  c.max_len = 512
  c.max_length = 512
  c.bucket_lengths = (32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512)
  c.beam_size = 21
  c.length_penalty_alpha = 0.3
  c.max_decode_extra = 300
  c.decode_batch_sentences = 16   # beam 21 x up to 512 cached positions x 4 layers each
  return c
