"""Decoding: cached beam search equals full recomputation; order, empty lines, max length."""

import jax
import jax.numpy as jnp
import numpy as np

import pytest
from t2t_jax.inference import translate
from t2t_jax.model import incremental, transformer as model, search
from translate_helpers import CFG, CharTokenizer, sharp_params


def _params(seed=0):
  return sharp_params(seed)


def test_cached_beam_search_equals_full_recomputation():
  params = _params()
  rng = np.random.RandomState(0)
  inputs = rng.randint(2, 40, (3, 9)).astype(np.int32)
  inputs[1, 6:] = 0
  inputs[:, -1] = np.where(inputs[:, -1] == 0, 0, 1)
  max_len = 12
  m = model.Transformer(CFG)
  encoded = m.apply({'params': params}, inputs, method=model.Transformer.encode)

  context = incremental.decode_context(CFG, params, inputs)

  def cached_fn(tokens, cache):
    return incremental.decode_step(CFG, params, cache, tokens, context)

  def full_fn(tokens, cache):
    # Recompute the whole decoder on the history at every step (no key/value cache).
    index = cache['index']
    history = jax.lax.dynamic_update_slice(cache['history'], tokens, (0, index))
    logits = m.apply({'params': params}, history, cache['encoded'], cache['inputs'],
                     method=model.Transformer.decode)
    step_logits = jax.lax.dynamic_index_in_dim(logits, index, axis=1, keepdims=False)
    return step_logits, dict(cache, history=history, index=index + 1)

  cached = incremental.init_cache(CFG, 3, max_len)
  full = {'history': jnp.zeros((3, max_len), jnp.int32), 'index': jnp.zeros((), jnp.int32),
          'encoded': encoded, 'inputs': inputs}
  kwargs = dict(batch_size=3, beam_size=4, alpha=0.6, max_decode_len=max_len,
                max_lengths=jnp.array([12, 7, 10]))
  seq_a, score_a = jax.jit(lambda c: search.beam_search(cached_fn, c, **kwargs))(cached)
  seq_b, score_b = jax.jit(lambda c: search.beam_search(full_fn, c, **kwargs))(full)
  np.testing.assert_array_equal(seq_a, seq_b)
  np.testing.assert_allclose(score_a, score_b, atol=1e-5)
  assert len(set(map(tuple, np.asarray(seq_a[0])))) > 1  # the beams are distinct hypotheses


def test_growing_cache_translates_as_the_full_size_cache():
  """The cache grows 1 -> 16 -> 32 -> 40 positions (three loop segments) and decodes the
  same hypotheses as one cache of all 40; rows stop at different lengths."""
  assert search.cache_lengths(40) == (16, 32, 40)
  params = _params(1)
  table = params['shared_embedding']['embedding']  # EOS's logit 0: sentences run long
  params['shared_embedding'] = {'embedding': table.at[model.EOS_ID].set(0.0)}
  inputs = np.random.RandomState(1).randint(2, 40, (3, 8)).astype(np.int32)
  max_lengths = jnp.array([40, 20, 9])
  grown, full = (jax.jit(lambda p, x, m, grow=grow: translate.decode_batch(
      CFG, 4, 0.6, p, x, m, 40, grow_cache=grow))(params, inputs, max_lengths)
      for grow in (True, False))
  np.testing.assert_array_equal(grown, full)
  lengths = [list(row).index(model.EOS_ID) + 1 for row in np.asarray(full)]
  assert lengths[0] > 32 and lengths[2] <= 9  # the last segment was reached


def test_grow_cache_pads_keys_and_values_only():
  cache = incremental.init_cache(CFG, 2, 3)
  cache = jax.tree_util.tree_map(lambda x: x + 1, cache)
  grown = incremental.grow_cache(cache, 5)
  flat = dict(jax.tree_util.tree_flatten_with_path(grown)[0])
  for path, x in jax.tree_util.tree_flatten_with_path(cache)[0]:
    if x.ndim == 4:
      assert flat[path].shape == x.shape[:2] + (5,) + x.shape[3:]
      np.testing.assert_array_equal(flat[path][:, :, :3], x)
      np.testing.assert_array_equal(flat[path][:, :, 3:], 0)
    else:
      np.testing.assert_array_equal(flat[path], x)  # fill indices unchanged
  with pytest.raises(ValueError, match='cannot shrink'):
    incremental.grow_cache(grown, 4)


