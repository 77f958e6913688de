"""Our side of the export parity tests: teacher-forced token log-probabilities."""

from typing import List, Sequence

import jax
import numpy as np

from t2t_jax import model


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
