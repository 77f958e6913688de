"""Checkpoints: the training Checkpointer round trip, averaging the last N (§6.1), and loading
inference parameters from an averaged or a training checkpoint."""

import errno
import os
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from t2t_jax.inference import averaging, checkpoint_choice
from t2t_jax.model import transformer as model
from t2t_jax.runtime import checkpoint, damage, parallel
from t2t_jax import config as config_lib
from t2t_jax.runtime.checkpoint import CheckpointError

from checkpoint_helpers import (four, leaves, save, snapshot, tiny_config,  # noqa: F401
                                tree)  # four: a fixture


def test_checkpointer_round_trip_and_compatibility(tmp_path):
  config = tiny_config()
  params = tree(1.5)
  state = parallel.TrainState(jnp.asarray(7, jnp.int32), params, optax.adam(1e-3).init(params))
  save(str(tmp_path), {7: params}, config)
  checkpointer = checkpoint.Checkpointer(str(tmp_path))
  assert checkpointer.all_steps() == [7]
  restored, data_state = checkpointer.restore(checkpoint.abstract_like(state))
  assert data_state == {'position': 7}
  assert int(restored.step) == 7
  for a, b in zip(leaves(restored), leaves(state)):
    np.testing.assert_array_equal(a, b)
  assert checkpointer.saved_config()['bucket_lengths'] == list(config.bucket_lengths)
  checkpointer.check_compatible(config)  # same config: accepted
  changed = tiny_config()
  changed.d_model = 16
  with pytest.raises(CheckpointError, match=r"d_model: checkpoint has 8, config has 16"):
    checkpointer.check_compatible(changed)
  checkpointer.close()


# orbax's failed read of the damaged files can leave a callback for a closed asyncio loop.
@pytest.mark.filterwarnings('ignore::pytest.PytestUnraisableExceptionWarning')
def test_restore_latest_good_sets_a_damaged_checkpoint_aside(tmp_path):
  workdir = str(tmp_path)
  save(workdir, {1: tree(1.0), 2: tree(2.0)})
  for root, _, files in os.walk(os.path.join(workdir, 'checkpoints', '2', 'state')):
    for name in files:
      if os.path.basename(root) == 'd':  # the array data files
        with open(os.path.join(root, name), 'wb') as f:
          f.write(b'damaged')
  params = tree(0.0)
  abstract = checkpoint.abstract_like(parallel.TrainState(
      jnp.asarray(0, jnp.int32), params, optax.adam(1e-3).init(params)))
  checkpointer = checkpoint.Checkpointer(workdir)
  state, data_state, step = checkpointer.restore_latest_good(abstract)
  assert (step, data_state) == (1, {'position': 1})
  np.testing.assert_array_equal(leaves(state.params)[0], 1.0)
  assert checkpointer.all_steps() == [1]  # step 2 moved aside, kept, and can be saved anew
  assert [n.split('-')[0] for n in os.listdir(os.path.join(workdir, 'checkpoints_unreadable'))
          ] == ['2']
  checkpointer.save(2, state, data_state, tiny_config())
  checkpointer.close()
  assert averaging.training_steps(workdir) == [1, 2]


def test_average_is_exact_mean_of_the_last_n(four):
  averaged = averaging.average_checkpoints(four, 3)
  assert averaged.steps == (2, 3, 4)  # step 1 (value 100) is not used
  assert averaged.path == os.path.join(four, 'averaged', 'step_4_last_3')
  for leaf in leaves(averaged.params):
    assert leaf.dtype == np.float32
    np.testing.assert_array_equal(leaf, np.full_like(leaf, 3.0))
  # The written checkpoint holds the same mean and the newest checkpoint's config.
  loaded = checkpoint_choice.load_inference_params(four)
  assert loaded.description == 'averaged steps 2,3,4' and loaded.step == 4
  for leaf in jax.tree_util.tree_leaves(loaded.params):
    assert isinstance(leaf, jax.Array) and leaf.dtype == jnp.float32
    assert leaf.devices() == {jax.devices()[0]}
    np.testing.assert_array_equal(np.asarray(leaf), 3.0)
  assert loaded.config_json == checkpoint_choice.latest_training_config(four)
  config = config_lib.from_json(loaded.config_json)
  assert config.d_model == 8 and config.bucket_lengths == tiny_config().bucket_lengths


