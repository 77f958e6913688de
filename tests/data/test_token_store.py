"""Tests for t2t_jax.data.token_store: ids equal to the tokenizer's, built once, resumed,
rebuilt after damage, encoded in parallel processes alike."""

import gzip
import itertools
import json
import os

import numpy as np
import pytest

from t2t_jax.data import corpora, token_store, tokenizer

N = 700


def _bible(lang, n):
  with gzip.open(os.path.join(corpora.BUNDLED_CORPUS_DIR, f'train.{lang}.gz'), 'rt',
                 encoding='utf-8') as f:
    return [line.rstrip('\n') for line in itertools.islice(f, n)]


class Named(list):
  """A picklable list source with a name (what keys a store on disk)."""
  name = 'bible-700'


class Counting:
  """A tokenizer that counts the texts it encodes."""

  def __init__(self, tok):
    self.tok, self.texts = tok, 0
    self.fingerprint, self.vocab_size = tok.fingerprint, tok.vocab_size

  def encode_batch(self, texts):
    self.texts += len(texts)
    return self.tok.encode_batch(texts)


@pytest.fixture(scope='module')
def source():
  return Named({'source': s, 'target': t} for s, t in zip(_bible('en', N), _bible('es', N)))


@pytest.fixture(scope='module')
def tok(tmp_path_factory, source):
  path = str(tmp_path_factory.mktemp('vocab') / 'spm.model')
  return tokenizer.train((p[s] for p in source for s in ('source', 'target')), 500, path)


def _check_equal_to_the_tokenizer(store, source, tok):
  assert len(store) == len(source)
  for side in token_store.SIDES:
    reference = [tok.encode(p[side]) for p in source]
    assert store.lengths(side).tolist() == [len(r) + 1 for r in reference]
    assert all(store.ids(side, i).tolist() == r for i, r in enumerate(reference))
    pairs = np.array([5, 0, 699, 5, 42])
    flat, lens = store.ragged(side, pairs)
    assert flat.dtype == np.int32 and lens.tolist() == [len(reference[i]) for i in pairs]
    assert flat.tolist() == [t for i in pairs for t in reference[i]]


def test_in_memory_and_on_disk_hold_the_tokenizers_ids(source, tok, tmp_path):
  _check_equal_to_the_tokenizer(token_store.load_or_build(source, tok, None), source, tok)
  store = token_store.load_or_build(source, tok, str(tmp_path))
  assert store.path == str(tmp_path / token_store.store_key('bible-700', N, tok.fingerprint))
  assert sorted(os.listdir(store.path)) == ['meta.json', 'source.offsets', 'source.tokens',
                                            'target.offsets', 'target.tokens']
  meta = json.loads(open(os.path.join(store.path, 'meta.json')).read())
  assert meta['dtype'] == 'uint16' and meta['pairs'] == N  # 500 pieces fit 16 bits
  _check_equal_to_the_tokenizer(store, source, tok)
  # Opened again: read, not encoded.
  counting = Counting(tok)
  _check_equal_to_the_tokenizer(token_store.load_or_build(source, counting, str(tmp_path)),
                                source, tok)
  assert counting.texts == 0


def test_large_vocabularies_are_stored_as_int32(source, tok):
  big = Counting(tok)
  big.vocab_size = 70_000
  assert token_store.load_or_build(source, big, None)._tokens['source'].dtype == np.int32


@pytest.mark.parametrize('damage', ['missing', 'truncated', 'garbled', 'meta garbled',
                                    'meta missing'])
@pytest.mark.parametrize('name', ['source.tokens', 'target.offsets'])
def test_a_damaged_store_is_rebuilt_after_one_warning(source, tok, tmp_path, damage, name,
                                                      caplog):
  folder = token_store.load_or_build(source, tok, str(tmp_path)).path
  target = os.path.join(folder, 'meta.json' if damage.startswith('meta') else name)
  data = open(target, 'rb').read()
  if damage.endswith('missing'):
    os.remove(target)
  elif damage == 'truncated':
    open(target, 'wb').write(data[:len(data) // 2])
  else:  # one byte changed: only the checksum can tell
    middle = len(data) // 2
    open(target, 'wb').write(data[:middle] + bytes([data[middle] ^ 0x5A]) + data[middle + 1:])
  counting = Counting(tok)
  with caplog.at_level('WARNING'):
    store = token_store.load_or_build(source, counting, str(tmp_path))
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert len(warnings) == 1 and 'is damaged' in warnings[0] and 'rebuilding' in warnings[0]
  assert counting.texts == 2 * N and store.path == folder
  _check_equal_to_the_tokenizer(store, source, tok)
  # Nothing else was written or left behind: the store and the host lock only.
  assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(folder),
                                                 '.t2t_jax-prepare.lock'])


