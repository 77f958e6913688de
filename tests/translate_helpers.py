"""What the Translator tests share: a small model config, a tokenizer without SentencePiece,
and parameters sharp enough that beams really differ."""

import jax

from t2t_jax.model import transformer as model

CFG = model.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                              num_layers=2, max_len=64, deterministic=True)


class CharTokenizer:
  """Letters a-z -> ids 2..27; enough to drive the Translator without SentencePiece."""

  def encode(self, text):
    return [2 + (ord(c) - ord('a')) % 26 for c in text if c.isalpha()]

  def decode(self, ids):
    out = []
    for i in ids:
      if i == model.EOS_ID:
        break
      if i >= 2:
        out.append(chr(ord('a') + (i - 2) % 26))
    return ''.join(out)


def sharp_params(seed: int = 0):
  """`init_params(CFG)` with the embedding x4: a sharper output distribution than the
  initialisation's, so beams really differ."""
  params = jax.jit(lambda rng: model.init_params(CFG, rng))(jax.random.PRNGKey(seed))
  table = params['shared_embedding']['embedding']
  return dict(params, shared_embedding={'embedding': table * 4.0})
