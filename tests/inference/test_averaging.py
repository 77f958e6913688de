"""Eval, decode and average on damaged checkpoints (fall back, or one line naming the step;
never moving anything), and the warning about an average older than the training checkpoints."""

import errno
import glob
import logging
import os

import numpy as np
import orbax.checkpoint as ocp
import pytest

from t2t_jax.inference import averaging, checkpoint_choice
from t2t_jax.runtime.checkpoint import CheckpointError
from checkpoint_helpers import four, leaves, save, snapshot, tree  # noqa: F401  (four: a fixture)

pytestmark = pytest.mark.filterwarnings('ignore::pytest.PytestUnraisableExceptionWarning')


def damage_arrays(checkpoint_dir):
  for path in glob.glob(os.path.join(checkpoint_dir, 'state', '**', 'd', '*'), recursive=True):
    with open(path, 'wb') as f:
      f.write(b'damaged')


def damage_file(path, data=b'{"d_model": 8,'):
  with open(path, 'wb') as f:
    f.write(data)


def warnings(caplog):
  return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_eval_falls_back_past_a_damaged_training_checkpoint(four, caplog):
  damage_arrays(os.path.join(four, 'checkpoints', '4'))
  before = snapshot(four)
  loaded = checkpoint_choice.load_inference_params(four)
  assert (loaded.description, loaded.step) == ('training checkpoint step 3', 3)
  np.testing.assert_array_equal(leaves(loaded.params)[0], 2.0)
  [warning] = warnings(caplog)
  assert warning.startswith(f'checkpoint {four}/checkpoints/4 is damaged (ValueError: '
                            'OUT_OF_RANGE: ...') and warning.endswith(
                                'is not valid for value of size 7); skipping it')
  assert snapshot(four) == before  # eval moves nothing: training may be writing there


def test_a_damaged_checkpoint_asked_for_is_refused_in_one_line(four, caplog):
  damage_file(os.path.join(four, 'checkpoints', '4', 'config', 'metadata'))
  with pytest.raises(CheckpointError) as raised:
    checkpoint_choice.load_inference_params(four, '4')
  assert str(raised.value) == (
      f'checkpoint {four}/checkpoints/4 is damaged (JSONDecodeError: Expecting property name '
      'enclosed in double quotes: line 1 column 15 (char 14)); choose another with '
      '--checkpoint=STEP (training steps: 1, 2, 3, 4) or leave --checkpoint out to use the '
      'newest readable one')
  assert warnings(caplog) == []
  assert checkpoint_choice.load_inference_params(four, '3').step == 3


def test_a_damaged_average_falls_back_to_the_next_one(four, caplog):
  averaging.average_checkpoints(four, 2)
  newest = averaging.average_checkpoints(four, 3)  # same last step, larger N: preferred
  damage_arrays(newest.path)
  loaded = checkpoint_choice.load_inference_params(four)
  assert loaded.description == 'averaged steps 3,4'
  np.testing.assert_array_equal(leaves(loaded.params)[0], 4.0)
  assert [w.split(' (')[0] for w in warnings(caplog)] == [
      f'checkpoint {newest.path} is damaged']


def test_an_average_older_than_training_is_named_with_the_refresh_command(four, caplog):
  averaging.average_checkpoints(four, 2)
  assert checkpoint_choice.load_inference_params(four).description == 'averaged steps 3,4'
  assert warnings(caplog) == []
  save(four, {5: tree(9.0)})
  stale = checkpoint_choice.load_inference_params(four)
  assert stale.description == 'averaged steps 3,4'
  assert warnings(caplog) == [
      'using averaged/step_4_last_2 (averaged steps 3,4), but training checkpoints up to step 5 '
      f'are newer; refresh the average with: python main.py --mode=average --workdir={four} '
      '(or pick one with --checkpoint=5)']
  caplog.clear()
  checkpoint_choice.load_inference_params(four, 'averaged/step_4_last_2')  # asked for: no warning
  assert warnings(caplog) == []


@pytest.mark.parametrize('damaged', ['arrays', 'state/_METADATA', 'config/metadata'])
def test_average_skips_a_damaged_checkpoint(four, caplog, damaged):
  step_dir = os.path.join(four, 'checkpoints', '4')
  if damaged == 'arrays':
    damage_arrays(step_dir)
  else:
    damage_file(os.path.join(step_dir, damaged))
  before = snapshot(os.path.join(four, 'checkpoints'))
  averaged = averaging.average_checkpoints(four, 2)
  assert averaged.steps == (2, 3) and averaged.path == os.path.join(four, 'averaged',
                                                                    'step_3_last_2')
  for leaf in leaves(averaged.params):
    np.testing.assert_array_equal(leaf, 1.5)
  assert [w.split(' (')[0] for w in warnings(caplog)] == [f'checkpoint {step_dir} is damaged']
  assert snapshot(os.path.join(four, 'checkpoints')) == before
  assert averaging.average_checkpoints(four, 2).path == averaged.path  # found, not rewritten


def _damage_three_of_four(workdir, monkeypatch):
  for step in (2, 3, 4):
    damage_arrays(os.path.join(workdir, 'checkpoints', str(step)))


def _fail_array_reads(workdir, monkeypatch):
  def failing(self, directory, *args, **kwargs):
    raise OSError(errno.EIO, 'Input/output error')
  monkeypatch.setattr(ocp.PyTreeCheckpointHandler, 'restore', failing)


@pytest.mark.parametrize('cause, message', [
    (_damage_three_of_four,
     r'cannot average the last 2 checkpoints: only 1 of the 4 in .*checkpoints are readable '
     r'\(damaged: step 2: ValueError: OUT_OF_RANGE: .*; step 3: .*; step 4: .*\)'),
    (_fail_array_reads,  # a passing failure: nothing skipped
     r'checkpoint .*/checkpoints/3 could not be read \(OSError: \[Errno 5\] Input/output '
     r'error\), and that does not look like damaged files'),
], ids=['too few readable', 'transient'])
def test_an_average_that_cannot_be_made_writes_nothing(four, monkeypatch, cause, message):
  cause(four, monkeypatch)
  with pytest.raises(CheckpointError, match=message):
    averaging.average_checkpoints(four, 2)
  assert not os.path.exists(os.path.join(four, 'averaged'))


def test_average_uses_the_newest_readable_config(four, caplog):
  damage_file(os.path.join(four, 'checkpoints', '4', 'config', 'metadata'), b'\xff\xfe')
  assert checkpoint_choice.latest_training_config(four)['d_model'] == 8
  assert [w.split(' (')[0] for w in warnings(caplog)] == [
      f'checkpoint {four}/checkpoints/4 is damaged']
