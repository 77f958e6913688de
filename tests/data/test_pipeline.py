"""Tests for t2t_jax.data.pipeline: budget, coverage, determinism, shards, exact resume."""

import collections
import gzip
import itertools
import json
import os

import numpy as np
import pytest

from configs import default
from t2t_jax.data import corpora
from t2t_jax.data import pipeline
from t2t_jax.data import tokenizer

ROWS_MULTIPLE = 4


def _bible(lang, n):
  path = os.path.join(corpora.BUNDLED_CORPUS_DIR, f'train.{lang}.gz')
  with gzip.open(path, 'rt', encoding='utf-8') as f:
    return [line.rstrip('\n') for line in itertools.islice(f, n)]


class _Named(list):
  """A list source with a name, as corpora.ParallelTextSource has (for the length cache)."""
  name = 'bible-slice'


@pytest.fixture(scope='module')
def source():
  en, es = _bible('en', 1200), _bible('es', 1200)
  pairs = [{'source': s, 'target': t} for s, t in zip(en, es)]
  # Some pairs far longer than max_length, which training drops and counts.
  pairs += [{'source': ' '.join(en[i:i + 6]), 'target': es[i]} for i in range(0, 30, 3)]
  return _Named(pairs)


@pytest.fixture(scope='module')
def tok(tmp_path_factory, source):
  c = default.get_config()
  c.vocab_size, c.vocab_sample_sentences = 1000, 10_000
  return tokenizer.load_or_train(c, str(tmp_path_factory.mktemp('w')),
                                 lambda: tokenizer.sample_sentences(source, 10_000))


def _config(**kw):
  c = default.get_config()
  c.max_length, c.bucket_lengths, c.tokens_per_batch, c.shuffle_seed = (
      64, (16, 24, 32, 48, 64, 128), 2048, 0)
  for k, v in kw.items():
    setattr(c, k, v)
  return c


def _tokenized(source, tok, max_length=None):
  out = []
  for p in source:
    s, t = tuple(tok.encode(p['source']) + [1]), tuple(tok.encode(p['target']) + [1])
    if max_length is None or max(len(s), len(t)) <= max_length:
      out.append((s, t))
  return out


def _rows(batch):
  """The non-padding rows of a batch as (source tokens, target tokens)."""
  rows = []
  for x, y in zip(batch['inputs'], batch['targets']):
    if y.any():
      rows.append((tuple(int(i) for i in x[x != 0]), tuple(int(i) for i in y[y != 0])))
    else:
      assert not x.any()  # padding rows are all zero on both sides
  return rows


def _take(it, n):
  return [next(it) for _ in range(n)]


def _same(a, b):
  return len(a) == len(b) and all(
      x['inputs'].shape == y['inputs'].shape and np.array_equal(x['inputs'], y['inputs']) and
      np.array_equal(x['targets'], y['targets']) for x, y in zip(a, b))


def test_one_epoch_covers_every_pair_once_within_the_budget(source, tok):
  config = _config()
  it = pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE,
                                    num_epochs=1)
  batches = list(it)
  info = it.info
  assert len(batches) == info.batches_per_epoch
  kept = _tokenized(source, tok, config.max_length)
  assert collections.Counter(r for b in batches for r in _rows(b)) == collections.Counter(kept)
  assert info.num_dropped_too_long == len(source) - len(kept) >= 10
  assert info.num_used == len(kept)
  shapes = set()
  for b in batches:
    assert set(b) == {'inputs', 'targets'}
    assert b['inputs'].dtype == np.int32 and b['targets'].dtype == np.int32
    rows, length = b['targets'].shape
    assert b['inputs'].shape == (rows, length)
    assert rows * length <= config.tokens_per_batch and rows % ROWS_MULTIPLE == 0
    assert length in config.bucket_lengths
    for x, y in _rows(b):  # both sides end with EOS and fit the bucket
      assert x[-1] == 1 and y[-1] == 1 and 1 not in x[:-1] + y[:-1]
      assert max(len(x), len(y)) <= length
      smaller = [l for l in config.bucket_lengths if l < length]
      assert not smaller or max(len(x), len(y)) > smaller[-1]  # smallest bucket that fits
    shapes.add((rows, length))
  assert len(shapes) == info.num_shapes <= len(config.bucket_lengths)
  # Rows of bucket L: the largest multiple of 4 with rows * L <= 2048.
  assert dict(zip(info.bucket_lengths, info.bucket_rows)) == {
      16: 128, 24: 84, 32: 64, 48: 40, 64: 32}
  assert 'batch shapes' in pipeline.shapes_summary(info)


