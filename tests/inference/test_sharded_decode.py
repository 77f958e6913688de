"""Decoding over every local device: the rows of a batch split over the 8 simulated CPU
devices translate token for token as one device does; parameters are placed once."""

import types

import jax
import numpy as np
import pytest

from t2t_jax.inference import translate
from translate_helpers import CFG, CharTokenizer, sharp_params as _params

# 11 sentences, 2 blank: with 3 sentences a batch (rounded up to 8 rows) the second batch
# holds 1 real sentence and 7 empty rows.
SENTENCES = ['abc', '', 'hello', 'xyz', '   ', 'a', 'the fox', 'q', 'jumps', 'lazy dog', 'mmm']
# One source length and 12 output positions: one compilation, one cache segment.
KWARGS = dict(beam_size=4, max_decode_extra=4, bucket_lengths=(8,))


def _translator(parallelism, params, batch_sentences=3, threads=1):
  return translate.Translator(CFG, params, CharTokenizer(), batch_sentences=batch_sentences,
                              threads=threads, parallelism=parallelism, **KWARGS)


def _one_device(params, sentences):
  """The reference: `decode_batch` jitted on one device, one sentence at a time."""
  decode = jax.jit(lambda p, x, m: translate.decode_batch(CFG, 4, 0.6, p, x, m, 12))
  tok, out = CharTokenizer(), []
  for s in sentences:
    ids = tok.encode(s) + [1]
    if not s.strip():
      out.append([])
      continue
    inputs = np.zeros((1, 8), np.int32)
    inputs[0, :len(ids)] = ids
    best = np.asarray(decode(params, inputs, np.array([len(ids) + 4], np.int32)))[0].tolist()
    out.append(best[:best.index(1)] if 1 in best else best)
  return out


def test_sharded_decoding_equals_one_device_token_for_token():
  params = _params(1)
  sharded = _translator('sharded', params)
  assert sharded.mesh.size == 8 and sharded.batch_sentences == 8  # 3 rounded up to 8 rows
  # 13 sentences, 11 non-blank: 8 rows, then 3 real rows and 5 empty ones.
  sentences = SENTENCES + ['', 'zebra']
  ids = sharded.translate_ids(sentences)
  assert ids == _one_device(params, sentences)
  assert ids[1] == ids[4] == ids[11] == [] and len({tuple(r) for r in ids if r}) > 1


def test_a_batch_smaller_than_the_device_count_decodes_as_one_device():
  params = _params(2)
  sharded = _translator('sharded', params)
  assert sharded.translate_ids(['xyz', 'ab']) == _one_device(params, ['xyz', 'ab'])


def test_params_are_placed_once_per_params_object_replicated_on_every_device():
  sharded = _translator('sharded', _params(1), batch_sentences=2)
  first = sharded.translate_ids(SENTENCES)  # 6 batches
  sharded.translate_ids(SENTENCES[:4])
  assert sharded.placements == 1
  placed = sharded._placed_params()
  assert all(len(x.sharding.device_set) == 8 and x.is_fully_replicated
             for x in jax.tree_util.tree_leaves(placed))
  sharded.params = jax.tree_util.tree_map(np.asarray, _params(1))  # new object, same values
  assert sharded.translate_ids(SENTENCES) == first and sharded.placements == 2


def _devices(platform, count):
  return [types.SimpleNamespace(platform=platform)] * count


def test_auto_shards_on_multi_chip_accelerators_and_threads_on_cpu():
  choose = translate.choose_parallelism
  assert choose('auto', _devices('tpu', 8)) == choose('auto', _devices('gpu', 8)) == 'sharded'
  assert choose('auto', _devices('gpu', 1)) == 'threads'
  assert choose('auto', _devices('cpu', 8)) == choose('auto') == 'threads'
  assert choose('sharded', _devices('cpu', 8)) == 'sharded'
  assert choose('threads', _devices('tpu', 8)) == 'threads'
  with pytest.raises(ValueError, match="parallelism 'pmap'"):
    choose('pmap')
  cpu = translate.Translator(CFG, None, CharTokenizer(), batch_sentences=3)
  assert (cpu.parallelism, cpu.mesh.size, cpu.batch_sentences) == ('threads', 1, 3)
  assert cpu.threads == translate.portable.default_threads()
  assert _translator('sharded', None, threads=0).threads == 1  # one batch at a time
