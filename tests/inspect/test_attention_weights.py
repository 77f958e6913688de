"""Attention weights from the model's own forward pass (`t2t_jax.attention_weights`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import t2t_jax
from t2t_jax.model import layers, transformer as model

CFG = model.TransformerConfig(vocab_size=50, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                              num_layers=2, dropout_rate=0.0, max_len=32)
# Row 1 is padded: 5 real source tokens of 7, 4 real target tokens of 6.
INPUTS = np.array([[5, 9, 13, 7, 22, 8, 1], [11, 3, 40, 6, 1, 0, 0]], np.int32)
TARGETS = np.array([[4, 17, 9, 30, 2, 1], [12, 8, 19, 1, 0, 0]], np.int32)
SRC_LEN, TGT_LEN = (7, 5), (6, 4)


@pytest.fixture(scope='module')
def params():
  return model.init_params(CFG, jax.random.PRNGKey(3))


@pytest.fixture(scope='module')
def weights(params):
  return t2t_jax.attention_weights(CFG, params, INPUTS, TARGETS)


def _softmax_by_hand(x_q, x_kv, kernels, mask):
  """Eq. 1 in float64 numpy: queries and keys projected with the layer's own kernels."""
  q = np.einsum('bld,dhk->blhk', x_q, np.asarray(kernels['query']['kernel'], np.float64))
  k = np.einsum('bld,dhk->blhk', x_kv, np.asarray(kernels['key']['kernel'], np.float64))
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(q.shape[-1])
  logits = np.where(mask, logits, -np.inf)
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _embedded(params, ids):
  """Layer-0 input by hand: embedding * sqrt(d_model) + the sinusoids of §3.5."""
  table = np.asarray(params['shared_embedding']['embedding'], np.float64)
  pe = layers.sinusoidal_positions(ids.shape[1], CFG.d_model)
  return table[ids] * np.sqrt(CFG.d_model) + pe[None]


def test_weights_equal_a_recomputation_from_the_parameters(params, weights):
  # The layers' inputs come from the fused (uncaptured) forward pass; the attention itself is
  # recomputed here from the kernels.
  _, state = model.Transformer(CFG.replace(deterministic=True)).apply(
      {'params': params}, INPUTS, TARGETS, capture_intermediates=True,
      mutable=['intermediates'])
  act = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), state['intermediates'])
  enc, dec = params['encoder'], params['decoder']
  src_mask = (INPUTS != 0)[:, None, None, :]
  causal = np.tril(np.ones((TARGETS.shape[1],) * 2, bool))[None, None]
  x = _embedded(params, INPUTS)
  y = _embedded(params, np.asarray(model.shift_right(TARGETS)))
  encoded = act['encoder']['__call__'][0]
  for i in range(CFG.num_layers):
    np.testing.assert_allclose(
        weights.encoder[i], _softmax_by_hand(x, x, enc[f'layer_{i}']['self_attention'],
                                             src_mask), atol=2e-6)
    np.testing.assert_allclose(
        weights.decoder[i], _softmax_by_hand(y, y, dec[f'layer_{i}']['self_attention'],
                                             causal), atol=2e-6)
    queries = act['decoder'][f'layer_{i}']['self_attention_block']['__call__'][0]
    np.testing.assert_allclose(
        weights.encoder_decoder[i],
        _softmax_by_hand(queries, encoded, dec[f'layer_{i}']['cross_attention'], src_mask),
        atol=2e-6)
    x = act['encoder'][f'layer_{i}']['__call__'][0]
    y = act['decoder'][f'layer_{i}']['__call__'][0]


