"""Tests for t2t_jax.data.tokenizer: shared BPE vocabulary, ids, reuse, multi-process wait."""

import gzip
import itertools
import json
import logging
import os
import pickle
import shutil
import threading
import time

import numpy as np
import pytest

from configs import default
from t2t_jax.data import corpora
from t2t_jax.data import tokenizer, vocab_record

VOCAB = 500


def _bible(split, lang, n):
  path = os.path.join(corpora.BUNDLED_CORPUS_DIR, f'{split}.{lang}.gz')
  with gzip.open(path, 'rt', encoding='utf-8') as f:
    return [line.rstrip('\n') for line in itertools.islice(f, n)]


@pytest.fixture(scope='module')
def pairs():
  return [{'source': s, 'target': t}
          for s, t in zip(_bible('train', 'en', 2000), _bible('train', 'es', 2000))]


def _config(vocab_size=VOCAB, sample=5000):
  c = default.get_config()
  c.vocab_size, c.vocab_sample_sentences = vocab_size, sample
  return c


@pytest.fixture(scope='module')
def trained(tmp_path_factory, pairs):
  workdir = str(tmp_path_factory.mktemp('work'))
  calls = []

  def sentences():
    calls.append(1)
    return tokenizer.sample_sentences(pairs, 5000)

  tok = tokenizer.load_or_train(_config(), workdir, sentences)
  assert calls == [1]
  return workdir, tok


def test_files_and_ids(trained):
  workdir, tok = trained
  assert tok.path == os.path.join(workdir, 'vocab', 'spm.model')
  assert os.path.isfile(os.path.join(workdir, 'vocab', 'spm.vocab'))
  # Only the two files and the record: the temp training folder is gone.
  assert sorted(os.listdir(os.path.join(workdir, 'vocab'))) == ['spm.meta.json', 'spm.model',
                                                                'spm.vocab']
  assert tok.vocab_size == VOCAB
  assert (tok.pad_id, tok.eos_id) == (0, 1)
  sp = tok._sp  # pylint: disable=protected-access
  assert [sp.id_to_piece(i) for i in range(3)] == ['<pad>', '</s>', '<unk>']
  assert sp.bos_id() == -1
  ids = tok.encode('And God said, Let there be light: and there was light.')
  assert ids and all(3 <= i < VOCAB for i in ids)  # no pad, EOS or unk


def test_round_trip_both_languages(trained, pairs):
  _, tok = trained
  for text in [p['source'] for p in pairs[:300]] + [p['target'] for p in pairs[:300]]:
    assert tok.decode(tok.encode(text)) == text
  es = 'EN el principio crió Dios los cielos y la tierra.'
  assert tok.decode(tok.encode(es)) == es
  batch = tok.encode_batch([pairs[0]['source'], pairs[1]['target']])
  assert batch == [tok.encode(pairs[0]['source']), tok.encode(pairs[1]['target'])]


def test_decode_stops_at_eos_and_ignores_padding(trained):
  _, tok = trained
  text = 'And the evening and the morning were the first day.'
  ids = tok.encode(text)
  assert tok.decode(ids + [1] + ids) == text
  assert tok.decode(np.array(ids + [1, 0, 0], np.int32)) == text
  assert tok.decode([0] + ids[:2] + [0] + ids[2:]) == text
  assert tok.decode([1] + ids) == ''
  rows = np.zeros((2, len(ids) + 3), np.int32)
  rows[0, :len(ids)] = ids
  rows[0, len(ids)] = 1
  assert tok.decode_batch(rows) == [text, '']


def test_pieces_name_every_id_and_join_back_to_the_text(trained):
  _, tok = trained
  text = 'And God said, Let there be light'
  ids = tok.encode(text)
  pieces = tok.pieces(np.array(ids + [1, 0], np.int32))
  assert pieces[-2:] == ['</s>', '<pad>'] and len(pieces) == len(ids) + 2
  assert pieces[0].startswith('\u2581')  # a word starts here
  assert ''.join(pieces[:-2]).replace('\u2581', ' ').strip() == text


def test_second_call_reuses_the_file(trained):
  workdir, tok = trained
  mtime = os.stat(tok.path).st_mtime_ns

  def must_not_train():
    raise AssertionError('trained again')

  again = tokenizer.load_or_train(_config(), workdir, must_not_train)
  assert again.fingerprint == tok.fingerprint
  assert os.stat(tok.path).st_mtime_ns == mtime
  loaded = tokenizer.load(tok.path)
  assert loaded.encode('light') == tok.encode('light')
  clone = pickle.loads(pickle.dumps(tok))
  assert clone.encode('darkness') == tok.encode('darkness') and clone.path == tok.path