def test_same_seed_same_batches_other_seed_other_order(source, tok):
  def first_epoch(seed):
    it = pipeline.make_train_iterator(_config(shuffle_seed=seed), source, tok,
                                      rows_multiple=ROWS_MULTIPLE, num_epochs=1)
    return list(it)

  a, b, c = first_epoch(0), first_epoch(0), first_epoch(1)
  assert _same(a, b)
  assert not _same(a, c)
  rows = lambda batches: collections.Counter(r for x in batches for r in _rows(x))
  assert rows(a) == rows(c)


def test_new_order_every_epoch(source, tok):
  it = pipeline.make_train_iterator(_config(), source, tok, rows_multiple=ROWS_MULTIPLE,
                                    num_epochs=3)
  n = it.info.batches_per_epoch
  epochs = [_take(it, n) for _ in range(3)]
  with pytest.raises(StopIteration):
    next(it)
  assert not _same(epochs[0], epochs[1]) and not _same(epochs[1], epochs[2])
  counts = [collections.Counter(r for b in e for r in _rows(b)) for e in epochs]
  assert counts[0] == counts[1] == counts[2]


def test_two_process_shards_are_disjoint_cover_and_agree_on_shapes(source, tok):
  config = _config()
  its = [pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE,
                                      process_index=p, process_count=2, num_epochs=1)
         for p in range(2)]
  shards = [list(it) for it in its]
  assert len(shards[0]) == len(shards[1]) == its[0].info.batches_per_epoch
  for b0, b1 in zip(*shards):
    # Same shape at the same step on every process; half the budget each.
    assert b0['inputs'].shape == b1['inputs'].shape
    rows, length = b0['inputs'].shape
    assert rows * length <= config.tokens_per_batch / 2 and rows % ROWS_MULTIPLE == 0
  c0 = collections.Counter(r for b in shards[0] for r in _rows(b))
  c1 = collections.Counter(r for b in shards[1] for r in _rows(b))
  kept = collections.Counter(_tokenized(source, tok, config.max_length))
  assert c0 + c1 == kept  # together exactly the data, so no pair is in both
  assert sum(c0.values()) > 0 and sum(c1.values()) > 0


@pytest.mark.parametrize('where', ['middle', 'epoch_boundary'])
def test_state_restores_the_exact_continuation(source, tok, where):
  config = _config()
  it = pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE)
  n = it.info.batches_per_epoch
  k = 7 if where == 'middle' else n - 2  # the next 5 batches cross into epoch 1
  _take(it, k)
  state = json.loads(json.dumps(it.get_state()))
  assert (state['epoch'], state['batch_in_epoch']) == (0, k)
  expected = _take(it, 5)
  assert it.get_state()['epoch'] == (0 if where == 'middle' else 1)
  restored = pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE)
  restored.set_state(state)
  assert _same(_take(restored, 5), expected)
  # The uninterrupted iterator and a fresh one restored there agree from then on too.
  restored.set_state(it.get_state())
  assert _same(_take(restored, 3), _take(it, 3))
  # Rewinding the same iterator works as well.
  it.set_state(state)
  assert _same(_take(it, 5), expected)


def test_state_from_another_topology_resumes_at_the_same_fraction_of_the_epoch(
    source, tok, tmp_path):
  """1 process of 4 devices (27 batches an epoch) saves, 2 processes of 8 devices (30 batches:
  other rows per bucket) resume, and back: batch b of n resumes at floor(b * n' / n)."""
  make = lambda rows, p=0, count=1: pipeline.make_train_iterator(  # noqa: E731
      _config(), source, tok, rows_multiple=rows, process_index=p, process_count=count,
      cache_dir=str(tmp_path))
  one = make(4)
  assert one.info.batches_per_epoch == 27
  _take(one, 27 + 20)
  saved = json.loads(json.dumps(one.get_state()))
  assert (saved['epoch'], saved['batch_in_epoch']) == (1, 20)
  two = [make(8, p, 2) for p in range(2)]
  assert two[0].info.batches_per_epoch == 30
  for it in two:
    it.set_state(saved)
    assert (it.get_state()['epoch'], it.get_state()['batch_in_epoch']) == (1, 22)  # 20*30/27
  for p, it in enumerate(two):  # what a fresh 2-process run yields at epoch 1, batch 22
    fresh = make(8, p, 2)
    _take(fresh, 30 + 22)
    assert _same(_take(it, 3), _take(fresh, 3))
  back = json.loads(json.dumps(two[0].get_state()))
  assert (back['epoch'], back['batch_in_epoch'], back['process_count']) == (1, 25, 2)
  one.set_state(back)
  assert (one.get_state()['epoch'], one.get_state()['batch_in_epoch']) == (1, 22)  # 25*27/30
  fresh = make(4)
  _take(fresh, 27 + 22)
  assert _same(_take(one, 3), _take(fresh, 3))


