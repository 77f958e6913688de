"""The argument checks of the public array functions (attention masks, the forms of Eq. 1,
the losses, `shift_right`, `sinusoidal_positions`, ...): a wrong argument is refused in one
line naming the function and the argument, instead of an error from deep inside jax.

Every check here is static: it reads a shape, a rank, a dtype or a Python number, never an
array's values, so under `jit` it runs once at trace time and costs nothing at run time (and
never touches a traced value). The checks of token ids against a vocabulary, which do read
values when they are known, are `id_arrays.check_ids`.
"""

import numbers
from typing import Any, Mapping, Optional, Tuple

import jax
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
                            max_decode_len: int, **hooks: Any) -> None:
  """Refuses, before tracing, what no search can run with: a `logits_fn` (or one of the
  optional cache `hooks`, by name) that is not callable, or a batch_size, beam_size or
  max_decode_len below 1 (static Python ints)."""
  if not callable(logits_fn):
    raise TypeError(f'{where}: logits_fn is a {type(logits_fn).__name__}; expected a function '
                    '(tokens, cache) -> (logits, cache)')
  for name, hook in hooks.items():
    if hook is not None and not callable(hook):
      raise TypeError(f'{where}: {name} is a {type(hook).__name__}; expected a function of '
                      'the cache, or None')
  for name, value in (('batch_size', batch_size), ('beam_size', beam_size),
                      ('max_decode_len', max_decode_len)):
    if isinstance(value, int) and value < 1:
      raise ValueError(f'{where}: {name}={value}; expected 1 or more')


def check_real(where: str, name: str, value: Any, *, minimum: Optional[float] = None,
               hint: str = '') -> None:
  """Refuses `value` unless it is a real number (a Python or numpy scalar, or a 0-d array),
  finite and >= `minimum` when its value is known; a traced 0-d array is checked for its
  dtype alone. `hint` completes 'expected a finite number' (e.g. '(0.6 in the paper)').

  Raises:
    TypeError: not a number (a string, None, a bool, an array of more than one value).
    ValueError: not finite (nan, inf) or below `minimum`.
  """
  dtype = _dtype(value)
  if (isinstance(value, (bool, np.bool_)) or dtype is None or dtype == np.dtype(object)
      or not jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.complexfloating)
      or np.ndim(value) != 0):
    raise TypeError(f'{where}: {name} is a {type(value).__name__} ({value!r}); expected a '
                    f'finite number {hint}'.rstrip())
  if _is_tracer(value):
    return
  number = float(value)
  if not np.isfinite(number) or (minimum is not None and number < minimum):
    least = '' if minimum is None else f' >= {minimum}'
    raise ValueError(f'{where}: {name}={number}; expected a finite number{least} '
                     f'{hint}'.rstrip())


def _is_tracer(x: Any) -> bool:
  """Whether `x` is traced (under `jit`): its values are unknown, only shape and dtype."""
  return isinstance(x, jax.core.Tracer)


def _flat_shapes(tree: Any) -> dict:
  """{'[key][key]...': shape} of every leaf of `tree` (arrays or ShapeDtypeStructs)."""
  return {jax.tree_util.keystr(path): tuple(np.shape(leaf))
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def check_tree_shapes(where: str, name: str, tree: Any, reference: Any, reference_name: str,
                      expected: str) -> None:
  """Refuses `tree` unless it holds a leaf at every path of `reference`, of the same shape,
  and none elsewhere (static: shapes alone, under `jit` at trace time). The message names
  the first path that differs, how many more do, and `expected` (what `tree` should be).

  Raises:
    TypeError: `tree` is no dict where `reference` is one.
    ValueError: a leaf missing, one `reference` lacks, or one of another shape.
  """
  if isinstance(reference, Mapping) and not isinstance(tree, Mapping):
    raise TypeError(f'{where}: {name} is a {type(tree).__name__}; expected {expected}')
  leaves, structure = jax.tree_util.tree_flatten(tree)
  reference_leaves, reference_structure = jax.tree_util.tree_flatten(reference)
  if structure == reference_structure and all(
      np.shape(a) == np.shape(b) for a, b in zip(leaves, reference_leaves)):
    return  # the common case, without the paths
  want, got = _flat_shapes(reference), _flat_shapes(tree)
  differ = [p for p in sorted(want.keys() | got.keys()) if want.get(p) != got.get(p)]
  if not differ:
    return
  path = differ[0]
  if path not in got:
    what = f'{name}{path} is missing ({reference_name} has it, of shape {want[path]})'
  elif path not in want:
    what = f'{name}{path} (of shape {got[path]}) is not in {reference_name}'
  else:
    what = f'{name}{path} has shape {got[path]}, {reference_name} {want[path]}'
  more = f' ({len(differ) - 1} more differ)' if len(differ) > 1 else ''
  raise ValueError(f'{where}: {what}{more}; expected {expected}')


def check_rng(where: str, rng) -> None:
  """Refuses what is no PRNG key: a new-style key array, or an old-style uint32 one."""
  dtype = getattr(rng, 'dtype', None)
  if dtype is None or not (jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
                           or dtype == jnp.uint32):
    raise TypeError(f'{where}: rng is a {type(rng).__name__}'
                    f'{"" if dtype is None else f" of dtype {dtype}"}; expected a PRNG key, '
                    'e.g. jax.random.PRNGKey(0)')
