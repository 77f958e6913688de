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
from t2t_jax.model import attention, incremental, layers, module_jit, search, transformer

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
  return np.asarray(_forward(transformer.as_model(model, deterministic=True), _params(), targets))


@module_jit.jit_on_module  # one program per model, not each operation compiled
def _forward(net, params, targets):
  return net.apply({'params': params}, INPUTS, targets)


@pytest.mark.parametrize('name', list(VARIANTS))
def test_teacher_forced_logits_equal_incremental_decoding(name):
  model = _model(name)
  forced = _teacher_forced(model)
  stepped = incremental.incremental_logits(model, _params(), INPUTS, TARGETS)
  np.testing.assert_allclose(stepped, forced, atol=2e-5)
  assert incremental.check_incremental(model, _params(), INPUTS, TARGETS) < 2e-5
  if name != 'paper':  # the variant is what runs, on both paths
    assert np.abs(forced - _teacher_forced(_model('paper'))).max() > 1e-2


# No padding: every position is compared (a check that read only padding would see nothing).
UNPADDED = np.array([[8, 14, 22, 5, 1], [30, 6, 11, 19, 1]], np.int32)


@pytest.mark.parametrize('targets', [TARGETS, UNPADDED], ids=['padded', 'unpadded'])
def test_a_variant_that_decodes_differently_is_caught(targets):
  """A position-reading attention_fn that ignores the cache's positions (here: treats every
  decoding step as position 0) trains one model and decodes another: the check says so."""
  def wrong(query, key, value, mask=None, *, query_positions, **kwargs):
    return alibi(query, key, value, mask, query_positions=query_positions * 0
                 if query.shape[1] == 1 else query_positions, **kwargs)
  with pytest.raises(ValueError, match='incremental decoding differs from teacher forcing'):
    incremental.check_incremental(transformer.Transformer(CFG, attention_fn=wrong), _params(),
                                  INPUTS, targets)


def key_length_scaled(query, key, value, mask=None, **kwargs):
  """Logits scaled by log(number of keys): teacher forcing sees tgt_len keys, decoding the
  cache's slots (filled or not)."""
  scale = float(np.log(key.shape[1])) / np.sqrt(query.shape[-1])
  return attention.dot_product_attention(query, key, value, mask, scale=scale, **kwargs)


def test_a_variant_that_reads_the_cache_length_is_caught():
  """Decoding's cache is longer than the output so far (beam search grows it 16, 32, ...): a
  cache of exactly the targets' length would hide this variant (the issue's gap 6.6e-6)."""
  model = transformer.Transformer(CFG, attention_fn=key_length_scaled)
  with pytest.raises(ValueError, match=r'^incremental decoding differs from teacher forcing '
                     r'by .* a cache of 32 positions; atol 0\.0001\): '):
    incremental.check_incremental(model, _params(), INPUTS, UNPADDED)
  with pytest.raises(ValueError, match='a cache of 12 positions'):
    incremental.check_incremental(model, _params(), INPUTS, UNPADDED, max_decode_len=12)
  # Of the decoding comparisons only the longer cache shows it; the number of keys is also
  # the padded source length, so a padded row run alone shows it too.
  with pytest.raises(ValueError, match=r'^row 0 gives other logits alone than inside the '
                     'padded batch'):
    incremental.check_incremental(model, _params(), INPUTS, UNPADDED,
                                  max_decode_len=UNPADDED.shape[1])


def test_a_gap_just_above_the_default_tolerance_is_caught():
  """A decoding step that differs by a few 1e-4 (values nudged by 6e-5 at one query): the
  default tolerance (1e-4) refuses it; compared at real target positions, not padding."""
  def nudged(query, key, value, mask=None, **kwargs):
    if query.shape[1] == 1:
      value = value * np.float32(1 + 6e-5)
    return attention.dot_product_attention(query, key, value, mask, **kwargs)
  model = transformer.Transformer(CFG, attention_fn=nudged)
  gap = incremental.check_incremental(model, _params(), INPUTS, UNPADDED, atol=1.0)
  assert 1e-4 < gap < 1e-3
  with pytest.raises(ValueError, match='incremental decoding differs from teacher forcing'):
    incremental.check_incremental(model, _params(), INPUTS, UNPADDED)


