"""Tests for t2t_jax.data.bounded_shuffler: the same records as TFDS's own in-memory
`Shuffler`, through sorted runs spilled to disk past a (here tiny) memory budget, and the
same prepared data sets (local corpus, WMT'14 from synthetic archives) either way."""

import contextlib
import os
import random
import threading

import numpy as np
import pytest
from tensorflow_datasets.core import hashing
from tensorflow_datasets.core import shuffle as tfds_shuffle

from t2t_jax.data import bounded_shuffler, corpora, tfds_prepare, wmt
from test_wmt import _statmt  # serves tests/fake_statmt.py's archives offline

BUDGET = 20_000  # bytes: a few dozen records per run


def _records(seed, n=3000, key_space=10**9):
  """`n` (key, payload) pairs with distinct keys and random payloads of 0-400 bytes."""
  rng = random.Random(seed)
  keys = rng.sample(range(-key_space, key_space), n)
  return [(k, rng.randbytes(rng.randrange(400))) for k in keys]


def _fill(shuffler, records, budget=None):
  """Adds `records`; checks after each add that the buffer stays within `budget`."""
  for key, data in records:
    shuffler.add(key, data)
    if budget is not None:
      assert shuffler.buffer_bytes <= budget
  return shuffler


def _both(tmp_path, records, **kwargs):
  """(TFDS's Shuffler, BoundedShuffler under BUDGET) given the same records."""
  ours = bounded_shuffler.BoundedShuffler(tmp_path / 'runs', 'salt', **kwargs)
  return (_fill(tfds_shuffle.Shuffler(tmp_path / 'tfds', 'salt', **kwargs), records),
          _fill(ours, records, BUDGET))


def _drain(shuffler):
  """The records yielded, and the error raised (type, item1, item2) if any."""
  out = []
  try:
    for record in shuffler:
      out.append(record)
  except tfds_shuffle.DuplicatedKeysError as e:
    return out, (type(e), e.item1, e.item2)
  return out, None


@pytest.fixture(autouse=True)
def _tiny_budget(monkeypatch):
  monkeypatch.setattr(bounded_shuffler, 'MEMORY_BUDGET_BYTES', BUDGET)


@pytest.mark.parametrize('disable_shuffling', [False, True])
def test_same_records_as_tfds_through_spilled_runs(tmp_path, disable_shuffling):
  records = _records(0)
  tfds, ours = _both(tmp_path, records, disable_shuffling=disable_shuffling)
  assert ours.num_runs > 10
  assert len(os.listdir(tmp_path / 'runs')) == ours.num_runs
  assert (ours.num_examples, ours.size, ours.bucket_lengths) == (
      tfds.num_examples, tfds.size, tfds.bucket_lengths) == (
      3000, sum(len(d) for _, d in records), [3000])
  yielded = list(ours)
  assert yielded == list(tfds)
  assert [k for k, _ in yielded] == (sorted(k for k, _ in records) if disable_shuffling else
                                     sorted(hashing.Hasher('salt').hash_key(k)
                                            for k, _ in records))
  assert os.listdir(tmp_path / 'runs') == []
  with pytest.raises(AssertionError, match='after __iter__'):
    ours.add(1, b'late')


@pytest.mark.parametrize('keys', [
    [f'news/{i}' for i in range(500)],                    # str, as TFDS's WMT builder
    [f'k{i}'.encode() for i in range(500)],               # bytes
    [np.array(i) for i in range(500)],                    # TFDS takes one-element arrays
    [2**100 - i if i % 2 else -i for i in range(500)],    # large and negative ints
])
def test_key_types_round_trip_through_runs(tmp_path, keys):
  records = [(k, bytes([i % 256]) * 50) for i, k in enumerate(keys)]
  random.Random(1).shuffle(records)
  for disable_shuffling in (False, True):
    tfds, ours = _both(tmp_path, records, disable_shuffling=disable_shuffling)
    assert ours.num_runs > 1
    assert list(ours) == list(tfds)


