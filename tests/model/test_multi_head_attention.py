"""`MultiHeadAttention`'s extension points (§3.2.2): grouped key/value heads, the query/key
transform applied before caching, and the shared part every layer's attention receives."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import attention, incremental, layers, transformer

# One layer, 12 positions: the compiles (teacher forcing, two decode caches, capture) are
# what these tests cost.
CFG = transformer.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
                                    num_layers=1, max_len=12, dropout_rate=0.0)
INPUTS = np.array([[5, 9, 12, 7, 1, 0], [17, 3, 1, 0, 0, 0]], np.int32)
TARGETS = np.array([[8, 14, 22, 1, 0], [30, 6, 11, 19, 1]], np.int32)


@functools.lru_cache(maxsize=None)
def _params(kv_heads: int):
  return transformer.init_params(CFG.replace(num_kv_heads=kv_heads), jax.random.PRNGKey(0))


def _repeat_kv_heads(params, r: int):
  """The paper's (ungrouped) parameters that compute what grouped ones do: each key/value
  head's kernel repeated for the r query heads it serves."""
  def expand(path, x):
    names = [getattr(k, 'key', '') for k in path]
    if 'kernel' in names and ('key' in names or 'value' in names):
      return jnp.repeat(x, r, axis=1)      # [d_model, kv_heads, d] -> [d_model, heads, d]
    return x
  return jax.tree_util.tree_map_with_path(expand, params)


@pytest.mark.parametrize('kv_heads', [2, 1])
def test_grouped_query_attention_is_the_paper_model_with_tied_key_value_heads(kv_heads):
  """W^K, W^V project to kv_heads heads `[d_model, kv_heads, d_k]`; the logits equal those of
  the paper's model whose key/value heads are those kernels repeated (the reference), in
  training and in cached decoding, whose cache holds kv_heads heads."""
  cfg = CFG.replace(num_kv_heads=kv_heads)
  params = _params(kv_heads)
  attn = params['decoder']['layer_0']['self_attention']
  assert attn['key']['kernel'].shape == (32, kv_heads, 8)
  assert attn['query']['kernel'].shape == (32, 4, 8)
  # Compiled: one program each, not one per operation.
  grouped = jax.jit(lambda p: transformer.as_model(cfg, deterministic=True).apply(
      {'params': p}, INPUTS, TARGETS))(params)
  tied = jax.jit(lambda p: transformer.Transformer(CFG).apply(
      {'params': p}, INPUTS, TARGETS, rngs={'dropout': jax.random.PRNGKey(0)}))(
          _repeat_kv_heads(params, 4 // kv_heads))
  np.testing.assert_allclose(grouped, tied, atol=2e-5)
  cache = incremental.init_cache(cfg, 8, 12)
  assert cache['decoder']['layer_0']['self_attention']['cached_key'].shape == (8, kv_heads, 12,
                                                                              8)
  if kv_heads == 1:  # cached decoding of grouped heads (every decoding form), once
    assert incremental.check_incremental(cfg, params, INPUTS, TARGETS) < 2e-5


def test_the_paper_has_one_key_value_head_per_query_head():
  """num_kv_heads None (or equal to num_heads) is the paper: it follows num_heads."""
  assert CFG.num_kv_heads is None and CFG.kv_heads == 4
  assert CFG.replace(num_kv_heads=4) == CFG
  assert CFG.replace(num_heads=8, d_k=4, d_v=4).kv_heads == 8
  assert CFG.replace(num_kv_heads=2).replace(num_heads=8, d_k=4, d_v=4).kv_heads == 2


def _recording_rotation(calls):
  """Rotary positions on every attention, the encoder-decoder one included (its queries at
  the target positions, its keys at the source positions), recording each call."""
  def rotate(x, positions, *, kind, role):
    calls.append((kind, role, x.shape[1], positions.shape[-1]))
    angle = positions[:, :, None, None].astype(jnp.float32) * 0.3
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * jnp.cos(angle) - x2 * jnp.sin(angle),
                            x1 * jnp.sin(angle) + x2 * jnp.cos(angle)], -1)
  return rotate


