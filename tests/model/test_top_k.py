"""`top_k.top_k` against `jax.lax.top_k`: the same values and indices, ties and -inf included,
whatever the chunk (a divisor of the row, or padded)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import top_k


def _rows(seed, shape, levels=None):
  rng = np.random.default_rng(seed)
  if levels is None:
    return rng.standard_normal(shape).astype(np.float32)
  return rng.integers(0, levels, shape).astype(np.float32)  # many ties


@pytest.mark.parametrize('n, k, chunk', [(4000, 8, 50), (4000, 8, 63), (1031, 3, 32),
                                         (37000, 8, 185), (4000, 1, 64)])
@pytest.mark.parametrize('levels', [None, 5])
def test_equal_to_lax_top_k_ties_included(n, k, chunk, levels):
  x = _rows(n + k, (3, 2, n), levels)
  x[0, 0, ::7] = -np.inf  # constrained decoding rules tokens out with -inf
  x[1, 1, :] = -np.inf    # a row with nothing allowed: every index ties
  want = jax.lax.top_k(jnp.asarray(x), k)
  got = jax.jit(lambda x: top_k.top_k(x, k, chunk=chunk))(jnp.asarray(x))
  np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
  np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
  assert got[1].dtype == jnp.int32


def test_chunk_size_prefers_a_divisor_near_the_square_root_and_skips_short_rows():
  assert top_k.chunk_size(4000, 8) == 50        # isqrt 63; divisors 50 and 80 nearest
  assert top_k.chunk_size(37000, 8) == 185
  assert top_k.chunk_size(1031, 8) == 32        # a prime: padded chunks of isqrt(n)
  assert top_k.chunk_size(512, 8) == 0          # short rows: one sort
  assert top_k.chunk_size(4000, 40) == 0        # k chunks would be most of the row


def test_the_default_on_this_backend_chunks_and_agrees():
  x = jnp.asarray(_rows(0, (16, 4000)))
  got, want = top_k.top_k(x, 8), jax.lax.top_k(x, 8)
  assert jax.default_backend() != 'cpu' or top_k.chunk_size(4000, 8)
  np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