def test_an_interrupted_build_resumes_at_the_missing_chunks(source, tok, tmp_path,
                                                            monkeypatch):
  monkeypatch.setattr(token_store, 'CHUNK_PAIRS', 200)  # chunks 0-199, ..., 600-699
  calls = []
  real = token_store._write_chunk

  def interrupted(source_, tok_, start, stop, dtype, path):
    if len(calls) == 2:
      raise KeyboardInterrupt
    calls.append(start)
    return real(source_, tok_, start, stop, dtype, path)

  monkeypatch.setattr(token_store, '_write_chunk', interrupted)
  with pytest.raises(KeyboardInterrupt):
    token_store.load_or_build(source, tok, str(tmp_path))
  assert calls == [0, 200]
  monkeypatch.setattr(token_store, '_write_chunk', real)
  counting = Counting(tok)
  store = token_store.load_or_build(source, counting, str(tmp_path))
  assert counting.texts == 2 * 300  # chunks 400-599 and 600-699 only
  _check_equal_to_the_tokenizer(store, source, tok)
  assert not [f for f in os.listdir(tmp_path) if f.endswith('.partial')]


def test_parallel_processes_write_the_same_store(source, tok, tmp_path, monkeypatch):
  monkeypatch.setattr(token_store, 'CHUNK_PAIRS', 300)
  monkeypatch.setattr(token_store, 'PARALLEL_MIN_PAIRS', 1)
  parallel = token_store.load_or_build(source, tok, str(tmp_path / 'a'), num_workers=2)
  serial = token_store.load_or_build(source, tok, str(tmp_path / 'b'), num_workers=1)
  for name in ('source.tokens', 'source.offsets', 'target.tokens', 'target.offsets'):
    with open(os.path.join(parallel.path, name), 'rb') as a, \
        open(os.path.join(serial.path, name), 'rb') as b:
      assert a.read() == b.read()


def test_non_integer_ids_are_refused_in_one_line(source, tmp_path):
  class Words:
    fingerprint, vocab_size = 'words', 100

    def encode_batch(self, texts):
      return [t.split() for t in texts]

  with pytest.raises(token_store.TokenStoreError, match='not uint16 integers for pairs 0-'):
    token_store.load_or_build(source, Words(), str(tmp_path))


def test_inconsistent_chunks_left_by_an_interrupted_build_are_encoded_again(source, tok,
                                                                           tmp_path,
                                                                           monkeypatch):
  monkeypatch.setattr(token_store, 'CHUNK_PAIRS', 200)  # chunks 0-199, ..., 600-699
  clean = token_store.load_or_build(source, tok, str(tmp_path / 'clean'))
  cache = tmp_path / 'cache'
  folder = str(cache / token_store.store_key('bible-700', N, tok.fingerprint))
  partial = folder + '.partial'
  os.makedirs(partial)
  dtype = token_store._dtype(tok).name
  chunk = lambda k: token_store._chunk_path(partial, k)  # noqa: E731
  # What a build interrupted by another version or a torn write may leave: each file is a
  # readable npz, only its arrays disagree.
  token_store._write_chunk(source, tok, 0, 150, dtype, chunk(0))  # 150 pairs, not 200
  token_store._write_chunk(source, tok, 200, 400, dtype, chunk(1))
  with np.load(chunk(1)) as f:
    arrays = {k: f[k] for k in f.files}
  arrays['target_ids'] = arrays['target_ids'][:-1]  # lengths sum to one id more than there is
  np.savez(chunk(1), **arrays)
  token_store._write_chunk(source, tok, 400, 600, dtype, chunk(2))  # intact: kept
  with open(chunk(3), 'wb') as f:
    f.write(b'PK\x03\x04 not a zip')  # unreadable
  counting = Counting(tok)
  store = token_store.load_or_build(source, counting, str(cache))
  assert counting.texts == 2 * (200 + 200 + 100)  # chunks 0, 1 and 3 again; 2 reused
  _check_equal_to_the_tokenizer(store, source, tok)
  for name in ('source.tokens', 'source.offsets', 'target.tokens', 'target.offsets'):
    with open(os.path.join(store.path, name), 'rb') as a, \
        open(os.path.join(clean.path, name), 'rb') as b:
      assert a.read() == b.read(), name
  assert not os.path.exists(partial)
