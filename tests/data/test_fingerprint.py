"""The data fingerprint: what it records of a corpus, and which changes refuse a resume."""

import hashlib
import logging
import os

import jax
import jax.numpy as jnp
import optax
import pytest

from configs import default
from t2t_jax.runtime import checkpoint, damage, parallel
from t2t_jax.runtime.checkpoint import CheckpointError
from t2t_jax.data import corpora, fingerprint, textfiles


def _config(corpus_dir):
  c = default.get_config()
  c.dataset, c.local_corpus_dir, c.source_lang, c.target_lang = 'local', corpus_dir, 'en', 'de'
  return c


def _write(path, lines):
  with open(path, 'w', encoding='utf-8') as f:
    f.write(''.join(line + '\n' for line in lines))


@pytest.fixture
def corpus(tmp_path):
  folder = tmp_path / 'corpus'
  folder.mkdir()
  for split, n in (('train', 4), ('dev', 2)):
    _write(folder / f'{split}.en', [f'{split} {i}' for i in range(n)])
    _write(folder / f'{split}.de', [f'{split} de {i}' for i in range(n)])
  return str(folder)


def _sha(path):
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


def test_local_fingerprint_hashes_each_file_once_for_the_run_and_its_preparation(corpus):
  before = corpora._hash_files.cache_info()
  fp = fingerprint.compute(_config(corpus), None)
  assert fp == {
      'dataset': 'local', 'source_lang': 'en', 'target_lang': 'de', 'train_split': 'train',
      'corpus_dir': corpus, 'sha256': fp['sha256'],
      'files': {split: {name: _sha(os.path.join(corpus, name))
                        for name in (f'{split}.de', f'{split}.en')} for split in ('dev', 'train')}}
  splits = textfiles.discover_splits(corpus, 'en', 'de')
  # The same hash names the prepared dataset, and preparing it does not read the files again.
  assert corpora._fingerprint(corpus, splits, 'en', 'de') == fp['sha256']
  after = corpora._hash_files.cache_info()
  assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)
  _write(os.path.join(corpus, 'dev.en'), ['edited', 'dev'])
  assert fingerprint.compute(_config(corpus), None)['sha256'] != fp['sha256']


def test_compare_refuses_changed_training_files_and_notes_the_others(corpus):
  saved = fingerprint.compute(_config(corpus), None)
  assert fingerprint.compare(saved, saved) == (None, [])
  _write(os.path.join(corpus, 'train.de'), ['edited'] * 4)
  os.remove(os.path.join(corpus, 'dev.en'))
  os.remove(os.path.join(corpus, 'dev.de'))
  _write(os.path.join(corpus, 'test.tsv'), ['a\tb'])
  now = fingerprint.compute(_config(corpus), None)
  refusal, notes = fingerprint.compare(saved, now)
  train_de = os.path.join(corpus, 'train.de')
  assert refusal == (
      f'the train split changed since they were written: {train_de} (sha256 '
      f'{saved["files"]["train"]["train.de"][:12]}... now {_sha(train_de)[:12]}...)')
  assert notes == [
      f'the dev split changed since the checkpoint was written ({corpus}/dev.de (gone), '
      f'{corpus}/dev.en (gone)); its metrics before and after are not comparable',
      f'the test split changed since the checkpoint was written ({corpus}/test.tsv (new)); '
      'its metrics before and after are not comparable']


def test_another_folder_with_other_file_names_names_each_side_with_its_own_folder(corpus, tmp_path):
  saved = fingerprint.compute(_config(corpus), None)
  other = tmp_path / 'other'  # e.g. the bundled corpus, whose files are gzipped
  now = dict(saved, corpus_dir=str(other),
             files={'train': {'train.de.gz': 'a' * 64, 'train.en.gz': 'b' * 64}})
  refusal, _ = fingerprint.compare(saved, now)
  # Nothing is 'gone': the run's files are where they were; this command reads another folder.
  assert refusal == (f'the train split changed since they were written: {corpus} had '
                     f'train.de, train.en; {other} has train.de.gz, train.en.gz')


