"""`batch_search.decoder`: which search `Translator` runs a batch with. On one CPU device from
`compaction.MIN_ROWS` rows finished sentences leave the batch (`compacting_decoder`); below
it, on several devices and on accelerators one program a batch; the translations and n-best
lists are the single program's either way."""

import jax
import numpy as np
import pytest

from t2t_jax.inference import batch_search, translate
from t2t_jax.model import compaction
from t2t_jax.runtime import multihost
from translate_helpers import CFG, CharTokenizer, sharp_params

WORDS = ['abc', 'hello', 'xyz', 'a', 'the fox', 'q', 'jumps', 'lazy dog', 'mmm', 'zebra',
         'b', 'over', 'ab', 'quick brown', 'cd', 'e', 'river', 'sea']


@pytest.mark.parametrize('rows,compacting', [(compaction.MIN_ROWS - 1, False),
                                             (compaction.MIN_ROWS, True)])
def test_one_device_compacts_batches_from_min_rows(monkeypatch, rows, compacting):
  calls, compact = [], compaction.compacting_beam_decode
  monkeypatch.setattr(compaction, 'compacting_beam_decode',
                      lambda *a, **k: calls.append(1) or compact(*a, **k))
  inputs = np.ones((rows, 4), np.int32)
  lengths = np.full((rows,), 3, np.int32)
  params = sharp_params(0)
  one = multihost.local_mesh(jax.local_devices()[:1])
  best = np.asarray(batch_search.decoder(CFG, 4, 0.6, one)(params, inputs, lengths, 4))
  assert bool(calls) == compacting
  several = multihost.local_mesh(jax.local_devices()[:2])
  calls.clear()
  rows_even = -(-rows // 2) * 2
  spread = batch_search.decoder(CFG, 4, 0.6, several)(
      params, np.ones((rows_even, 4), np.int32), np.full((rows_even,), 3, np.int32), 4)
  assert not calls  # several devices: one sharded program
  np.testing.assert_array_equal(np.asarray(spread)[:rows], best)


def test_only_one_cpu_device_compacts():
  rows = compaction.MIN_ROWS
  assert batch_search.compacts('cpu', 1, rows)
  assert not batch_search.compacts('cpu', 1, rows - 1)
  assert not batch_search.compacts('cpu', 2, rows)  # several devices: one sharded program
  for accelerator in ('gpu', 'cuda', 'rocm', 'tpu'):
    assert not batch_search.compacts(accelerator, 1, 64)


def _translator(params, rows: int) -> translate.Translator:
  return translate.Translator(CFG, params, CharTokenizer(), batch_sentences=rows, threads=1,
                              parallelism='threads', max_decode_extra=4, bucket_lengths=(16,))


def test_a_compacting_translator_translates_as_the_single_program(monkeypatch):
  gathered, select = [], compaction._select
  monkeypatch.setattr(compaction, '_select', lambda *a: gathered.append(len(a[2])) or select(*a))
  params = sharp_params(3)
  single, compacting = (_translator(params, rows) for rows in (len(WORDS), compaction.MIN_ROWS))
  assert len(WORDS) > compaction.MIN_ROWS  # two batches: 16 rows, then 2 and 14 padding rows
  single._decode = batch_search.sharded_decoder(CFG, 4, 0.6, single.mesh)  # one program
  single._decode_n_best = batch_search.sharded_decoder(CFG, 4, 0.6, single.mesh, n_best=True)
  ids = compacting.translate_ids(WORDS)
  assert ids == single.translate_ids(WORDS)
  assert len({tuple(r) for r in ids}) > 5  # the translations differ: a real check
  assert gathered  # and the batches shrank
  got, want = compacting.translate_n_best(WORDS), single.translate_n_best(WORDS)
  for word, mine, theirs in zip(WORDS, got, want):
    assert [h.ids for h in mine] == [h.ids for h in theirs], word
    np.testing.assert_allclose([h.score for h in mine], [h.score for h in theirs], rtol=1e-5)
    np.testing.assert_allclose([h.log_prob for h in mine], [h.log_prob for h in theirs],
                               rtol=1e-5)


def test_equal_translators_share_their_compiled_programs(monkeypatch):
  """A second Translator of the same model (a notebook's second one, or the final test decode
  after the dev BLEU evals) traces and compiles nothing again; a different alpha does."""
  traced, decode_batch = [], batch_search.decode_batch
  monkeypatch.setattr(batch_search, 'decode_batch',
                      lambda *a, **k: traced.append(a[2]) or decode_batch(*a, **k))
  params = sharp_params(2)

  def translator(alpha):
    return translate.Translator(CFG, params, CharTokenizer(), batch_sentences=4, threads=1,
                                parallelism='threads', max_decode_extra=4,
                                bucket_lengths=(16,), alpha=alpha)
  first = translator(0.6173).translate_ids(WORDS[:4])  # an alpha no other test compiles
  assert traced == [0.6173]
  assert translator(0.6173).translate_ids(WORDS[:4]) == first
  assert traced == [0.6173]
  translator(0.7).translate_ids(WORDS[:4])
  assert traced == [0.6173, 0.7]
