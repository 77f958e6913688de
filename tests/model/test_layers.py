"""Positions (§3.5), the shared embedding (§3.4), FFN (§3.3) and residual blocks (§3.1)."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.model import layers


def test_sinusoidal_positions_equal_the_formula():
  d_model = 16
  table = layers.sinusoidal_positions(50, d_model)
  for pos in (0, 1, 7, 49):
    for i in range(d_model // 2):
      angle = pos / 10000 ** (2 * i / d_model)
      assert math.isclose(table[pos, 2 * i], math.sin(angle), abs_tol=1e-6)
      assert math.isclose(table[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-6)


def test_sinusoidal_odd_width():
  table = layers.sinusoidal_positions(4, 5)
  assert table.shape == (4, 5)
  assert math.isclose(table[3, 4], math.sin(3 / 10000 ** (4 / 5)), abs_tol=1e-6)


def test_shared_embedding_scales_and_attends():
  emb = layers.SharedEmbedding(vocab_size=10, d_model=4)
  # Parts declare logical axes (model/logical_axes.py): `init` boxes them, unbox for arrays.
  params = nn.meta.unbox(emb.init(jax.random.PRNGKey(0), jnp.zeros((1, 1), jnp.int32)))
  table = np.asarray(params['params']['embedding'])
  out = emb.apply(params, jnp.array([[3, 7]]))
  np.testing.assert_allclose(out[0, 1], table[7] * 2.0, rtol=1e-6)  # sqrt(4) = 2
  x = np.ones((1, 4), np.float32)
  logits = emb.apply(params, x, method=layers.SharedEmbedding.attend)
  np.testing.assert_allclose(logits, x @ table.T, rtol=1e-5)


def test_feed_forward_equals_equation_2():
  ffn = layers.FeedForward(d_ff=6, d_model=3)
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 3))
  params = nn.meta.unbox(ffn.init(jax.random.PRNGKey(0), x)['params'])
  w1, b1 = params['wi']['kernel'], params['wi']['bias']
  w2, b2 = params['wo']['kernel'], params['wo']['bias']
  expected = np.maximum(0, np.asarray(x) @ w1 + b1) @ w2 + b2
  np.testing.assert_allclose(ffn.apply({'params': params}, x), expected, atol=1e-5)


def _layer_norm(x):
  mean = x.mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)


def test_residual_post_and_pre_norm():
  x = np.asarray(jax.random.normal(jax.random.PRNGKey(2), (2, 3, 8)))
  sub = lambda y: 2.0 * y + 1.0  # noqa: E731
  for position, expected in (('post', _layer_norm(x + sub(x))), ('pre', x + sub(_layer_norm(x)))):
    block = layers.Residual(norm_position=position, dropout_rate=0.1)
    params = block.init(jax.random.PRNGKey(0), x, sub)
    np.testing.assert_allclose(block.apply(params, x, sub), expected, atol=1e-4)


def test_learned_positions_are_a_parameter():
  module = layers.AddPositions(max_len=10, positional='learned')
  x = jnp.zeros((1, 5, 4))
  params = nn.meta.unbox(module.init(jax.random.PRNGKey(0), x))
  table = params['params']['positions']
  assert table.shape == (10, 4)
  np.testing.assert_allclose(module.apply(params, x)[0], table[:5])