def test_training_checkpoints_untouched_and_no_rewrite(four):
  before = snapshot(os.path.join(four, 'checkpoints'))
  first = averaging.average_checkpoints(four, 2)
  written = snapshot(first.path)
  second = averaging.average_checkpoints(four, 2)
  assert snapshot(os.path.join(four, 'checkpoints')) == before
  assert snapshot(first.path) == written  # returned as is, not rewritten
  assert second.path == first.path and second.steps == first.steps == (3, 4)
  for a, b in zip(leaves(first.params), leaves(second.params)):
    np.testing.assert_array_equal(a, b)
  assert sorted(os.listdir(os.path.join(four, 'averaged'))) == ['step_4_last_2']


def test_existing_average_of_other_steps_is_refused(four):
  averaging.average_checkpoints(four, 2)  # steps 3, 4
  shutil.rmtree(os.path.join(four, 'checkpoints', '3'))  # now the last 2 are steps 2, 4
  with pytest.raises(CheckpointError, match=r'step_4_last_2 exists but averages steps \(3, 4\)'):
    averaging.average_checkpoints(four, 2)


@pytest.mark.parametrize('bad, message', [
    (tree(3.0, kernel_shape=(3, 5)),
     r"'encoder/kernel' has shape \(3, 4\) in step 1 but \(3, 5\) in step 3"),
    (tree(3.0, extra=True), r"'decoder/kernel' is in step 3 but missing from step 1"),
    (tree(3.0, drop='embedding'), r"'embedding' is in step 1 but missing from step 3"),
    (tree(3.0, dtype=jnp.bfloat16),
     r"'encoder/kernel' has dtype float32 in step 1 but bfloat16 in step 3"),
])
def test_mismatched_trees_are_refused(tmp_path, bad, message):
  workdir = str(tmp_path)
  save(workdir, {1: tree(1.0), 2: tree(2.0), 3: bad})
  with pytest.raises(CheckpointError, match=message):
    averaging.average_checkpoints(workdir, 3)
  assert not os.path.exists(os.path.join(workdir, 'averaged', 'step_3_last_3'))
  averaging.average_checkpoints(workdir, 1)  # the newest alone is fine


def test_refuses_bad_counts(tmp_path):
  workdir = str(tmp_path)
  with pytest.raises(CheckpointError, match='no training checkpoint to average in .*checkpoints'):
    averaging.average_checkpoints(workdir, 1)
  save(workdir, {1: tree(1.0), 2: tree(2.0)})
  with pytest.raises(CheckpointError, match=r'last 5 checkpoints: only 2 exist in .*checkpoints'):
    averaging.average_checkpoints(workdir, 5)
  with pytest.raises(CheckpointError, match='at least 1'):
    averaging.average_checkpoints(workdir, 0)


def test_load_inference_params_choice(tmp_path):
  workdir = str(tmp_path)
  with pytest.raises(CheckpointError, match='no checkpoint in workdir .*checkpoints and .*aver'):
    checkpoint_choice.load_inference_params(workdir)
  with pytest.raises(CheckpointError, match='no training checkpoint in .*checkpoints'):
    checkpoint_choice.latest_training_config(workdir)
  save(workdir, {1: tree(1.0), 2: tree(2.0), 3: tree(6.0)})
  latest = checkpoint_choice.load_inference_params(workdir)
  assert (latest.description, latest.step) == ('training checkpoint step 3', 3)
  np.testing.assert_array_equal(leaves(latest.params)[0], 6.0)
  by_step = checkpoint_choice.load_inference_params(workdir, '2')
  assert (by_step.description, by_step.step) == ('training checkpoint step 2', 2)
  np.testing.assert_array_equal(leaves(by_step.params)[0], 2.0)
  by_path = checkpoint_choice.load_inference_params(workdir, os.path.join(workdir, 'checkpoints', '1'))
  assert by_path.step == 1 and by_path.config_json['d_model'] == 8
  with pytest.raises(CheckpointError, match='no training checkpoint at step 9; .*: 1, 2, 3'):
    checkpoint_choice.load_inference_params(workdir, '9')
  with pytest.raises(CheckpointError, match="'nowhere' does not exist.*: 1, 2, 3"):
    checkpoint_choice.load_inference_params(workdir, 'nowhere')

  averaging.average_checkpoints(workdir, 2)
  averaging.average_checkpoints(workdir, 3)
  newest = checkpoint_choice.load_inference_params(workdir)  # same last step: the larger N wins
  assert newest.description == 'averaged steps 1,2,3'
  np.testing.assert_array_equal(leaves(newest.params)[0], 3.0)
  relative = checkpoint_choice.load_inference_params(workdir, 'averaged/step_3_last_2')
  assert (relative.description, relative.step) == ('averaged steps 2,3', 3)
  np.testing.assert_array_equal(leaves(relative.params)[0], 4.0)
  save(workdir, {4: tree(8.0)})
  averaging.average_checkpoints(workdir, 2)
  assert checkpoint_choice.load_inference_params(workdir).description == 'averaged steps 3,4'
  assert checkpoint_choice.load_inference_params(workdir, '4').step == 4  # a step still means training


