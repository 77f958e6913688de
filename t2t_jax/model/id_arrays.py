"""The argument checks of the public functions that take token ids (`check_incremental`,
`nnx_bridge.generate`): a wrong array is refused before any work, in one line naming the
function, the argument and what was expected, instead of an error from deep inside jax
(`dynamic_update_slice`, a numpy reduction, `indices must have an integer type`) or, for ids
outside the vocabulary, a result computed from clamped embedding rows.
"""

from typing import Any, Optional

import jax
import numpy as np


def is_traced(x: Any) -> bool:
  """Whether `x` is a value being traced (under `jit`): its shape and dtype are known, its
  values are not, so only those are checked."""
  return isinstance(x, jax.core.Tracer)


def check_ids(where: str, name: str, ids: Any, vocab_size: Optional[int] = None) -> None:
  """Refuses `ids` unless it is a `[batch, length]` integer array with batch, length >= 1 and
  (when its values are known and `vocab_size` is given) every id in [0, vocab_size).

  Args:
    where: the function, for the message ('check_incremental').
    name: the argument ('inputs', 'targets').

  Raises:
    TypeError: not an array of integers (a float array of ids, a list of strings).
    ValueError: not 2-D, an empty batch or length, or an id outside the vocabulary.
  """
  dtype = getattr(ids, 'dtype', None)
  if dtype is None:
    ids = np.asarray(ids)
    dtype = ids.dtype
  shape = tuple(np.shape(ids))
  if not np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.bool_):
    raise TypeError(f'{where}: {name} has dtype {dtype}; expected integer token ids '
                    '(int32)')
  if len(shape) != 2 or 0 in shape:
    raise ValueError(f'{where}: {name} of shape {shape}; expected [batch, length] token ids '
                     'with batch and length >= 1')
  if vocab_size is not None:
    check_id_values(where, name, ids, vocab_size)


def check_id_values(where: str, name: str, ids: Any, vocab_size: int) -> None:
  """ValueError for an id outside [0, vocab_size), when the values can be read here (not
  traced inside jit, held whole by this process, not empty)."""
  if is_traced(ids) or not getattr(ids, 'is_fully_addressable', True) or not np.size(ids):
    return
  values = np.asarray(ids)
  low, high = int(values.min()), int(values.max())
  if low < 0 or high >= vocab_size:
    bad = low if low < 0 else high
    raise ValueError(f'{where}: {name} holds the id {bad}, outside the vocabulary '
                     f'[0, {vocab_size}) of the model')


def check_same_batch(where: str, inputs: Any, targets: Any) -> None:
  """Refuses `inputs` and `targets` of different batch sizes (one row each per sentence)."""
  if np.shape(inputs)[0] != np.shape(targets)[0]:
    raise ValueError(f'{where}: inputs has {np.shape(inputs)[0]} rows but targets '
                     f'{np.shape(targets)[0]}; expected one target row per input row')
