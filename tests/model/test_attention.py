"""Scaled dot-product attention (§3.2.1) against a plain numpy reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import attention


def numpy_attention(q, k, v, mask):
  """softmax(QK^T/sqrt(d_k))V per head, written out with numpy in float64."""
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(q.shape[-1])
  logits = np.where(np.broadcast_to(mask, logits.shape), logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w = w / w.sum(-1, keepdims=True)
  return np.einsum('bhqk,bkhd->bqhd', w, v), w


def _inputs(d_v=8, seed=0):
  rng = np.random.RandomState(seed)
  q = rng.randn(2, 5, 3, 8).astype(np.float32)
  k = rng.randn(2, 6, 3, 8).astype(np.float32)
  v = rng.randn(2, 6, 3, d_v).astype(np.float32)
  tokens = np.array([[4, 5, 6, 7, 8, 9], [4, 5, 6, 0, 0, 0]])
  return q, k, v, tokens


@pytest.mark.parametrize('d_v', [8, 5])
def test_fast_and_reference_paths_equal_numpy(d_v):
  q, k, v, tokens = _inputs(d_v)
  mask = attention.padding_mask(jnp.asarray(tokens))
  expected, _ = numpy_attention(q, k, v, np.asarray(mask))
  fast = attention.dot_product_attention(q, k, v, mask)
  ref = attention.dot_product_attention_reference(q, k, v, mask)
  np.testing.assert_allclose(fast, expected, atol=1e-5)
  np.testing.assert_allclose(ref, expected, atol=1e-5)
  assert fast.shape == (2, 5, 3, d_v)


@pytest.mark.parametrize('d_v', [8, 5])
def test_heads_first_paths_equal_numpy(d_v):
  """Decoding's layouts: keys/values `[batch, heads, kv, d]`, by matmuls and by products."""
  q, k, v, tokens = _inputs(d_v)
  mask = np.asarray(attention.padding_mask(jnp.asarray(tokens)))
  expected, _ = numpy_attention(q, k, v, mask)
  k_hf, v_hf = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
  for fn in (attention.heads_first_attention, attention.few_query_attention):
    out = fn(q, k_hf, v_hf, mask)
    assert out.shape == (2, 5, 3, d_v) and out.dtype == jnp.float32
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_cached_attention_reads_only_the_filled_positions():
  q, k, v, _ = _inputs(seed=2)
  k_hf, v_hf = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
  garbage = np.full_like(k_hf[:, :, :2], 1e3)  # beyond the fill index: must not count
  out = attention.cached_attention(q[:, :1], np.concatenate([k_hf[:, :, :4], garbage], 2),
                                   np.concatenate([v_hf[:, :, :4], garbage], 2), 4)
  expected, _ = numpy_attention(q[:, :1], k[:, :4], v[:, :4], np.ones((1, 1, 1, 4), bool))
  np.testing.assert_allclose(out, expected, atol=1e-5)


def test_causal_self_attention_equals_numpy():
  rng = np.random.RandomState(1)
  x = rng.randn(2, 7, 4, 16).astype(np.float32)
  mask = attention.causal_mask(7)
  expected, _ = numpy_attention(x, x, x, np.asarray(mask))
  np.testing.assert_allclose(attention.dot_product_attention(x, x, x, mask), expected, atol=1e-5)


def test_masked_positions_get_exactly_zero_weight():
  q, k, _, tokens = _inputs()
  mask = attention.combine_masks(attention.padding_mask(jnp.asarray(tokens)),
                                 attention.causal_mask(6)[:, :, :5, :])
  w = np.asarray(attention.attention_weights(q, k, mask))
  full_mask = np.broadcast_to(np.asarray(mask), w.shape)
  assert np.all(w[~full_mask] == 0.0)
  np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
  _, expected = numpy_attention(q, k, k, np.asarray(mask))
  np.testing.assert_allclose(w, expected, atol=1e-6)


def test_fully_masked_row_is_finite():
  q, k, v, _ = _inputs()
  mask = jnp.zeros((2, 1, 1, 6), jnp.bool_)
  out = attention.dot_product_attention_reference(q, k, v, mask)
  assert np.all(np.isfinite(out))


def test_changing_a_padded_key_changes_nothing():
  q, k, v, tokens = _inputs()
  mask = attention.padding_mask(jnp.asarray(tokens))
  out = attention.dot_product_attention(q, k, v, mask)
  k2, v2 = k.copy(), v.copy()
  k2[1, 4], v2[1, 4] = 100.0, -100.0
  out2 = attention.dot_product_attention(q, k2, v2, mask)
  np.testing.assert_array_equal(out, out2)


def test_split_and_merge_heads_are_inverse():
  x = jnp.arange(2 * 3 * 12, dtype=jnp.float32).reshape(2, 3, 12)
  heads = attention.split_heads(x, 4)
  assert heads.shape == (2, 3, 4, 3)
  np.testing.assert_array_equal(heads[0, 0, 1], [3.0, 4.0, 5.0])
  np.testing.assert_array_equal(attention.merge_heads(heads), x)


def test_attention_dropout_equals_explicit_inverted_dropout():
  q, k, v, tokens = _inputs()
  mask = attention.padding_mask(jnp.asarray(tokens))
  rng = jax.random.PRNGKey(3)
  out = attention.dot_product_attention(q, k, v, mask, dropout_rate=0.25, dropout_rng=rng)
  _, weights = numpy_attention(q, k, v, np.asarray(mask))
  keep = np.asarray(jax.random.bernoulli(rng, 0.75, weights.shape))
  assert 0.6 < keep.mean() < 0.9
  expected = np.einsum('bhqk,bkhd->bqhd', np.where(keep, weights / 0.75, 0.0), v)
  np.testing.assert_allclose(out, expected, atol=1e-5)
