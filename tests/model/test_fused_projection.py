"""fused_projection: the cached step's W^Q, W^K, W^V as one product, against flax's three."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import fused_projection, incremental, multi_head_attention as mha
from t2t_jax.model import transformer as model


def _projections(heads, kv_heads, d_k, bias, x):
  """Three flax `DenseGeneral`s as the attention layer builds them: (params, outputs)."""
  layers = {'query': mha.head_projection(heads, d_k, jnp.float32, bias=bias),
            'key': mha.head_projection(kv_heads, d_k, jnp.float32, bias=bias),
            'value': mha.head_projection(kv_heads, d_k, jnp.float32, bias=bias)}
  params, outputs = {}, []
  for i, (name, layer) in enumerate(layers.items()):
    p = nn.meta.unbox(layer.init(jax.random.PRNGKey(i), x)['params'])
    if bias:  # non-zero biases, so that adding them is checked
      p = dict(p, bias=jax.random.normal(jax.random.PRNGKey(10 + i), p['bias'].shape))
    params[name] = p
    outputs.append(layer.apply({'params': p}, x))
  return params, outputs


@pytest.mark.parametrize('heads,kv_heads,bias', [(4, 4, False), (4, 2, True), (4, 1, False)])
def test_one_product_gives_the_three_projections(heads, kv_heads, bias):
  x = jax.random.normal(jax.random.PRNGKey(7), (16, 1, 32))
  params, want = _projections(heads, kv_heads, 8, bias, x)
  assert fused_projection.can_fuse(params, ('query', 'key', 'value'), bias)
  got = fused_projection.fused_head_projections(x, params, ('query', 'key', 'value'))
  for g, w in zip(got, want):
    assert g.shape == w.shape and g.dtype == w.dtype
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)


def test_a_layer_with_more_than_kernels_keeps_its_own_projections():
  kernel = jnp.zeros((8, 2, 4))
  plain = {n: {'kernel': kernel} for n in ('query', 'key', 'value')}
  assert fused_projection.can_fuse(plain, ('query', 'key', 'value'), bias=False)
  assert not fused_projection.can_fuse(plain, ('query', 'key', 'value'), bias=True)
  adapted = dict(plain, value={'kernel': kernel, 'lora_a': jnp.zeros((8, 2))})
  assert not fused_projection.can_fuse(adapted, ('query', 'key', 'value'), bias=False)
  assert not fused_projection.can_fuse({'query': plain['query']}, ('query', 'key'), False)


def test_decoding_with_the_fused_step_is_the_teacher_forced_model(monkeypatch):
  cfg = model.TransformerConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=4,
                                num_layers=2, max_len=32, dropout_rate=0.0,
                                deterministic=True)
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  inputs = rng.integers(2, 64, (3, 7)).astype(np.int32)
  targets = rng.integers(2, 64, (3, 6)).astype(np.int32)
  calls = []
  real = fused_projection.fused_head_projections
  monkeypatch.setattr(fused_projection, 'fused_head_projections',
                      lambda *a, **k: calls.append(1) or real(*a, **k))
  fused = np.asarray(incremental.incremental_logits(cfg, params, inputs, targets, 16))
  assert calls, 'the cached step did not take the fused projection'
  monkeypatch.setattr(mha.MultiHeadAttention, '_fusable', lambda self: False)
  three = np.asarray(incremental.incremental_logits(cfg, params, inputs, targets, 16))
  forced = np.asarray(model.Transformer(cfg).apply({'params': params}, inputs, targets))
  np.testing.assert_allclose(fused, three, rtol=0, atol=1e-5)
  np.testing.assert_allclose(fused, forced, rtol=0, atol=1e-4)