def test_state_from_other_data_is_refused(source, tok):
  it = pipeline.make_train_iterator(_config(), source, tok, rows_multiple=ROWS_MULTIPLE)
  state = it.get_state()
  other = pipeline.make_train_iterator(_config(shuffle_seed=5), source, tok,
                                       rows_multiple=ROWS_MULTIPLE)
  with pytest.raises(pipeline.PipelineError, match='shuffle_seed 0 -> 5'):
    other.set_state(state)


def test_eval_batches_are_ordered_and_keep_every_pair(source, tok):
  config = _config()
  batches = pipeline.make_eval_batches(config, source, tok, rows_multiple=ROWS_MULTIPLE)
  again = pipeline.make_eval_batches(config, source, tok, rows_multiple=ROWS_MULTIPLE)
  assert _same(batches, again)
  everything = _tokenized(source, tok)
  rows = [r for b in batches for r in _rows(b)]
  assert collections.Counter(rows) == collections.Counter(everything)
  assert batches.info.num_dropped_too_long == 0
  # The over-long pairs went to one extra bucket, a multiple of 8 above max_length.
  extra = batches.info.bucket_lengths[-1]
  assert extra % 8 == 0 and extra > config.max_length
  assert extra - 8 < max(max(len(s), len(t)) for s, t in everything) <= extra
  # Within a bucket, corpus order.
  position = {pair: i for i, pair in reversed(list(enumerate(everything)))}
  for b in batches:
    idx = [position[r] for r in _rows(b)]
    assert idx == sorted(idx)
  # Two processes get the same number of batches with the same shapes.
  shards = [pipeline.make_eval_batches(config, source, tok, rows_multiple=ROWS_MULTIPLE,
                                       process_index=p, process_count=2) for p in range(2)]
  assert [b['inputs'].shape for b in shards[0]] == [b['inputs'].shape for b in shards[1]]
  assert collections.Counter(r for s in shards for b in s for r in _rows(b)) == (
      collections.Counter(everything))


def test_batches_come_from_the_token_store_without_the_tokenizer(source, tok, tmp_path):
  config = _config()
  a = pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE,
                                   cache_dir=str(tmp_path), num_epochs=1)
  stores = [f for f in os.listdir(tmp_path) if f.startswith('tokens-')]
  assert len(stores) == 1 and not [f for f in os.listdir(tmp_path) if f.endswith('.partial')]

  class NoTokenizer:  # the second run must neither encode lengths nor batches
    fingerprint = tok.fingerprint
    vocab_size = tok.vocab_size

    def encode_batch(self, texts):
      raise AssertionError('the tokenizer was called: the store was not used')

  b = pipeline.make_train_iterator(config, source, NoTokenizer(), rows_multiple=ROWS_MULTIPLE,
                                   cache_dir=str(tmp_path), num_epochs=1)
  assert _same(list(a), list(b))


def test_bad_settings_are_refused(source, tok):
  make = lambda config, **kw: pipeline.make_train_iterator(config, source, tok, **kw)
  with pytest.raises(pipeline.PipelineError, match='must cover config.max_length=64'):
    make(_config(bucket_lengths=(16, 32)))
  with pytest.raises(pipeline.PipelineError, match='tokens_per_batch=200 is too small'):
    make(_config(tokens_per_batch=200), rows_multiple=4)
  with pytest.raises(pipeline.PipelineError, match='process_index 2'):
    make(_config(), process_index=2, process_count=2)
  # Buckets above the first one covering max_length are never used.
  assert pipeline.bucket_rows(_config(), 4, 2) == ((16, 24, 32, 48, 64), (64, 40, 32, 20, 16))


def test_padding_efficiency_counts_the_real_and_padded_tokens_of_an_epoch(source, tok):
  it = pipeline.make_train_iterator(_config(), source, tok, rows_multiple=ROWS_MULTIPLE,
                                    num_epochs=1)
  batches = list(it)
  # Reference: the epoch's batches themselves (EOS included, padding rows counted as slots).
  padded = sum(b['targets'].size for b in batches)
  real_src = sum(int(np.count_nonzero(b['inputs'])) for b in batches)
  real_tgt = sum(int(np.count_nonzero(b['targets'])) for b in batches)
  assert it.info.padded_tokens == padded
  assert it.info.real_tokens == (real_src, real_tgt)
  assert it.info.padding_efficiency == pytest.approx((real_src / padded, real_tgt / padded))
  assert 0.3 < it.info.padding_efficiency[1] < 1.0
  assert f'target {real_tgt / padded:.2f}' in pipeline.shapes_summary(it.info)