def test_shapes_rows_sum_to_one_and_masked_keys_get_exactly_zero(weights):
  assert weights.encoder.shape == (2, 2, 2, 7, 7)
  assert weights.decoder.shape == (2, 2, 2, 6, 6)
  assert weights.encoder_decoder.shape == (2, 2, 2, 6, 7)
  assert all(w.dtype == np.float32 for _, w in weights.items())
  for b in range(2):
    s, t = SRC_LEN[b], TGT_LEN[b]
    enc, dec, cross = (weights[k][:, b] for k in t2t_jax.inspect.attention_maps.KINDS)
    np.testing.assert_allclose(enc[..., :s].sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(cross[..., :t, :s].sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(dec[..., :t, :t].sum(-1), 1.0, atol=1e-6)
    assert (enc[..., s:] == 0).all() and (cross[..., s:] == 0).all()  # padding keys
    future = np.triu(np.ones((6, 6), bool), k=1)
    assert (dec[..., future] == 0).all() and (dec[..., ~future] > 0).all()
    assert (enc[..., :s] > 0).all()


def test_captured_forward_pass_gives_the_fused_paths_logits(params):
  fused = model.Transformer(CFG.replace(deterministic=True)).apply(
      {'params': params}, INPUTS, TARGETS)
  captured, state = model.Transformer(CFG.replace(deterministic=True, capture_attention=True)
                                      ).apply({'params': params}, INPUTS, TARGETS,
                                              mutable=['intermediates'])
  np.testing.assert_allclose(captured, fused, rtol=1e-6, atol=1e-6)
  assert len(jax.tree_util.tree_leaves(state['intermediates'])) == 3 * CFG.num_layers
  # Off (training, decoding): nothing is sown, the fused path runs.
  _, off = model.Transformer(CFG.replace(deterministic=True)).apply(
      {'params': params}, INPUTS, TARGETS, mutable=['intermediates'])
  assert jax.tree_util.tree_leaves(off) == []


def test_grouped_queries_sow_one_map_per_query_row():
  # Decoding's encoder-decoder attention: 2 beams per sentence share the sentence's keys.
  mha = layers.MultiHeadAttention(num_heads=2, d_k=4, d_v=4, d_model=8, capture_weights=True)
  rng = jax.random.split(jax.random.PRNGKey(0), 3)
  queries = jax.random.normal(rng[0], (4, 3, 8))  # 2 sentences x 2 beams, 3 positions
  memory = jax.random.normal(rng[1], (2, 5, 8))
  mask = jnp.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)[:, None, None, :]
  variables = mha.init(rng[2], queries, jnp.repeat(memory, 2, axis=0))
  kv = (layers.head_projection(2, 4, jnp.float32).apply(
      {'params': variables['params']['key']}, memory),
        layers.head_projection(2, 4, jnp.float32).apply(
      {'params': variables['params']['value']}, memory))
  kv = tuple(x.transpose(0, 2, 1, 3) for x in kv)  # heads-first, as decoding keeps them
  out, sown = mha.apply(variables, queries, None, mask, key_value=kv, mutable=['intermediates'])
  tiled_out, tiled = mha.apply(variables, queries, jnp.repeat(memory, 2, axis=0),
                               jnp.repeat(mask, 2, axis=0), mutable=['intermediates'])
  grouped = sown['intermediates']['attention_weights'][0]
  assert grouped.shape == (4, 2, 3, 5)
  np.testing.assert_allclose(grouped, tiled['intermediates']['attention_weights'][0], atol=1e-6)
  np.testing.assert_allclose(out, tiled_out, atol=1e-6)


def test_sentence_crops_padding_and_unknown_kind_is_named(weights):
  one = weights.sentence(1, SRC_LEN[1], TGT_LEN[1])
  assert one['encoder'].shape == (2, 2, 5, 5)
  assert one['decoder'].shape == (2, 2, 4, 4)
  assert one['encoder_decoder'].shape == (2, 2, 4, 5)
  np.testing.assert_array_equal(one['encoder_decoder'], weights.encoder_decoder[:, 1, :, :4, :5])
  with pytest.raises(KeyError, match="unknown attention kind 'cross'"):
    weights['cross']  # pylint: disable=pointless-statement
  with pytest.raises(ValueError, match='expected one target row per input row'):
    t2t_jax.attention_weights(CFG, {}, INPUTS, TARGETS[:1])
