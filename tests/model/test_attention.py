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


def test_a_decoding_step_reads_only_the_filled_cache_positions():
  """One query over a cache (the self-attention step): positions past the fill are masked."""
  q, k, v, _ = _inputs(seed=2)
  garbage = np.full_like(k[:, :2], 1e3)  # beyond the fill index: must not count
  filled = (np.arange(6) < 4)[None, None, None]
  out = attention.dot_product_attention(q[:, :1], np.concatenate([k[:, :4], garbage], 1),
                                         np.concatenate([v[:, :4], garbage], 1), filled)
  expected, _ = numpy_attention(q[:, :1], k[:, :4], v[:, :4], np.ones((1, 1, 1, 4), bool))
  np.testing.assert_allclose(out, expected, atol=1e-5)


# Literal lengths, not FEW_QUERIES: the threshold is what this test pins (8, the shortest
# training bucket), so moving it fails here.
@pytest.mark.parametrize('q_len, form', [(1, 'heads_first_attention'),
                                         (2, 'few_query_attention'),
                                         (4, 'few_query_attention'),
                                         (7, 'few_query_attention'),
                                         (8, 'fused'), (9, 'fused')])
def test_dot_product_attention_picks_its_form_by_shape(q_len, form, monkeypatch):
  """The dispatcher's choice, and its result equal to numpy, for each query count."""
  q, k, v, tokens = _inputs(seed=3)
  q = np.random.RandomState(4).randn(2, q_len, 3, 8).astype(np.float32)
  mask = np.asarray(attention.padding_mask(jnp.asarray(tokens)))
  called = []
  for name in ('heads_first_attention', 'few_query_attention'):
    monkeypatch.setattr(attention, name, (lambda f, n: lambda *a, **kw: called.append(n) or
                                          f(*a, **kw))(getattr(attention, name), name))
  out = attention.dot_product_attention(q, k, v, mask)
  assert called == ([] if form == 'fused' else [form])
  np.testing.assert_allclose(out, numpy_attention(q, k, v, mask)[0], atol=1e-5)


@pytest.mark.parametrize('q_len', [1, 4, 9])
def test_bias_and_scale_enter_the_logits_on_every_form(q_len):
  """softmax(Q K^T * scale + bias) V, whichever form the shape picks."""
  rng = np.random.RandomState(5)
  q = rng.randn(2, q_len, 3, 8).astype(np.float32)
  _, k, v, tokens = _inputs(seed=5)
  mask = np.asarray(attention.padding_mask(jnp.asarray(tokens)))
  bias = rng.randn(1, 3, q_len, 6).astype(np.float32)
  logits = np.einsum('bqhd,bkhd->bhqk', q.astype(np.float64), k) * 0.3 + bias
  logits = np.where(np.broadcast_to(mask, logits.shape), logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  expected = np.einsum('bhqk,bkhd->bqhd', w, v)
  out, weights = attention.dot_product_attention(q, k, v, mask, bias=bias, scale=0.3,
                                                 return_weights=True)
  np.testing.assert_allclose(weights, w, atol=1e-5)
  np.testing.assert_allclose(out, expected, atol=1e-5)
  np.testing.assert_allclose(attention.dot_product_attention(q, k, v, mask, bias=bias, scale=0.3),
                             expected, atol=1e-5)


def test_causal_self_attention_equals_numpy():
  rng = np.random.RandomState(1)
  x = rng.randn(2, 7, 4, 16).astype(np.float32)
  mask = attention.causal_mask(7)
  # Written out by hand (§3.2.3): query i sees keys 0..i, never a later one.
  by_hand = np.array([[1, 0, 0, 0, 0, 0, 0],
                      [1, 1, 0, 0, 0, 0, 0],
                      [1, 1, 1, 0, 0, 0, 0],
                      [1, 1, 1, 1, 0, 0, 0],
                      [1, 1, 1, 1, 1, 0, 0],
                      [1, 1, 1, 1, 1, 1, 0],
                      [1, 1, 1, 1, 1, 1, 1]], bool)[None, None]
  assert mask.shape == (1, 1, 7, 7) and mask.dtype == jnp.bool_
  np.testing.assert_array_equal(mask, by_hand)
  expected, _ = numpy_attention(x, x, x, by_hand)
  np.testing.assert_allclose(attention.dot_product_attention(x, x, x, mask), expected, atol=1e-5)


def test_masked_positions_get_exactly_zero_weight():
  q, k, _, tokens = _inputs()
  mask = attention.combine_masks(attention.padding_mask(jnp.asarray(tokens)),
                                 attention.causal_mask(6)[:, :, :5, :])
  w = np.asarray(attention.attention_weights(q, k, mask))
  _, returned = attention.dot_product_attention(q, k, k, mask, return_weights=True)
  np.testing.assert_array_equal(returned, w)
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


def _grouped_numpy(q, k, v, mask, bias=None):
  """Grouped-query Eq. 1 by hand: key/value head g serves query heads g*r .. g*r + r - 1."""
  r = q.shape[2] // k.shape[2]
  k, v = np.repeat(k, r, axis=2), np.repeat(v, r, axis=2)
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(q.shape[-1])
  if bias is not None:
    logits = logits + bias
  logits = np.where(np.broadcast_to(mask, logits.shape), logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  return np.einsum('bhqk,bkhd->bqhd', w, v), w


@pytest.mark.parametrize('kv_heads', [2, 1])
@pytest.mark.parametrize('q_len', [1, 3, 9])
def test_every_form_takes_grouped_key_value_heads(kv_heads, q_len):
  """4 query heads over 2 (grouped-query) or 1 (multi-query) key/value heads: the dispatcher
  (each of its forms by shape), the weights and the heads-first decoding forms equal numpy,
  with a padding mask, a causal one and a per-head bias."""
  rng = np.random.RandomState(6)
  q = rng.randn(2, q_len, 4, 8).astype(np.float32)
  k = rng.randn(2, 6, kv_heads, 8).astype(np.float32)
  v = rng.randn(2, 6, kv_heads, 8).astype(np.float32)
  padding = np.asarray(attention.padding_mask(jnp.asarray([[4, 5, 6, 7, 8, 9],
                                                           [4, 5, 6, 0, 0, 0]])))
  causal = np.tril(np.ones((q_len, 6), bool), k=max(0, 6 - q_len))[None, None]
  bias = rng.randn(1, 4, q_len, 6).astype(np.float32)
  for mask, b in ((padding, None), (causal, None), (padding, bias)):
    expected, weights = _grouped_numpy(q, k, v, mask, b)
    np.testing.assert_allclose(attention.dot_product_attention(q, k, v, mask, bias=b),
                               expected, atol=2e-5)
    out, returned = attention.dot_product_attention(q, k, v, mask, bias=b, return_weights=True)
    np.testing.assert_allclose(out, expected, atol=2e-5)
    np.testing.assert_allclose(returned, weights, atol=2e-6)
    np.testing.assert_allclose(attention.attention_weights(q, k, mask, bias=b), weights,
                               atol=2e-6)
    for form in (attention.heads_first_attention, attention.few_query_attention):
      np.testing.assert_allclose(form(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3),
                                      mask, bias=b), expected, atol=2e-5)


def test_key_value_heads_must_divide_the_query_heads():
  q, kv = np.zeros((1, 2, 4, 8), np.float32), np.zeros((1, 3, 3, 8), np.float32)
  with pytest.raises(ValueError, match='4 query heads cannot share 3 key/value heads'):
    attention.dot_product_attention_reference(q, kv, kv)
