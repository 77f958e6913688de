"""Our ids from a transformers vocabulary: padding 0 and EOS 1 keep their meaning in t2t_jax
(`transformer_config.PAD_ID`, `EOS_ID`), unknown 2 (`tokenizer.UNK_ID`); every other id
follows in the source's order. `order[ours] = theirs` permutes embedding rows and logit
biases; `ours[theirs]` maps ids (a decoder start, a forced token)."""

import dataclasses
from typing import Dict, List

import numpy as np

from t2t_jax.pretrained.hf_files import PretrainedError


@dataclasses.dataclass(frozen=True)
class IdMap:
  """`order`: `[vocab]` int64, their id at each of our ids; `pieces`: the piece of each of our
  ids (a placeholder `<unused_N>` for an id no vocabulary entry names)."""
  order: np.ndarray
  pieces: List[str]

  def ours(self, theirs: int) -> int:
    """Our id of their id `theirs`."""
    return int(np.nonzero(self.order == theirs)[0][0])

  def rows(self, table: np.ndarray) -> np.ndarray:
    """`table` (`[their vocab, ...]`) with its rows in our id order."""
    return np.ascontiguousarray(table[self.order])


def build(vocab: Dict[str, int], size: int, pad: int, eos: int, unk: int,
          where: str) -> IdMap:
  """The map of a `size`-row model whose vocabulary `vocab` maps pieces to their ids, with
  their padding, EOS and unknown ids; PretrainedError in one line for ids that do not fit."""
  piece_of: Dict[int, str] = {}
  for piece, i in vocab.items():
    if not isinstance(i, int) or not 0 <= i < size:
      raise PretrainedError(f'{where}: {piece!r} has id {i!r}; expected an id below the '
                            f'model\'s vocab_size={size}')
    piece_of.setdefault(i, piece)
  special = [pad, eos, unk]
  if len(set(special)) != 3 or any(not 0 <= i < size for i in special):
    raise PretrainedError(f'{where}: padding, EOS and unknown ids are {special}; expected '
                          f'three different ids below vocab_size={size}')
  order = np.array(special + [i for i in range(size) if i not in special], np.int64)
  pieces = [piece_of.get(int(i), f'<unused_{int(i)}>') for i in order]
  return IdMap(order, pieces)