@pytest.mark.slow
def test_translate_keeps_order_line_count_and_empty_lines():
  translator = translate.Translator(CFG, _params(1), CharTokenizer(), beam_size=4,
                                    max_decode_extra=5, batch_sentences=4,
                                    bucket_lengths=(8, 16))
  sentences = ['abc', '', 'hello world', 'xyz', '   ', 'a', 'the quick brown fox', 'q']
  outputs = translator.translate(sentences)
  assert len(outputs) == len(sentences)
  assert outputs[1] == '' and outputs[4] == ''
  alone = [translator.translate([s])[0] for s in sentences]
  assert outputs == alone  # batching and sorting by length do not change any result
  assert len(set(o for o in outputs if o)) > 1
  ids = translator.translate_ids(sentences)  # the same hypotheses, as ids without EOS
  assert [CharTokenizer().decode(row) for row in ids] == outputs
  assert ids[1] == ids[4] == [] and all(row and min(row) >= 2 for row in ids if row)


def test_output_length_is_input_length_plus_extra_at_most():
  tok = CharTokenizer()
  translator = translate.Translator(CFG, _params(2), tok, beam_size=2, max_decode_extra=3,
                                    batch_sentences=4, bucket_lengths=(16,))
  sentences = ['ab', 'abcdefghij', 'abcde']
  for s, out in zip(sentences, translator.translate(sentences)):
    # Output tokens including EOS <= input tokens including EOS + 3.
    assert len(tok.encode(out)) + 1 <= len(tok.encode(s)) + 1 + 3
  assert translator.compiled_shapes == {(16, 19)}


def test_progress_reports_every_batch():
  calls = []
  translator = translate.Translator(CFG, _params(), CharTokenizer(), beam_size=1,
                                    max_decode_extra=2, batch_sentences=2, bucket_lengths=(8,))
  translator.translate(['ab', 'cd', 'ef', ''], progress=lambda d, t, e: calls.append((d, t)))
  assert calls == [(3, 4), (4, 4)]  # the empty line counts as done from the start


def test_truncated_inputs_are_named_by_line_number(caplog):
  # max_len=8 (positions are sinusoidal: the same params): at most 6 tokens plus EOS, so
  # every batch has the one shape (8, 8) and compiles once.
  translator = translate.Translator(CFG.replace(max_len=8), _params(), CharTokenizer(),
                                    beam_size=1, max_decode_extra=1, batch_sentences=4,
                                    bucket_lengths=(8,))
  sentences = ['ab', 'x' * 6, '', 'y' * 7, 'cd', 'z' * 40]
  with caplog.at_level('WARNING'):
    outputs = translator.translate(sentences)
  assert len(outputs) == 6 and outputs[2] == ''
  assert translator.truncated_lines == [4, 6]  # 1-based; line 2 (6 tokens + EOS) fits
  assert translator.compiled_shapes == {(8, 8)}
  assert ('2 inputs longer than max_len=8 tokens were truncated: lines 4, 6'
          in caplog.messages)
  translator.translate(['ab'])
  assert translator.truncated_lines == []  # per call, not accumulated over calls
  # A process decoding its share of a file names the file's lines.
  translator.translate(['y' * 7, 'ab', 'z' * 40], line_numbers=[2, 5, 8])
  assert translator.truncated_lines == [2, 8]


def test_truncation_warning_caps_the_list():
  assert (translate.truncation_warning([7], 256)
          == '1 input longer than max_len=256 tokens was truncated: line 7')
  assert (translate.truncation_warning(list(range(1, 16)), 256, shown=3)
          == '15 inputs longer than max_len=256 tokens were truncated: lines 1, 2, 3 '
             'and 12 more')


def test_outputs_run_far_past_the_source_bucket_up_to_input_plus_extra_and_max_len():
  # Parsing's outputs are several times longer than their inputs (max_decode_extra=300 for
  # the WSJ). With EOS unreachable (its embedding row zeroed: logit 0 against sharper ones)
  # every hypothesis runs to its length limit.
  params = _params(2)
  table = params['shared_embedding']['embedding']
  params = dict(params, shared_embedding={'embedding': table.at[model.EOS_ID].set(0.0)})
  translator = translate.Translator(CFG.replace(max_len=36), params, CharTokenizer(),
                                    beam_size=2, max_decode_extra=30, batch_sentences=2,
                                    bucket_lengths=(8,))
  ids = translator.translate_ids(['ab', 'abcdefg'])
  # Input tokens with EOS + 30, EOS included: 3 + 30 = 33; 8 + 30 = 38 is capped by max_len.
  assert [len(row) for row in ids] == [32, 35]
  assert translator.compiled_shapes == {(8, 36)}