def test_the_key_transform_runs_once_per_key_before_the_cache():
  """A decoding step transforms its one new key (not the whole cache); the encoder output's
  keys are transformed once per sentence (`cross_key_values`), at the source positions."""
  calls = []
  model = transformer.Transformer(CFG, qk_transform=_recording_rotation(calls), positions=None)
  params = _params(4)
  context = incremental.decode_context(model, params, INPUTS)
  calls.clear()
  cache = incremental.init_cache(model, 2, 10)
  calls.clear()
  incremental.decode_step(model, params, cache, np.ones((2, 1), np.int32), context)
  steps = {(kind, role, length, slots) for kind, role, length, slots in calls}
  assert steps == {('decoder', 'query', 1, 1), ('decoder', 'key', 1, 1),
                   ('encoder_decoder', 'query', 1, 1)}
  calls.clear()
  incremental.cross_key_values(model, params, jnp.zeros((2, 6, 32)))
  # (An empty query first: a module the transform makes keeps its auto-name, as below.)
  assert calls == [('encoder_decoder', 'query', 0, 0),
                   ('encoder_decoder', 'key', 6, 6)] * CFG.num_layers
  assert incremental.check_incremental(model, params, INPUTS, TARGETS) < 2e-5


def test_a_transform_with_auto_named_modules_gives_keys_their_own_in_decoding():
  """QK-norm as a user writes it first, one unnamed RMSNorm per call: linen names them by
  call order (RMSNorm_0 for queries, RMSNorm_1 for keys), and the keys-only call that decoding
  makes for the encoder output must not hand the keys RMSNorm_0."""
  def qk_norm(x, positions, *, kind, role):
    del positions, kind, role
    return layers.nn.RMSNorm()(x)
  model = transformer.Transformer(CFG, qk_transform=qk_norm)
  params = transformer.init_params(model, jax.random.PRNGKey(0))
  cross = params['decoder']['layer_0']['cross_attention']
  assert {'RMSNorm_0', 'RMSNorm_1'} <= set(cross)
  # Different scales for queries and keys, so that swapping them shows in the logits.
  cross['RMSNorm_0']['scale'] = cross['RMSNorm_0']['scale'] * 3.0
  assert incremental.check_incremental(model, params, INPUTS, TARGETS) < 2e-5


def test_a_key_transform_that_ignores_positions_in_decoding_is_caught():
  """Rotating by the row index instead of the positions it is given: training agrees (the
  index is the position), decoding's one-key steps all sit at 0."""
  rotate = _recording_rotation([])

  def by_index(x, positions, *, kind, role):
    return rotate(x, jnp.arange(x.shape[1])[None], kind=kind, role=role)
  model = transformer.Transformer(CFG, qk_transform=by_index, positions=None)
  with pytest.raises(ValueError, match='incremental decoding differs from teacher forcing'):
    incremental.check_incremental(model, _params(4), INPUTS, TARGETS)


class _Bias(layers.nn.Module):
  """One learned bias per head and kind for every layer, counted per call."""
  cfg: transformer.TransformerConfig

  @layers.nn.compact
  def __call__(self, query_positions, key_positions, *, kind):
    table = self.param(kind, layers.nn.initializers.normal(1.0), (self.cfg.num_heads,))
    distance = (key_positions[:, None, :] - query_positions[:, :, None]).astype(jnp.float32)
    return table[None, :, None, None] * jnp.tanh(distance)[:, None]


def _biased(query, key, value, mask=None, *, shared, **kwargs):
  return attention.dot_product_attention(query, key, value, mask, bias=shared, **kwargs)


def test_the_shared_part_is_one_set_of_parameters_that_every_layer_receives():
  """Parameters under 'shared', once, not per layer; the gradient reaches them from every
  layer (changing the table changes every layer's attention); decoding agrees."""
  model = transformer.Transformer(CFG, attention_fn=_biased, shared=_Bias)
  params = transformer.init_params(model, jax.random.PRNGKey(0))
  assert set(params['shared']) == {'encoder', 'decoder', 'encoder_decoder'}
  assert params['shared']['encoder'].shape == (4,)
  flat = jax.tree_util.tree_leaves_with_path(params)
  assert sum('shared' in jax.tree_util.keystr(p) and 'shared_embedding' not in
             jax.tree_util.keystr(p) for p, _ in flat) == 3

  def loss(table):
    p = dict(params, shared=dict(params['shared'], encoder=table))
    return jnp.sum(transformer.as_model(model, deterministic=True).apply(
        {'params': p}, INPUTS, TARGETS) ** 2)
  assert np.abs(jax.jit(jax.grad(loss))(params['shared']['encoder'])).min() > 0
  assert incremental.check_incremental(model, params, INPUTS, TARGETS) < 2e-5
