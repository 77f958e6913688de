"""One Eq. 1 on every path: a model's `attention_fn` is what training, teacher-forced
evaluation, attention capture, the cached decoding step, beam search and the exported
StableHLO decoder all compute, for the paper's attention and for variants of it."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.export import stablehlo_export
from t2t_jax.inference import translate
from t2t_jax.inspect import attention_maps
from t2t_jax.model import attention, incremental, layers, search, transformer

CFG = transformer.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4, d_k=8,
                                    d_v=8, num_layers=2, max_len=32, dropout_rate=0.0)
INPUTS = np.array([[5, 9, 12, 7, 1, 0], [17, 3, 1, 0, 0, 0]], np.int32)
TARGETS = np.array([[8, 14, 22, 1, 0], [30, 6, 11, 19, 1]], np.int32)


def temperature(query, key, value, mask=None, **kwargs):
  """Eq. 1 with logits divided by 2 (the issue's patch, as a variant)."""
  return attention.dot_product_attention(query, key, value, mask,
                                         scale=0.5 / np.sqrt(query.shape[-1]), **kwargs)


def alibi(query, key, value, mask=None, *, query_positions, key_positions, kind, **kwargs):
  """ALiBi-style: self-attention logits lowered by slope_h x |query pos - key pos|."""
  bias = None
  if kind != 'encoder_decoder':
    slopes = 2.0 ** -jnp.arange(1, query.shape[2] + 1, dtype=jnp.float32)
    distance = jnp.abs(query_positions[:, None, :, None] - key_positions[:, None, None, :])
    bias = -slopes[None, :, None, None] * distance.astype(jnp.float32)
  return attention.dot_product_attention(query, key, value, mask, bias=bias,
                                         query_positions=query_positions,
                                         key_positions=key_positions, kind=kind, **kwargs)


VARIANTS = {'paper': None, 'temperature': temperature, 'alibi': alibi}


def _model(name: str) -> transformer.Transformer:
  fn = VARIANTS[name]
  return transformer.Transformer(CFG) if fn is None else transformer.Transformer(
      CFG, attention_fn=fn)


@functools.lru_cache(maxsize=None)
def _params():
  return transformer.init_params(CFG, jax.random.PRNGKey(0))


def _teacher_forced(model, targets=TARGETS):
  return np.asarray(transformer.as_model(model, deterministic=True).apply(
      {'params': _params()}, INPUTS, targets))


@pytest.mark.parametrize('name', list(VARIANTS))
def test_teacher_forced_logits_equal_incremental_decoding(name):
  model = _model(name)
  forced = _teacher_forced(model)
  stepped = incremental.incremental_logits(model, _params(), INPUTS, TARGETS)
  np.testing.assert_allclose(stepped, forced, atol=2e-5)
  assert incremental.check_incremental(model, _params(), INPUTS, TARGETS) < 2e-5
  if name != 'paper':  # the variant is what runs, on both paths
    assert np.abs(forced - _teacher_forced(_model('paper'))).max() > 1e-2


def test_a_variant_that_decodes_differently_is_caught():
  """A position-reading attention_fn that ignores the cache's positions (here: treats every
  decoding step as position 0) trains one model and decodes another: the check says so."""
  def wrong(query, key, value, mask=None, *, query_positions, **kwargs):
    return alibi(query, key, value, mask, query_positions=query_positions * 0
                 if query.shape[1] == 1 else query_positions, **kwargs)
  with pytest.raises(ValueError, match='incremental decoding differs from teacher forcing'):
    incremental.check_incremental(transformer.Transformer(CFG, attention_fn=wrong), _params(),
                                  INPUTS, TARGETS)


def _log_prob(model, sequences: np.ndarray) -> np.ndarray:
  """log p(sequence | source), teacher-forced: `[batch, n]` for `[batch, n, length]`."""
  batch, n, length = sequences.shape
  flat = sequences.reshape(batch * n, length)
  net = transformer.as_model(model, deterministic=True)
  logits = net.apply({'params': _params()}, np.repeat(INPUTS, n, axis=0), flat)
  logits = np.asarray(logits, np.float64)
  logits[..., transformer.PAD_ID] = -1e9  # as decode_batch masks it
  log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
      -1, keepdims=True)) - logits.max(-1, keepdims=True)
  picked = np.take_along_axis(log_probs, flat[..., None], -1)[..., 0]
  return (picked * (flat != 0)).sum(-1).reshape(batch, n)