def test_key_types_tfds_refuses_are_refused(tmp_path):
  for disable_shuffling in (False, True):
    ours = bounded_shuffler.BoundedShuffler(tmp_path, 's', disable_shuffling)
    with pytest.raises(TypeError, match='Invalid key type'):
      ours.add(1.5, b'')


def test_nothing_touches_the_disk_below_the_budget(tmp_path):
  tfds, ours = _both(tmp_path, _records(2, n=20))
  assert ours.num_runs == 0 and not os.path.exists(tmp_path / 'runs')
  assert list(ours) == list(tfds)


@pytest.mark.parametrize('disable_shuffling', [False, True])
@pytest.mark.parametrize('copies', [2, 3])
def test_duplicates_raise_tfds_error_with_the_same_records(tmp_path, disable_shuffling,
                                                           copies):
  records = _records(3)
  rng = random.Random(copies)
  # Repeats of one key spread over several runs, and of another inside one run; every repeat
  # carries its own payload, so the error's two records (TFDS: the key's second smallest
  # payload, then its smallest) cannot be told apart in the wrong order.
  far = [(records[100][0], rng.randbytes(30)) for _ in range(copies - 1)]
  near = [(records[2999][0], rng.randbytes(20)) for _ in range(copies - 1)]
  records = records[:1500] + far[:1] + records[1500:] + far[1:] + near
  tfds, ours = _both(tmp_path, records, disable_shuffling=disable_shuffling)
  tfds_out, tfds_error = _drain(tfds)
  ours_out, ours_error = _drain(ours)
  assert tfds_error is not None and tfds_error[0] is tfds_shuffle.DuplicatedKeysError
  key = tfds_out[-1][0]  # the repeated key raised first: its smallest payload was yielded
  payloads = sorted(d for k, d in records if key in (k, hashing.Hasher('salt').hash_key(k)))
  assert len(payloads) == copies and len(set(payloads)) == copies
  assert tfds_error[1:] == (payloads[1], payloads[0]) and tfds_out[-1][1] == payloads[0]
  assert (ours_out, ours_error) == (tfds_out, tfds_error)
  assert os.listdir(tmp_path / 'runs') == []


@pytest.mark.parametrize('disable_shuffling', [False, True])
def test_ignore_duplicates_keeps_the_first_added(tmp_path, disable_shuffling):
  rng = random.Random(5)  # ~half the keys repeat, in and across runs
  records = [(rng.randrange(-700, 700), d) for _, d in _records(4, n=2000)]
  tfds, ours = _both(tmp_path, records, disable_shuffling=disable_shuffling,
                     ignore_duplicates=True)
  first = {}
  for key, data in records:
    first.setdefault(key, data)
  assert ours.num_runs > 10
  assert (ours.num_examples, ours.size, ours.bucket_lengths) == (
      tfds.num_examples, tfds.size, tfds.bucket_lengths) == (
      len(first), sum(map(len, first.values())), [len(first)])
  assert list(ours) == list(tfds)
  assert sorted(d for _, d in _fill(bounded_shuffler.BoundedShuffler(
      tmp_path, 's', disable_shuffling, True), records)) == sorted(first.values())


def test_run_files_deleted_when_abandoned_or_never_read(tmp_path):
  ours = _fill(bounded_shuffler.BoundedShuffler(tmp_path, 'salt'), _records(6))
  assert ours.num_runs > 1
  records = iter(ours)
  next(records)
  records.close()  # Writer failing mid-way
  assert os.listdir(tmp_path) == []
  ours = _fill(bounded_shuffler.BoundedShuffler(tmp_path, 'salt'), _records(7))
  assert os.listdir(tmp_path)
  del ours  # never iterated
  assert os.listdir(tmp_path) == []


def test_remote_dirs_spill_to_the_local_temp_folder(tmp_path, monkeypatch):
  monkeypatch.setattr(bounded_shuffler.tempfile, 'tempdir', str(tmp_path))
  ours = _fill(bounded_shuffler.BoundedShuffler('gs://bucket/data.incomplete', 's'),
               _records(8))
  assert len(os.listdir(tmp_path)) == ours.num_runs > 1
  assert len(list(ours)) == 3000
  assert os.listdir(tmp_path) == []