def weights_dropped(query, key, value, mask=None, *, return_weights=False, **kwargs):
  """Loses `return_weights` on the way: returns the output alone when asked for weights."""
  del return_weights
  return attention.dot_product_attention(query, key, value, mask, **kwargs)


def weights_doubled(query, key, value, mask=None, *, return_weights=False, **kwargs):
  """The right shapes, but weights whose rows sum to 2."""
  result = attention.dot_product_attention(query, key, value, mask,
                                           return_weights=return_weights, **kwargs)
  return (result[0], result[1] * 2.0) if return_weights else result


def heads_first_output(query, key, value, mask=None, **kwargs):
  """Returns `[batch, heads, q_len, d_v]`, the layout of another convention."""
  result = attention.dot_product_attention(query, key, value, mask, **kwargs)
  if isinstance(result, tuple):
    return result[0].transpose(0, 2, 1, 3), result[1]
  return result.transpose(0, 2, 1, 3)


def test_dropped_weights_are_refused_naming_attention_fn():
  """With batch 2 the output unpacks into two arrays: attention maps would show an attention
  output as "weights" without an error."""
  model = transformer.Transformer(CFG, attention_fn=weights_dropped)
  message = (r'^attention_fn weights_dropped returned shape \(2, 6, 4, 8\) for '
             r'return_weights=True: expected \(output \[batch, q_len, heads, d_v\] '
             r'\(2, 6, 4, 8\), weights \[batch, heads, q_len, kv_len\] \(2, 4, 6, 6\)\)')
  with pytest.raises(ValueError, match=message):
    incremental.check_incremental(model, _params(), INPUTS, UNPADDED)
  with pytest.raises(ValueError, match=message):
    attention_maps.attention_weights(model, _params(), INPUTS, TARGETS)


def weights_query_first(query, key, value, mask=None, **kwargs):
  """Returns its weights `[batch, q_len, heads, kv_len]`: the rows still sum to 1."""
  result = attention.dot_product_attention(query, key, value, mask, **kwargs)
  if not kwargs.get('return_weights'):
    return result
  return result[0], result[1].transpose(0, 2, 1, 3)


@pytest.mark.parametrize('fn, message', [
    (weights_query_first, r'^attention_fn weights_query_first returned weights of shape '
     r'\(2, 6, 4, 6\): expected \[batch, heads, q_len, kv_len\] = \(2, 4, 6, 6\)'),
    (weights_doubled, r'^attention_fn weights_doubled: the weights it returns for '
     r'return_weights=True \(.*\) are not attention weights: rows must sum to 1 over the '
     r'unmasked keys \(off by up to 1\)')])
def test_weights_that_are_not_attention_weights_are_refused(fn, message):
  """Weights in another layout (refused while tracing), or of the right shape but not
  softmax rows (refused by the check)."""
  with pytest.raises(ValueError, match=message):
    incremental.check_incremental(transformer.Transformer(CFG, attention_fn=fn), _params(),
                                  INPUTS, UNPADDED)


def test_an_output_in_another_layout_is_refused_naming_attention_fn():
  """Heads-first output used to fail in W^O with an XLA broadcasting error."""
  model = transformer.Transformer(CFG, attention_fn=heads_first_output)
  message = (r'^attention_fn heads_first_output returned shape \(2, 4, 6, 8\): expected '
             r'\[batch, q_len, heads, d_v\] = \(2, 6, 4, 8\)')
  with pytest.raises(ValueError, match=message):
    transformer.as_model(model, deterministic=True).apply({'params': _params()}, INPUTS,
                                                          TARGETS)
  with pytest.raises(ValueError, match=r'^attention_fn heads_first_output returned shape '):
    transformer.init_params(model, jax.random.PRNGKey(0))


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


# The paper's artifact: tests/export; the five example variants' through main.py:
# tests/cli/test_model_flag.py. Here the position-reading one, from Python.
@pytest.mark.parametrize('name', ['alibi'])
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