def test_average_real_model_and_rebuild_it(tmp_path):
  """Real Transformer params: the averaged checkpoint alone rebuilds a working model."""
  workdir = str(tmp_path)
  config = tiny_config()
  cfg = model.TransformerConfig.from_config(config)
  init = jax.jit(lambda rng: model.init_params(cfg, rng))  # jitted: far faster than eager
  mesh = parallel.make_mesh()  # saved replicated over 8 devices, as train.py does
  p0, p1 = (parallel.replicate(init(jax.random.PRNGKey(i)), mesh) for i in (0, 1))
  save(workdir, {10: p0, 20: p1}, config)
  averaged = averaging.average_checkpoints(workdir, 2)
  assert (jax.tree_util.tree_structure(averaged.params)
          == jax.tree_util.tree_structure(jax.device_get(p0)))
  expected = jax.tree_util.tree_map(lambda a, b: (np.asarray(a) + np.asarray(b)) / 2, p0, p1)
  for a, b in zip(leaves(averaged.params), leaves(expected)):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  loaded = checkpoint_choice.load_inference_params(workdir)
  rebuilt = model.TransformerConfig.from_config(config_lib.from_json(loaded.config_json))
  tokens = jnp.array([[3, 4, 5, 1]], jnp.int32)
  logits = jax.jit(lambda p: model.Transformer(rebuilt.replace(deterministic=True)).apply(
      {'params': p}, tokens, tokens))(loaded.params)
  assert logits.shape == (1, 4, 32) and bool(jnp.all(jnp.isfinite(logits)))


def abstract_state():
  params = tree(0.0)
  return checkpoint.abstract_like(parallel.TrainState(
      jnp.asarray(0, jnp.int32), params, optax.adam(1e-3).init(params)))


def unreadable(workdir):
  aside = os.path.join(workdir, 'checkpoints_unreadable')
  return sorted(n.split('-')[0] for n in os.listdir(aside)) if os.path.isdir(aside) else []


def test_garbled_latest_config_is_set_aside_and_training_resumes(tmp_path, caplog):
  workdir = str(tmp_path)
  save(workdir, {1: tree(1.0), 2: tree(2.0), 3: tree(3.0)})
  with open(os.path.join(workdir, 'checkpoints', '3', 'config', 'metadata'), 'w') as f:
    f.write('{"d_model": 8,')
  checkpointer = checkpoint.Checkpointer(workdir)
  checkpointer.check_compatible(tiny_config())  # compares with step 2's config instead
  changed = tiny_config()
  changed.d_model = 16
  with pytest.raises(CheckpointError, match=r'\(latest step 2\) of an incompatible config'):
    checkpointer.check_compatible(changed)
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING'
              and 'is damaged' in r.getMessage()]
  assert warnings == [
      f'checkpoint {workdir}/checkpoints/3 is damaged (JSONDecodeError: Expecting property '
      'name enclosed in double quotes: line 1 column 15 (char 14)); skipping it']
  state, data_state, step = checkpointer.restore_latest_good(abstract_state())
  assert (step, data_state) == (2, {'position': 2})
  np.testing.assert_array_equal(leaves(state.params)[0], 2.0)
  assert checkpointer.all_steps() == [1, 2] and unreadable(workdir) == ['3']
  checkpointer.close()