def test_installed_only_while_preparing():
  tfds_class = tfds_shuffle.Shuffler
  assert tfds_class is not bounded_shuffler.BoundedShuffler
  entered, leave = threading.Barrier(2), threading.Event()

  def other_preparation():
    with tfds_prepare.bounded_shuffler():
      entered.wait()
      leave.wait()

  thread = threading.Thread(target=other_preparation)
  thread.start()
  with pytest.raises(RuntimeError), tfds_prepare.bounded_shuffler():
    entered.wait()
    assert tfds_shuffle.Shuffler is bounded_shuffler.BoundedShuffler
    raise RuntimeError('a failed preparation')
  assert tfds_shuffle.Shuffler is bounded_shuffler.BoundedShuffler  # the thread's still on
  leave.set()
  thread.join()
  assert tfds_shuffle.Shuffler is tfds_class


def _prepared(builder):
  """Split -> (shard lengths, bytes, every example in stored order)."""
  return {name: (split.shard_lengths, split.num_bytes,
                 builder.as_data_source(split=name).__getitems__(range(split.num_examples)))
          for name, split in builder.info.splits.items()}


@contextlib.contextmanager
def _counting_runs(monkeypatch):
  """Counts the run files written; yields the list of their record counts."""
  runs, write_run = [], bounded_shuffler._write_run

  def counted(path, records):
    runs.append(len(records))
    write_run(path, records)

  monkeypatch.setattr(bounded_shuffler, '_write_run', counted)
  yield runs


def _three_ways(monkeypatch, tmp_path, prepare):
  """`prepare(data_dir)` with TFDS's Shuffler, ours in memory, ours spilling runs."""
  with monkeypatch.context() as mp:
    mp.setattr(tfds_prepare, 'bounded_shuffler', contextlib.nullcontext)
    tfds = prepare(str(tmp_path / 'tfds'))
  with monkeypatch.context() as mp:
    mp.setattr(bounded_shuffler, 'MEMORY_BUDGET_BYTES', 256 << 20)
    default = prepare(str(tmp_path / 'default'))
  with _counting_runs(monkeypatch) as runs:
    spilled = prepare(str(tmp_path / 'spilled'))
  assert len(runs) > 5, runs
  assert spilled == default == tfds
  for folder in ('tfds', 'default', 'spilled'):  # no run file left in the prepared data
    assert not any(f.endswith('.run') for _, _, fs in os.walk(tmp_path / folder) for f in fs)
  return spilled


def test_local_corpus_same_examples_when_spilled(tmp_path, monkeypatch):
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  lines = {lang: [f'{lang} line {i}' + ' w' * (i % 37) for i in range(1500)]
           for lang in ('en', 'es')}
  lines['es'][10] = ''  # dropped: the line numbers (keys) are not consecutive
  for split, n in (('train', 1500), ('dev', 300)):
    for lang in ('en', 'es'):
      (corpus / f'{split}.{lang}').write_text(''.join(l + '\n' for l in lines[lang][:n]))
  prepared = _three_ways(monkeypatch, tmp_path, lambda data_dir: _prepared(
      corpora.local_corpus_builder(str(corpus), 'en', 'es', data_dir)))
  train = prepared['train'][2]
  assert [ex['source'].decode() for ex in train] == [l for i, l in enumerate(lines['en'])
                                                      if i != 10]  # file order kept


def test_wmt_same_splits_when_spilled(tmp_path, monkeypatch):
  def prepare(data_dir):
    builder = wmt.wmt_builder('wmt14_translate/de-en', data_dir)
    tfds_prepare.download_and_prepare(builder)
    return _prepared(builder)

  with _statmt(monkeypatch, 'de-en'):
    prepared = _three_ways(monkeypatch, tmp_path, prepare)
  assert {name: sum(lengths) for name, (lengths, _, _) in prepared.items()} == {
      'train': 799, 'validation': 48, 'test': 40}