def test_wmt_fingerprint_and_its_changes(tmp_path):
  config = default.get_config()
  config.dataset, config.source_lang, config.target_lang = 'wmt14_translate/de-en', 'en', 'de'
  wmt = fingerprint.compute(config, str(tmp_path / 'tfds'))  # the builder only: no download
  assert wmt == {'dataset': 'wmt14_translate/de-en', 'source_lang': 'en', 'target_lang': 'de',
                 'train_split': 'train', 'tfds_name': 'wmt14_translate', 'tfds_config': 'de-en',
                 'tfds_version': '1.0.0'}
  assert not os.path.exists(tmp_path / 'tfds')
  assert fingerprint.compare(wmt, dict(wmt)) == (None, [])
  assert fingerprint.compare(wmt, dict(wmt, tfds_version='1.1.0')) == (
      "TFDS tfds_version '1.0.0' then, '1.1.0' now", [])
  assert fingerprint.compare(wmt, {'dataset': 'local'}) == (
      "dataset 'wmt14_translate/de-en' then, 'local' now", [])


def _save_one(workdir, data_fingerprint):
  params = {'w': jnp.ones((2,), jnp.float32)}
  state = parallel.TrainState(jnp.asarray(1, jnp.int32), params,
                              jax.jit(optax.adam(1e-3).init)(params))
  checkpointer = checkpoint.Checkpointer(workdir, data_fingerprint=data_fingerprint)
  checkpointer.save(1, state, {'position': 1}, default.get_config())
  checkpointer.close()


def test_resume_compares_the_saved_fingerprint(corpus, tmp_path, caplog):
  caplog.set_level(logging.INFO)
  config = default.get_config()
  saved = fingerprint.compute(_config(corpus), None)
  workdir = str(tmp_path / 'run')
  _save_one(workdir, saved)
  checkpointer = checkpoint.Checkpointer(workdir, data_fingerprint=saved)
  assert checkpointer.saved_fingerprint(1) == saved
  checkpointer.check_compatible(config)

  _write(os.path.join(corpus, 'dev.de'), ['x', 'y'])
  dev_edited = fingerprint.compute(_config(corpus), None)
  checkpoint.Checkpointer(workdir, data_fingerprint=dev_edited).check_compatible(config)
  assert [r.getMessage() for r in caplog.records if r.levelname == 'WARNING'] == [
      f'the dev split changed since the checkpoint was written ({corpus}/dev.de (sha256 '
      f'{saved["files"]["dev"]["dev.de"][:12]}... now {dev_edited["files"]["dev"]["dev.de"][:12]}'
      '...)); its metrics before and after are not comparable (checkpoint step 1)']

  _write(os.path.join(corpus, 'train.en'), ['edited'] * 4)
  train_edited = fingerprint.compute(_config(corpus), None)
  with pytest.raises(CheckpointError) as raised:
    checkpoint.Checkpointer(workdir, data_fingerprint=train_edited).check_compatible(config)
  assert str(raised.value) == (
      f'{workdir}/checkpoints holds checkpoints (latest step 1) trained on other data: the '
      f'train split changed since they were written: {corpus}/train.en (sha256 '
      f'{saved["files"]["train"]["train.en"][:12]}... now '
      f'{train_edited["files"]["train"]["train.en"][:12]}...). Restore those files, or train '
      'in another --workdir; nothing was changed.')


def test_checkpoints_without_a_fingerprint_are_accepted(corpus, tmp_path, caplog):
  caplog.set_level(logging.INFO)
  workdir = str(tmp_path / 'old')
  _save_one(workdir, None)  # as written before fingerprints existed
  assert not os.path.exists(os.path.join(workdir, 'checkpoints', '1', 'data_fingerprint'))
  now = fingerprint.compute(_config(corpus), None)
  checkpointer = checkpoint.Checkpointer(workdir, data_fingerprint=now)
  assert checkpointer.saved_fingerprint(1) is None
  checkpointer.check_compatible(default.get_config())
  assert ('checkpoint step 1 was written without a data fingerprint; the training data cannot '
          'be compared with it') in [r.getMessage() for r in caplog.records]


def test_a_refusal_on_any_process_stops_every_process(corpus, tmp_path, monkeypatch):
  """Each process hashes its own copy of the data; process 1's refusal is simulated."""
  saved = fingerprint.compute(_config(corpus), None)
  workdir = str(tmp_path / 'run')
  _save_one(workdir, saved)
  outcomes = iter([[damage.OK], [damage.FAILED]])  # reading step 1's config; the refusal

  def agree(code):
    codes = [code] + next(outcomes)
    return damage.combine(codes), codes

  monkeypatch.setattr(damage, 'agree', agree)
  with pytest.raises(CheckpointError) as raised:
    checkpoint.Checkpointer(workdir, data_fingerprint=saved).check_compatible(
        default.get_config())
  assert str(raised.value) == (f'process(es) 1 refused to resume from {workdir}/checkpoints '
                               '(their log says why); nothing was changed.')