@pytest.mark.parametrize('error', [
    OSError(errno.EIO, 'Input/output error'),
    ValueError('RESOURCE_EXHAUSTED: Error reading "/w/checkpoints/2/state/d/1": Failed to read '
               '434 bytes from file at offset 0: No space left on device'),
    MemoryError('out of host memory'),
], ids=['EIO', 'tensorstore ENOSPC', 'MemoryError'])
def test_transient_restore_error_fails_loudly_and_moves_nothing(tmp_path, monkeypatch, error):
  workdir = str(tmp_path)
  save(workdir, {1: tree(1.0), 2: tree(2.0)})
  real_restore = ocp.StandardCheckpointHandler.restore
  failures = []

  def restore_failing_once(self, directory, *args, **kwargs):
    if not failures:
      failures.append(str(directory))
      raise error
    return real_restore(self, directory, *args, **kwargs)

  monkeypatch.setattr(ocp.StandardCheckpointHandler, 'restore', restore_failing_once)
  before = snapshot(os.path.join(workdir, 'checkpoints'))
  checkpointer = checkpoint.Checkpointer(workdir)
  with pytest.raises(CheckpointError) as raised:
    checkpointer.restore_latest_good(abstract_state())
  assert str(raised.value) == (
      f'checkpoint {workdir}/checkpoints/2 could not be read ({damage.short_error(error)}), '
      'and that does not look like damaged files (an I/O error, a full disk, too little '
      'memory?), so nothing was skipped or moved. Fix the cause and rerun; if its files really '
      'are damaged, move it away.')
  assert failures == [f'{workdir}/checkpoints/2/state']
  assert snapshot(os.path.join(workdir, 'checkpoints')) == before and unreadable(workdir) == []
  _, data_state, step = checkpointer.restore_latest_good(abstract_state())  # cause gone
  assert (step, data_state) == (2, {'position': 2})
  checkpointer.close()


@pytest.mark.parametrize('local, others, expected', [
    (damage.OK, [damage.DAMAGED], (1, ['2'])),  # another process cannot read step 2: skip it
    (damage.OK, [damage.OK], (2, [])),
    (damage.OK, [damage.FAILED], 'could not be read (on process(es) 1)'),
])
def test_every_process_restores_the_same_step(tmp_path, monkeypatch, local, others, expected):
  """The other process's outcome for step 2 is simulated; the gather is damage.agree's job."""
  workdir = str(tmp_path)
  save(workdir, {1: tree(1.0), 2: tree(2.0)})
  calls = []

  def agree(code):
    calls.append(code)
    codes = [code] + (others if len(calls) == 1 else [damage.OK])
    return damage.combine(codes), codes

  monkeypatch.setattr(damage, 'agree', agree)
  checkpointer = checkpoint.Checkpointer(workdir)
  if isinstance(expected, str):
    with pytest.raises(CheckpointError, match=re.escape(expected)):
      checkpointer.restore_latest_good(abstract_state())
    assert unreadable(workdir) == [] and checkpointer.all_steps() == [1, 2]
  else:
    _, _, step = checkpointer.restore_latest_good(abstract_state())
    assert (step, unreadable(workdir)) == expected
  assert calls[0] == local
  checkpointer.close()


def test_no_readable_checkpoint_moves_nothing(tmp_path):
  workdir = str(tmp_path)
  save(workdir, {1: tree(1.0), 2: tree(2.0)})
  for step in (1, 2):
    with open(os.path.join(workdir, 'checkpoints', str(step), 'data', 'metadata'), 'w') as f:
      f.write('{"position')
  checkpointer = checkpoint.Checkpointer(workdir)
  with pytest.raises(CheckpointError, match=(
      r'no checkpoint in .*/checkpoints restores \(nothing was moved; .*\): step 1: '
      r'JSONDecodeError: Unterminated string .*; step 2: JSONDecodeError: Unterminated string')):
    checkpointer.restore_latest_good(abstract_state())
  assert unreadable(workdir) == [] and checkpointer.all_steps() == [1, 2]
  checkpointer.close()


def test_a_config_saved_before_a_key_existed_reads_it_as_its_default():
  """Checkpoints older than `model` and `num_kv_heads` resume: a missing key is its default;
  a saved value that differs is still reported."""
  from configs import quickstart  # pylint: disable=import-outside-toplevel
  config = quickstart.get_config()
  saved = checkpoint.config_to_json(config)
  del saved['model'], saved['num_kv_heads']
  assert checkpoint.incompatible_keys(saved, config) == []
  config.num_kv_heads = 2
  assert checkpoint.incompatible_keys(saved, config) == [('num_kv_heads', 4, 2)]  # the canonical form: 0 follows num_heads=4