def test_size_mismatch_of_a_vocabulary_without_record_is_refused(trained, tmp_path):
  workdir, tok = trained
  old = str(tmp_path / 'old')  # a workdir from before vocabulary records
  shutil.copytree(workdir, old)
  os.remove(vocab_record.path(old))
  before = open(tokenizer.vocab_path(old), 'rb').read()
  with pytest.raises(tokenizer.TokenizerError, match=r'vocab size 500 .*vocab_size is 600'):
    tokenizer.load_or_train(_config(vocab_size=600), old, lambda: [])
  assert open(tokenizer.vocab_path(old), 'rb').read() == before
  again = tokenizer.load_or_train(_config(), old, lambda: [], data_fingerprint={'dataset': 'x'})
  assert again.fingerprint == tok.fingerprint  # accepted as it is, record or not


def _fingerprint(text_sha):
  return {'dataset': 'local', 'source_lang': 'en', 'target_lang': 'es', 'train_split': 'train',
          'corpus_dir': '/c', 'sha256': text_sha, 'files': {'train': {'train.es': text_sha}}}


@pytest.fixture
def recorded(tmp_path, pairs):
  """A vocabulary trained for _fingerprint('a') (no checkpoint depends on it)."""
  workdir = str(tmp_path / 'run')
  tok = tokenizer.load_or_train(_config(vocab_size=300), workdir,
                                lambda: tokenizer.sample_sentences(pairs[:600], 600),
                                data_fingerprint=_fingerprint('a'))
  return workdir, tok


def _warnings(caplog):
  return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_record_says_what_the_vocabulary_was_trained_from(recorded):
  workdir, tok = recorded
  with open(vocab_record.path(workdir)) as f:
    record = json.load(f)
  assert record == {'sha256': tok.fingerprint, 'vocab_size': 300,
                    'vocab_sample_sentences': 5000, 'data': _fingerprint('a')}


@pytest.mark.parametrize('change', ['data', 'vocab_sample_sentences'])
def test_a_vocabulary_of_other_data_is_trained_again_before_any_checkpoint(
    recorded, pairs, caplog, change):
  """Issue 37 fault 7: the run killed after its vocabulary, train.es edited, the same command
  again: the vocabulary is trained anew (one warning), not reused."""
  workdir, tok = recorded
  config = _config(vocab_size=300, sample=4000 if change != 'data' else 5000)
  data = _fingerprint('b' if change == 'data' else 'a')
  caplog.set_level(logging.INFO)
  new = tokenizer.load_or_train(config, workdir,
                                lambda: tokenizer.sample_sentences(pairs[600:1200], 600),
                                data_fingerprint=data)
  assert new.fingerprint != tok.fingerprint
  [warning] = _warnings(caplog)
  assert tokenizer.vocab_path(workdir) in warning and 'trained again' in warning
  assert ('train.es' in warning) if change == 'data' else ('vocab_sample_sentences' in warning)
  record, _ = vocab_record.read(workdir)
  assert record['sha256'] == new.fingerprint and record['data'] == data
  caplog.clear()  # the same run again: reused without a word
  assert tokenizer.load_or_train(config, workdir, lambda: [], data_fingerprint=data
                                 ).fingerprint == new.fingerprint
  assert not _warnings(caplog)


def test_a_vocabulary_of_other_data_is_refused_once_checkpoints_depend_on_it(recorded):
  workdir, tok = recorded
  before = open(tok.path, 'rb').read()
  with pytest.raises(tokenizer.TokenizerError) as e:
    tokenizer.load_or_train(_config(vocab_size=300), workdir, lambda: [], trained=True,
                            data_fingerprint=_fingerprint('b'))
  assert '\n' not in str(e.value) and tok.path in str(e.value) and 'train.es' in str(e.value)
  assert open(tok.path, 'rb').read() == before