def _beam(model, max_decode_len=8):
  context = incremental.decode_context(model, _params(), INPUTS)

  def logits_fn(tokens, cache):
    logits, cache = incremental.decode_step(model, _params(), cache, tokens, context)
    return logits.at[:, transformer.PAD_ID].set(-1e9), cache

  return jax.jit(lambda: search.beam_search(
      logits_fn, incremental.init_cache(model, len(INPUTS), max_decode_len),
      batch_size=len(INPUTS), beam_size=3, alpha=0.6, max_decode_len=max_decode_len))()


@pytest.mark.parametrize('name', list(VARIANTS))
def test_beam_search_scores_are_the_teacher_forced_log_probs(name):
  model = _model(name)
  sequences, scores = (np.asarray(x) for x in _beam(model))
  lengths = (sequences != 0).sum(-1)
  expected = _log_prob(model, sequences) / np.asarray(search.length_penalty(lengths, 0.6))
  np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-5)


def _layer0_weights(model, kind: str) -> np.ndarray:
  """Layer 0's self-attention weights recomputed by hand from the parameters: the layer's
  input (scaled embeddings + sinusoids) through W^Q, W^K and the variant's Eq. 1."""
  params = _params()
  table = np.asarray(params['shared_embedding']['embedding'])
  ids = INPUTS if kind == 'encoder' else np.asarray(transformer.shift_right(TARGETS))
  x = table[ids] * np.float32(np.sqrt(CFG.d_model)) + layers.sinusoidal_positions(ids.shape[1],
                                                                      CFG.d_model)
  p = params[kind]['layer_0']['self_attention']
  q = np.einsum('bld,dhk->blhk', x, p['query']['kernel'])
  k = np.einsum('bld,dhk->blhk', x, p['key']['kernel'])
  mask = attention.padding_mask(jnp.asarray(INPUTS))
  if kind == 'decoder':
    mask = attention.causal_mask(ids.shape[1])
  positions = jnp.arange(ids.shape[1])[None]
  fn = model.attention_fn
  _, weights = fn(q, k, k, mask, query_positions=positions, key_positions=positions, kind=kind,
                  return_weights=True)
  return np.asarray(weights)


@pytest.mark.parametrize('name', list(VARIANTS))
def test_captured_weights_are_the_variants(name):
  model = _model(name)
  captured = attention_maps.attention_weights(model, _params(), INPUTS, TARGETS)
  for kind in ('encoder', 'decoder'):
    np.testing.assert_allclose(captured[kind][0], _layer0_weights(model, kind), atol=2e-5)


@pytest.mark.parametrize('name', ['paper', 'alibi'])
def test_stablehlo_artifact_decodes_like_beam_search(name):
  model = _model(name)
  params = jax.tree_util.tree_map(np.asarray, _params())
  max_lengths = np.array([8, 8], np.int32)
  exported = stablehlo_export.export_bucket(model, params, beam_size=3, alpha=0.6, rows=2,
                                            src_len=INPUTS.shape[1], max_decode_len=8,
                                            platforms=('cpu',))
  restored = jax.export.deserialize(exported.serialize())
  out = np.asarray(restored.call(tuple(jax.tree_util.tree_leaves(params)), INPUTS,
                                 max_lengths))
  direct = np.asarray(translate.decode_batch(model, 3, 0.6, params, INPUTS, max_lengths, 8))
  np.testing.assert_array_equal(out, direct)
  np.testing.assert_array_equal(out, np.asarray(_beam(model)[0])[:, 0])
