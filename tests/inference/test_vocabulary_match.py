"""A checkpoint and the workdir's vocabulary must be the pair trained together (issue 37,
faults 7 and 10): checkpoints save the vocabulary's sha256; a vocabulary replaced by another of
the same size (which still parses) stops resume, eval and decode in one line naming the
vocabulary, and a checkpoint of another run in one line naming the checkpoint."""

import json
import logging
import os
import shutil

import pytest

from t2t_jax import config as config_lib
from t2t_jax.data import tokenizer, vocab_record
from t2t_jax.inference import checkpoint_choice
from t2t_jax.runtime import checkpoint
from t2t_jax.training import resume_checks, train
from conftest import BUNDLED


@pytest.fixture
def run(tiny_workdir, tmp_path):
  root = str(tmp_path / 'run')
  shutil.copytree(tiny_workdir, root)
  return root


@pytest.fixture(scope='module')
def other_vocabulary(tmp_path_factory):
  """Another 400-piece vocabulary: the same size as the tiny run's, from other text."""
  import gzip
  with gzip.open(os.path.join(BUNDLED, 'train.es.gz'), 'rt', encoding='utf-8') as f:
    lines = [next(f) for _ in range(3000)][1500:]
  return tokenizer.train(lines, 400, str(tmp_path_factory.mktemp('other') / 'spm.model'))


def _item(step_dir, name):
  with open(os.path.join(step_dir, name, 'metadata')) as f:
    return json.load(f)


def _rewrite(step_dir, name, change):
  path = os.path.join(step_dir, name, 'metadata')
  with open(path) as f:
    value = json.load(f)
  change(value)
  with open(path, 'w') as f:
    json.dump(value, f)


def test_checkpoints_save_the_vocabulary_they_were_trained_with(run):
  tok = tokenizer.load(tokenizer.vocab_path(run))
  step = os.path.join(run, 'checkpoints', '10')
  assert _item(step, 'vocabulary') == {'sha256': tok.fingerprint, 'vocab_size': 400}
  assert vocab_record.describes(run, tok)  # train.py recorded what it was trained from:
  assert vocab_record.read(run)[0]['data'] == _item(step, 'data_fingerprint')
  assert vocab_record.read(run)[0]['vocab_sample_sentences'] == 1200
  assert checkpoint_choice.load_inference_params(run).vocabulary == _item(step, 'vocabulary')


def test_a_replaced_vocabulary_stops_eval_decode_and_resume_in_one_line(run, other_vocabulary):
  vocab = tokenizer.vocab_path(run)
  shutil.copy(other_vocabulary.path, vocab)
  with pytest.raises(tokenizer.TokenizerError) as raised:
    checkpoint_choice.load_inference_params(run)  # what eval, decode, attention, export load
  message = str(raised.value)
  assert '\n' not in message and message.startswith(f'{vocab} is not the vocabulary checkpoint '
                                                    f'{run}/checkpoints/10 was trained with')
  assert 'replaced' in message
  # Resume: the checkpoint's hash, also where the record was replaced with the vocabulary.
  os.remove(vocab_record.path(run))
  with pytest.raises(checkpoint.CheckpointError) as raised:
    resume_checks.check_vocabulary(checkpoint.Checkpointer(run), 10, tokenizer.load(vocab))
  assert '\n' not in str(raised.value) and str(raised.value).startswith(
      f'{vocab} is not the vocabulary checkpoint step 10')


@pytest.mark.parametrize('where', ['a path', 'a step of this workdir'])
@pytest.mark.parametrize('saved', ['hash', 'config only'])
def test_a_checkpoint_of_another_run_is_blamed_not_the_vocabulary(run, tmp_path, where, saved):
  """Fault 10: `--checkpoint=500` of another run said `vocab/spm.model` is damaged."""
  foreign = (str(tmp_path / 'other' / 'checkpoints' / '500') if where == 'a path'
             else os.path.join(run, 'checkpoints', '500'))
  shutil.copytree(os.path.join(run, 'checkpoints', '10'), foreign)
  if saved == 'hash':  # another vocabulary of the same size
    _rewrite(foreign, 'vocabulary', lambda v: v.update(sha256='0' * 64))
  else:  # from before hashes were saved: only its config's vocab_size tells
    shutil.rmtree(os.path.join(foreign, 'vocabulary'))
    _rewrite(foreign, 'config', lambda c: c.update(vocab_size=300))
  with pytest.raises(checkpoint.CheckpointError) as raised:
    checkpoint_choice.load_inference_params(run, foreign if where == 'a path' else '500')
  message = str(raised.value)
  assert '\n' not in message and message.startswith(
      f'checkpoint {foreign} was trained with another vocabulary than this workdir\'s '
      f'{tokenizer.vocab_path(run)} (')
  assert ('0000000' in message) if saved == 'hash' else ('vocab_size=300' in message)
  assert 'damaged' not in message and 'restore' not in message


def test_checkpoints_from_before_vocabulary_hashes_are_accepted(run):
  step = os.path.join(run, 'checkpoints', '10')
  shutil.rmtree(os.path.join(step, 'vocabulary'))
  os.remove(vocab_record.path(run))
  loaded = checkpoint_choice.load_inference_params(run)
  assert loaded.vocabulary is None and loaded.step == 10
  tok = tokenizer.load(tokenizer.vocab_path(run))
  resume_checks.check_vocabulary(checkpoint.Checkpointer(run), 10, tok)


def test_resume_with_an_edited_record_beside_the_checkpoints_vocabulary_warns_and_goes_on(
    run, caplog):
  """Issue 43 item 3.11: resume said the checkpoints were trained with the vocabulary the
  (edited) record describes, and refused; they match spm.model."""
  where = vocab_record.path(run)
  with open(where) as f:
    record = json.load(f)
  with open(where, 'w') as f:
    json.dump(dict(record, sha256='e' * 64), f)
  checkpointer = checkpoint.Checkpointer(run)
  step = os.path.join(run, 'checkpoints', '10')
  assert train.saved_vocabulary(checkpointer) == _item(step, 'vocabulary')
  config = config_lib.from_json(checkpointer.saved_config(10))
  caplog.set_level(logging.INFO)
  data = train.Data(config, run, with_eval=False, trained=True,
                    checkpoint_vocabulary=train.saved_vocabulary(checkpointer))
  data.train.close()
  assert data.tokenizer.fingerprint == _item(step, 'vocabulary')['sha256']
  assert any('the record is damaged or was edited' in r.getMessage() for r in caplog.records)