def test_a_replaced_vocabulary_is_refused_with_checkpoints_and_retrained_without(
    recorded, pairs, tmp_path, caplog):
  workdir, tok = recorded
  other = tokenizer.train(tokenizer.sample_sentences(pairs[1200:1800], 600), 300,
                          str(tmp_path / 'other' / 'spm.model'))
  shutil.copy(other.path, tok.path)  # same size, still parses
  with pytest.raises(tokenizer.TokenizerError, match='not the vocabulary .*spm.meta.json'):
    tokenizer.load_or_train(_config(vocab_size=300), workdir, lambda: [], trained=True,
                            data_fingerprint=_fingerprint('a'))
  new = tokenizer.load_or_train(_config(vocab_size=300), workdir,  # an interrupted retraining
                                lambda: tokenizer.sample_sentences(pairs[:600], 600),
                                data_fingerprint=_fingerprint('a'))
  assert new.fingerprint != other.fingerprint and len(_warnings(caplog)) == 1
  assert vocab_record.read(workdir)[0]['sha256'] == new.fingerprint


def test_with_checkpoints_a_record_that_disagrees_with_the_file_is_judged_by_theirs(
    recorded, caplog):
  """Issue 43 item 3.11: an edited sha256 in spm.meta.json beside the spm.model the
  checkpoints were trained with was said to be what the checkpoints were trained with."""
  workdir, tok = recorded
  where = vocab_record.path(workdir)
  record = json.load(open(where))
  edited = dict(record, sha256='e' * 64)
  with open(where, 'w') as f:
    json.dump(edited, f)
  caplog.set_level(logging.INFO)
  theirs = vocab_record.of_tokenizer(tok)  # the checkpoints match the file: the record is wrong
  again = tokenizer.load_or_train(_config(vocab_size=300), workdir, lambda: [], trained=True,
                                  data_fingerprint=_fingerprint('a'), checkpoint_vocabulary=theirs)
  assert again.fingerprint == tok.fingerprint
  [warning] = _warnings(caplog)
  assert warning.startswith(f'{where} does not describe {tok.path} (sha256 {tok.fingerprint[:12]}'
                            '... in the file, eeeeeeeeeeee... in the record, ')
  assert 'the record is damaged or was edited' in warning
  assert json.load(open(where)) == edited  # reported, not rewritten
  for saved, blame in [  # the file is the one that differs, or nothing tells which
      ({'sha256': 'e' * 64}, 'the checkpoints of this workdir were trained with the vocabulary '
                             'its record describes: the file was replaced'),
      ({'sha256': 'f' * 64}, 'nor is it the vocabulary the checkpoints of this workdir were '
                             'trained with: the file was replaced'),
      (None, 'the file was replaced or the record edited')]:
    with pytest.raises(tokenizer.TokenizerError) as raised:
      tokenizer.load_or_train(_config(vocab_size=300), workdir, lambda: [], trained=True,
                              data_fingerprint=_fingerprint('a'), checkpoint_vocabulary=saved)
    assert str(raised.value).startswith(f'{tok.path}: it is not the vocabulary {where} '
                                        'describes (sha256 ')
    assert f'; {blame}; it cannot be trained again' in str(raised.value)


def test_an_interrupted_training_leaves_a_record_that_does_not_describe_the_model(
    tmp_path, pairs, monkeypatch):
  """The record is written before the model: killed in between, the next run trains."""
  workdir = str(tmp_path / 'run')
  real = tokenizer.paths.write_atomic

  def killed(path, data, **kwargs):
    if path.endswith('.model'):
      raise KeyboardInterrupt
    real(path, data, **kwargs)
  monkeypatch.setattr(tokenizer.paths, 'write_atomic', killed)
  with pytest.raises(KeyboardInterrupt):
    tokenizer.load_or_train(_config(vocab_size=300), workdir,
                            lambda: tokenizer.sample_sentences(pairs[:600], 600))
  assert os.path.exists(vocab_record.path(workdir))
  assert not os.path.exists(tokenizer.vocab_path(workdir))


def test_sample_is_deterministic_and_bounded(pairs):
  a = list(tokenizer.sample_sentences(pairs, 50, seed=3))
  assert a == list(tokenizer.sample_sentences(pairs, 50, seed=3))
  assert a != list(tokenizer.sample_sentences(pairs, 50, seed=4))
  assert len(a) == 100
  # Source then target of each sampled pair, in corpus order.
  src = a[0::2]
  idx = [next(i for i, p in enumerate(pairs) if p['source'] == s) for s in src]
  assert idx == sorted(idx)
  assert a[1::2] == [pairs[i]['target'] for i in idx]
  assert len(list(tokenizer.sample_sentences(pairs[:10], 50))) == 20


