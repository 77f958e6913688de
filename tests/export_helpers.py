"""Shared by the export tests: a random model over made-up pieces, and our side of the
parity checks (teacher-forced token log-probabilities)."""

import functools
from typing import List, Sequence

import jax
import numpy as np

from t2t_jax.model import transformer as model

VOCAB = 48
# Three pieces fewer than embedding rows: the export pads the vocabulary.
PIECES = ['<pad>', '</s>', '<unk>'] + [f'\u2581w{i}' for i in range(3, VOCAB - 3)]
CFG = model.TransformerConfig(vocab_size=VOCAB, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                              num_layers=2, max_len=40, deterministic=True)


class PieceTokenizer:
  """Space-separated pieces <-> ids, so our Translator and CTranslate2 read the same input."""

  def encode(self, text: str) -> List[int]:
    return [PIECES.index(p) for p in text.split()]


@functools.lru_cache(maxsize=None)
def random_params(cfg: model.TransformerConfig, sharpen: float = 4.0):
  """Initial parameters with the embedding (and an untied projection) scaled by `sharpen`: sharper output distributions
  (as tests/inference/test_translate.py), so argmaxes and beams are clear-cut. Cached: read only."""
  params = jax.jit(model.init_params, static_argnums=0)(cfg, jax.random.PRNGKey(0))
  # Every table of the embedding part: the untied pre-softmax projection too.
  return dict(params, shared_embedding={name: table * sharpen
                                        for name, table in params['shared_embedding'].items()})


def sentences(count: int = 6, seed: int = 1) -> List[str]:
  """`count` random sentences of 2 to 11 pieces (no special ones)."""
  rng = np.random.RandomState(seed)
  return [' '.join(PIECES[i] for i in rng.randint(3, len(PIECES), rng.randint(2, 12)))
          for _ in range(count)]


def _padded(rows: Sequence[Sequence[int]], length: int) -> np.ndarray:
  out = np.zeros((len(rows), length), np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def log_probs(cfg: model.TransformerConfig, params, sources: Sequence[Sequence[int]],
              targets: Sequence[Sequence[int]]) -> List[np.ndarray]:
  """Per pair, the log-probability of every target token given the source and the target's
  prefix (ids without EOS; EOS is appended to both, its log-probability is the last one),
  with padding masked as `translate.Translator` and the CTranslate2 export do. One padded
  jitted batch: source padding is masked, and the decoder is causal."""
  sources = [list(s) + [model.EOS_ID] for s in sources]
  targets = [list(t) + [model.EOS_ID] for t in targets]
  length = max(map(len, sources + targets))
  x, y = _padded(sources, length), _padded(targets, length)
  scores = jax.jit(lambda p, x, y: jax.nn.log_softmax(
      model.Transformer(cfg.replace(deterministic=True)).apply({'params': p}, x, y)
      .at[..., model.PAD_ID].set(-1e9)))(params, x, y)
  picked = np.take_along_axis(np.asarray(scores), y[..., None], axis=-1)[..., 0]
  return [picked[i, :len(t)] for i, t in enumerate(targets)]
