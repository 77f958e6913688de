"""The decode cache of a beam search (`search.py`): tiled over beams, reordered by parent beam
every step, and grown with the output in segments (`cache_lengths`).

Cache leaves are `[batch * beam, ...]`, sentence-major (row b * K + k); 0-d leaves (a decode
position shared by every row) are not per hypothesis and pass through unchanged.
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp

Cache = Any
# (cache, length) -> the cache with room for `length` decode positions (see `beam_search`).
GrowCache = Callable[[Cache, int], Cache]
# (cache, parents [batch * beam] int32) -> the cache of the hypotheses continuing those rows.
ReorderCache = Callable[[Cache, jax.Array], Cache]
# First length of a growing cache: short outputs never touch a longer one.
FIRST_CACHE_LENGTH = 16


def _tile_beams(cache: Cache, beam_size: int) -> Cache:
  """[B, ...] -> [B * K, ...]: each sentence K times (row b * K + k)."""
  return jax.tree_util.tree_map(
      lambda x: x if jnp.ndim(x) == 0 else jnp.repeat(x, beam_size, axis=0),
      cache)


def _gather_beams(cache: Cache, flat_index: jax.Array) -> Cache:
  """Selects rows `flat_index` [B * K] of every non-scalar leaf.

  0-d leaves (e.g. a decode position shared by all rows) are not per
  hypothesis, so they pass through unchanged. The indices are in bounds by
  construction, so the gather skips the out-of-bounds fill (a select over the
  whole cache every step: beam decode 1.035x, benchmarks in docs/performance.md).
  """
  return jax.tree_util.tree_map(
      lambda x: x if jnp.ndim(x) == 0 else x.at[flat_index].get(
          mode='promise_in_bounds'),
      cache)


def cache_lengths(max_decode_len: int, first: int = FIRST_CACHE_LENGTH) -> tuple[int, ...]:
  """Lengths of a growing cache, one per loop segment: first, 2 first, 4 first, ...,
  ending with max_decode_len (e.g. 82 -> (16, 32, 64, 82)).

  A step's self-attention reads, and its beam reorder copies, the whole cache, filled or
  not, so a cache that doubles as the output grows does at most twice the work of one that
  is always exactly full, where a fixed max_decode_len cache does (max_decode_len / step)
  times it; each segment is one more copy of the loop body to compile.
  """
  lengths, n = [], first
  while n < max_decode_len:
    lengths.append(n)
    n *= 2
  return (*lengths, max_decode_len)