def test_training_reads_at_most_the_sample_size(tmp_path, pairs):
  consumed = []

  def endless():
    for i, p in enumerate(itertools.cycle(pairs)):
      consumed.append(i)
      yield p['source']

  tok = tokenizer.load_or_train(_config(vocab_size=300, sample=400), str(tmp_path), endless)
  assert tok.vocab_size == 300
  assert len(consumed) <= 801  # 2 * vocab_sample_sentences (+ the one that stops it)


def test_other_process_waits_for_process_zero(tmp_path, pairs):
  workdir = str(tmp_path)
  results = {}

  def process_zero():
    time.sleep(0.3)  # process 1 starts waiting first
    results[0] = tokenizer.load_or_train(
        _config(vocab_size=300), workdir,
        lambda: tokenizer.sample_sentences(pairs[:1000], 1000), 0, 2)

  thread = threading.Thread(target=process_zero)
  thread.start()

  def must_not_train():
    raise AssertionError('only process 0 trains')

  waiting = tokenizer.load_or_train(_config(vocab_size=300), workdir, must_not_train, 1, 2,
                                    timeout_s=60, poll_s=0.05)
  thread.join()
  assert waiting.fingerprint == results[0].fingerprint
  assert waiting.vocab_size == 300


def test_wait_times_out_with_a_clear_error(tmp_path):
  with pytest.raises(tokenizer.TokenizerError, match=r'waited 0.2 s .*spm\.model'):
    tokenizer.load_or_train(_config(), str(tmp_path), lambda: [], 1, 2, timeout_s=0.2,
                            poll_s=0.05)
  with pytest.raises(tokenizer.TokenizerError, match='No SentencePiece model'):
    tokenizer.load(str(tmp_path / 'missing.model'))


def test_too_large_vocab_fails_clearly(tmp_path):
  with pytest.raises(tokenizer.TokenizerError, match='vocab_size=5000'):
    tokenizer.load_or_train(_config(vocab_size=5000), str(tmp_path),
                            lambda: ['a tiny corpus', 'with few words'])
  assert not os.path.exists(tmp_path / 'vocab')  # trained in a temp folder: nothing written


def test_user_defined_symbols_are_one_piece_each_and_leave_words_alone(tmp_path):
  # Parsing's tree tokens (t2t_jax/parsing/linearize.py): '▁' + '(X' / ')X'.
  target = '(S (NP (DT (NN )NP (VP (VBD (NP (NNP )NP )VP (. )S'
  source = 'The Sales office sold NPR shares to A/S Smith .'
  symbols = sorted({'\u2581' + t for t in target.split()})
  calls = []

  def symbols_fn():
    calls.append(1)
    return symbols

  tok = tokenizer.load_or_train(_config(vocab_size=80), str(tmp_path),
                                lambda: [source, target] * 50, symbols_fn=symbols_fn)
  assert calls == [1]
  ids = tok.encode(target)
  assert tok.pieces(ids) == ['\u2581' + t for t in target.split()]
  assert tok.decode(ids) == target
  # No symbol is cut out of a word: a word never starts with a bracket.
  assert not set(tok.pieces(tok.encode(source))) & set(symbols)
  assert tok.decode(tok.encode(source)) == source


def test_byte_fallback_spells_unseen_characters_so_every_text_round_trips(tmp_path, pairs):
  text = 'Jesús wept 😀 over Ḱ, 東京 and Ж.'  # characters the Bible's sample never saw
  sample = lambda: tokenizer.sample_sentences(pairs[:500], 1000)  # noqa: E731
  plain = tokenizer.load_or_train(_config(vocab_size=400), str(tmp_path / 'plain'), sample)
  assert plain.decode(plain.encode(text)) == 'Jesús wept  ⁇  over  ⁇ ,  ⁇  and  ⁇ .'
  c = _config(vocab_size=400)
  c.byte_fallback = True
  tok = tokenizer.load_or_train(c, str(tmp_path / 'bytes'), sample)
  ids = tok.encode(text)
  assert tok.decode(ids) == text and tokenizer.UNK_ID not in ids
  # The emoji is its four UTF-8 bytes, one piece each; a seen word keeps its pieces.
  assert [p for p in tok.pieces(ids) if p.startswith('<0x')][:4] == [
      '<0xF0>', '<0x9F>', '<0x98>', '<0x80>']
  assert tok.pieces(tok.encode('wept')) == plain.pieces(plain.encode('wept'))
  assert sum(p.startswith('<0x') for p in tok.pieces(range(400))) == 256
  # The record says so: the same workdir without byte fallback is another vocabulary.
  assert vocab_record.read(str(tmp_path / 'bytes'))[0]['byte_fallback'] is True
