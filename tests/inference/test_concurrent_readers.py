"""Average, eval and decode beside a live training run on the same workdir (issue 37, fault 8).

Readers take no lock (docs/architecture.md, "Files a run writes"): training's keep_checkpoints
may delete the checkpoint a reader has chosen. Each test pauses the reader between choosing a
checkpoint and reading it, lets "training" save and garbage-collect as it does (a
`Checkpointer` with a small `keep`), and checks the outcome: the right result from the
checkpoints that exist now, or one line naming the checkpoint; never a traceback or an
average of other steps than it says.
"""

import logging
import os
import shutil
import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t2t_jax.inference import averaging, checkpoint_choice
from t2t_jax.runtime import checkpoint, parallel
from checkpoint_helpers import four, leaves, tiny_config, tree  # noqa: F401  (four: a fixture)

pytestmark = pytest.mark.filterwarnings('ignore::pytest.PytestUnraisableExceptionWarning')


def _training_saves(workdir, items, keep):
  """What a live run with keep_checkpoints=`keep` does: save each step, delete the oldest."""
  saver = checkpoint.Checkpointer(workdir, keep=keep)
  for step, params in items.items():
    state = parallel.TrainState(jnp.asarray(step, jnp.int32), params,
                                jax.jit(optax.adam(1e-3).init)(params))
    saver.save(step, state, {'position': step}, tiny_config())
  saver.close()


def _pause_before_reading(module, monkeypatch, when, then):
  """Runs `then()` once, just before `module.restore_params` first reads a path for which
  `when(path)` holds: the reader has chosen that checkpoint and not read it yet."""
  real, done = module.restore_params, []

  def paused(path, metadata, *at):
    if not done and when(path):
      done.append(path)
      then()
    return real(path, metadata, *at)
  monkeypatch.setattr(module, 'restore_params', paused)
  return done


def _steps(workdir):
  return sorted(int(n) for n in os.listdir(os.path.join(workdir, 'checkpoints')) if n.isdigit())


def test_average_survives_training_deleting_a_step_it_is_reading(four, monkeypatch, caplog):
  # Steps 2, 3, 4 (values 1, 2, 6) are chosen; then training saves 5 (value 10) and, keeping
  # 3, deletes 1 and 2 before step 2's arrays are read.
  done = _pause_before_reading(
      averaging, monkeypatch, lambda p: p.endswith(os.sep + '2'),
      lambda: _training_saves(four, {5: tree(10.0)}, keep=3))
  result = averaging.average_checkpoints(four, 3)
  assert done and _steps(four) == [3, 4, 5]
  assert result.steps == (3, 4, 5)  # the last 3 that exist now, named as such
  assert result.path.endswith(os.path.join('averaged', 'step_5_last_3'))
  for leaf in leaves(result.params):
    np.testing.assert_allclose(leaf, 6.0)  # (2 + 6 + 10) / 3, not a mix with a lost step
  assert any('was deleted while it was read' in r.getMessage() for r in caplog.records
             if r.levelno == logging.WARNING)
  assert not any('is damaged' in r.getMessage() for r in caplog.records)


def test_eval_takes_the_newest_checkpoint_when_the_chosen_one_is_deleted(four, monkeypatch):
  # eval chose step 4; training saves 5 and 6 keeping 2, so 1..4 are gone before it reads.
  done = _pause_before_reading(
      checkpoint_choice, monkeypatch, lambda p: True,
      lambda: _training_saves(four, {5: tree(7.0), 6: tree(8.0)}, keep=2))
  loaded = checkpoint_choice.load_inference_params(four)
  assert done == [os.path.join(four, 'checkpoints', '4')]
  assert (loaded.step, loaded.description) == (6, 'training checkpoint step 6')
  np.testing.assert_array_equal(leaves(loaded.params)[0], 8.0)


def test_a_checkpoint_asked_for_and_deleted_while_read_is_named_in_one_line(four, monkeypatch):
  _pause_before_reading(checkpoint_choice, monkeypatch, lambda p: True,
                        lambda: _training_saves(four, {5: tree(7.0)}, keep=2))
  with pytest.raises(checkpoint.CheckpointError) as raised:
    checkpoint_choice.load_inference_params(four, '3')
  message = str(raised.value)
  assert '\n' not in message and message.startswith(
      f'checkpoint {four}/checkpoints/3 was deleted while it was read (a live training run on '
      'this workdir keeps only its last keep_checkpoints); choose another with '
      '--checkpoint=STEP (training steps: 4, 5)')


def test_a_step_read_while_its_deletion_is_under_way_is_deleted_not_damaged(four, monkeypatch,
                                                                               caplog):
  # As keep_checkpoints deletes it, a step's files go before its folder: average reads step
  # 2 after its state is removed and while the folder still stands (gone 0.3 s later). It
  # must be told apart from damage (found in the damage tour: "only 1 of the 2 ... are
  # readable (damaged: step 44: FileNotFoundError: ... _METADATA does not exist").
  step2 = os.path.join(four, 'checkpoints', '2')

  def half_deleted():
    _training_saves(four, {5: tree(10.0)}, keep=4)  # saves 5, deletes 1
    shutil.rmtree(os.path.join(step2, 'state'))
    threading.Timer(0.3, shutil.rmtree, [step2]).start()
  done = _pause_before_reading(averaging, monkeypatch, lambda p: p == step2, half_deleted)
  result = averaging.average_checkpoints(four, 3)
  assert done and _steps(four) == [3, 4, 5]
  assert result.steps == (3, 4, 5)
  for leaf in leaves(result.params):
    np.testing.assert_allclose(leaf, 6.0)
  assert any('was deleted while it was read' in r.getMessage() for r in caplog.records
             if r.levelno == logging.WARNING)
  assert not any('is damaged' in r.getMessage() for r in caplog.records)


def test_eval_skips_a_step_whose_deletion_is_under_way(four, monkeypatch, caplog):
  step4 = os.path.join(four, 'checkpoints', '4')

  def half_deleted():
    _training_saves(four, {5: tree(7.0)}, keep=5)
    shutil.rmtree(os.path.join(step4, 'state'))
    threading.Timer(0.3, shutil.rmtree, [step4]).start()
  # eval lists 1..4 and reads 4 while training (saving 5) deletes it.
  done = _pause_before_reading(checkpoint_choice, monkeypatch, lambda p: p == step4,
                               half_deleted)
  loaded = checkpoint_choice.load_inference_params(four)
  assert done and loaded.step == 3  # the next one listed: 4 is not moved aside as damaged
  assert any(r.getMessage().endswith(f'{step4} was deleted while it was read (a training run '
                                     'on this workdir keeps only its last keep_checkpoints); '
                                     'skipping it') for r in caplog.records)
  assert not any('is damaged' in r.getMessage() for r in caplog.records)


def test_a_checkpoint_missing_a_file_that_stays_is_still_damaged(four, monkeypatch):
  monkeypatch.setattr(averaging, 'DELETION_WAIT_S', 0.2)
  shutil.rmtree(os.path.join(four, 'checkpoints', '4', 'state'))
  loaded = checkpoint_choice.load_inference_params(four)
  assert loaded.step == 3  # 4 skipped as damaged (it did not vanish), not as deleted
