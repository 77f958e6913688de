"""The argument checks of the public array functions (attention masks, the forms of Eq. 1,
the losses, `shift_right`, `sinusoidal_positions`, ...): a wrong argument is refused in one
line naming the function and the argument, instead of an error from deep inside jax.

Every check here is static: it reads a shape, a rank, a dtype or a Python number, never an
array's values, so under `jit` it runs once at trace time and costs nothing at run time (and
never touches a traced value). The checks of token ids against a vocabulary, which do read
values when they are known, are `id_arrays.check_ids`.
"""

import numbers
from typing import Any, Optional, Tuple

import jax.numpy as jnp
import numpy as np

# What an array argument must hold: a dtype kind -> (test, what the message says).
_KINDS = {
    'int': (lambda d: jnp.issubdtype(d, jnp.integer), 'integers (e.g. int32)'),
    'float': (lambda d: jnp.issubdtype(d, jnp.floating), 'floats (float32 or bfloat16)'),
    'number': (lambda d: jnp.issubdtype(d, jnp.number) or jnp.issubdtype(d, jnp.bool_),
               'numbers'),
    'mask': (lambda d: jnp.issubdtype(d, jnp.bool_) or jnp.issubdtype(d, jnp.integer),
             'booleans (True = may attend)'),
}


def _dtype(x: Any):
  """`x`'s dtype without copying it (an array, a tracer, a ShapeDtypeStruct), or that of
  `np.asarray(x)` for a Python number or list; None for what is no array at all."""
  dtype = getattr(x, 'dtype', None)
  if dtype is not None:
    return dtype
  if isinstance(x, (str, bytes, dict)) or x is None:
    return None
  try:
    return np.asarray(x).dtype
  except (TypeError, ValueError):
    return None


def check_array(where: str, name: str, x: Any, *, kind: str = 'number',
                rank: Optional[int] = None, layout: str = '',
                nonempty: bool = False) -> Tuple[int, ...]:
  """Refuses `x` unless it is an array of `kind` ('int', 'float', 'number', 'mask') and, if
  given, of `rank` dimensions (`layout`, e.g. '[batch, length]', says which) with none of
  size 0 when `nonempty`. Returns its shape.

  Raises:
    TypeError: not an array, or of the wrong dtype.
    ValueError: the wrong rank, or empty.
  """
  dtype = _dtype(x)
  test, wanted = _KINDS[kind]
  if dtype is None or dtype == np.dtype(object) or not test(dtype):
    got = f'dtype {dtype}' if dtype is not None else f'a {type(x).__name__}'
    raise TypeError(f'{where}: {name} is {got}; expected an array of {wanted}')
  shape = tuple(np.shape(x))
  if rank is not None and len(shape) != rank:
    raise ValueError(f'{where}: {name} has shape {shape}; expected {rank} dimensions '
                     f'{layout}'.rstrip())
  if nonempty and 0 in shape:
    raise ValueError(f'{where}: {name} has shape {shape}, an empty array; expected '
                     f'{layout or "at least one element"}')
  return shape


def check_int(where: str, name: str, value: Any, minimum: Optional[int] = None) -> int:
  """Refuses `value` unless it is a Python (or numpy) integer, not a bool, >= `minimum`."""
  if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
    raise TypeError(f'{where}: {name} is a {type(value).__name__} ({value!r}); expected an '
                    'integer')
  if minimum is not None and value < minimum:
    raise ValueError(f'{where}: {name}={value}; expected an integer >= {minimum}')
  return int(value)


def check_number(where: str, name: str, value: Any) -> None:
  """Refuses `value` unless it is a number or an array of numbers (a scalar of a sum, a
  float rate): a string or None is a TypeError naming `name`."""
  check_array(where, name, value, kind='number')


def check_search_arguments(where: str, logits_fn: Any, batch_size: int, beam_size: int,
                            max_decode_len: int) -> None:
  """Refuses, before tracing, what no search can run with: a `logits_fn` that is not
  callable, or a batch_size, beam_size or max_decode_len below 1 (static Python ints)."""
  if not callable(logits_fn):
    raise TypeError(f'{where}: logits_fn is a {type(logits_fn).__name__}; expected a function '
                    '(tokens, cache) -> (logits, cache)')
  for name, value in (('batch_size', batch_size), ('beam_size', beam_size),
                      ('max_decode_len', max_decode_len)):
    if isinstance(value, int) and value < 1:
      raise ValueError(f'{where}: {name}={value}; expected 1 or more')
