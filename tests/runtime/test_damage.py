"""Damaged or transient: how a failed checkpoint read is classified, and how processes agree.

The damaged cases garble a real saved checkpoint and read it the way training, eval and
averaging do; the transient cases use the exceptions (and tensorstore's exact texts) recorded
when injecting errno values into the reads of such a checkpoint (an LD_PRELOAD shim; see the
docstring of `damage.is_damage`).
"""

import errno
import glob
import json
import logging
import os
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t2t_jax.inference import checkpoint_choice
from t2t_jax.runtime import checkpoint, damage, parallel
from checkpoint_helpers import save, tree

# orbax's failed read of damaged files can leave a callback for a closed asyncio loop.
pytestmark = pytest.mark.filterwarnings('ignore::pytest.PytestUnraisableExceptionWarning')


@pytest.fixture(scope='module')
def pristine(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('pristine'))
  save(workdir, {1: tree(1.0), 2: tree(2.0)})
  return workdir


def _abstract():
  params = tree(0.0)
  return checkpoint.abstract_like(parallel.TrainState(
      jnp.asarray(0, jnp.int32), params, optax.adam(1e-3).init(params)))


def _files(step_dir, pattern):
  return [p for p in glob.glob(os.path.join(step_dir, pattern), recursive=True)
          if os.path.isfile(p)]


def _overwrite(paths, data):
  for path in paths:
    with open(path, 'wb') as f:
      f.write(data)


def _flip_middle(paths):
  for path in paths:
    with open(path, 'r+b') as f:
      data = bytearray(f.read())
      middle = len(data) // 2
      data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
      f.seek(0)
      f.write(data)


GARBLE = {
    'arrays truncated': lambda d: [open(p, 'r+b').truncate(0) for p in _files(d, 'state/**/d/*')],
    'arrays junk': lambda d: _overwrite(_files(d, 'state/**/d/*'), b'damaged'),
    'arrays bytes flipped': lambda d: _flip_middle(_files(d, 'state/**/d/*')),
    'arrays deleted': lambda d: [os.remove(p) for p in _files(d, 'state/**/d/*')],
    'manifest junk': lambda d: _overwrite(_files(d, 'state/**/manifest.ocdbt'), b'damaged'),
    '_METADATA junk': lambda d: _overwrite(_files(d, 'state/_METADATA'), b'{"tree": '),
    '_sharding junk': lambda d: _overwrite(_files(d, 'state/_sharding'), b'{not json'),
    'state deleted': lambda d: shutil.rmtree(os.path.join(d, 'state')),
    'data junk': lambda d: _overwrite(_files(d, 'data/metadata'), b'{"position'),
    'config junk': lambda d: _overwrite(_files(d, 'config/metadata'), b'{"d_model": 8,'),
    'config binary': lambda d: _overwrite(_files(d, 'config/metadata'), b'\xff\xfe\x00junk'),
    'config not an object': lambda d: _overwrite(_files(d, 'config/metadata'), b'[1, 2]'),
    'config deleted': lambda d: shutil.rmtree(os.path.join(d, 'config')),
}


# Eval reads no `data`; training restores without reading `_sharding`.
NOT_READ = {'data junk': 'eval', '_sharding junk': 'train'}


@pytest.mark.parametrize('how', sorted(GARBLE))
def test_garbled_checkpoints_are_damage_where_read(pristine, tmp_path, how):
  workdir = str(tmp_path / 'run')
  shutil.copytree(pristine, workdir)
  step_dir = os.path.join(workdir, 'checkpoints', '2')
  GARBLE[how](step_dir)
  checkpointer = checkpoint.Checkpointer(workdir)
  if NOT_READ.get(how) != 'train':
    with pytest.raises(Exception) as raised:  # what training reads
      checkpointer.saved_config(2)
      checkpointer.restore(_abstract(), 2)
    assert damage.is_damage(raised.value), damage.short_error(raised.value)
  checkpointer.close()
  if NOT_READ.get(how) != 'eval':
    with pytest.raises(checkpoint.CheckpointError, match=f'{step_dir} is damaged'):
      checkpoint_choice.load_inference_params(workdir, '2')


def test_a_garbled_checkpoint_metadata_file_still_restores(pristine, tmp_path):
  workdir = str(tmp_path / 'run')
  shutil.copytree(pristine, workdir)
  _overwrite([os.path.join(workdir, 'checkpoints', '2', '_CHECKPOINT_METADATA')], b'{junk')
  checkpointer = checkpoint.Checkpointer(workdir)
  assert checkpointer.all_steps() == [1, 2]
  state, data_state = checkpointer.restore(_abstract(), 2)
  assert data_state == {'position': 2} and int(state.step) == 2
  checkpointer.close()


# Recorded from reads of a checkpoint with errno values injected (tensorstore 0.1.86).
_TS_READ = ('Error opening "cast" driver: Error opening "zarr" driver: Error reading '
            '"params.embedding/.zarray" in OCDBT database at local file "/w/checkpoints/2/state/":'
            ' Error reading Byte range [0, 434) of local file "/w/checkpoints/2/state/d/4343": '
            'Error reading from open file /w/checkpoints/2/state/d/4343: Failed to read from '
            'file: Failed to read 434 bytes from file at offset 0: ')


@pytest.mark.parametrize('error', [
    OSError(errno.EIO, 'Input/output error'),
    OSError(errno.ENOSPC, 'No space left on device'),
    OSError(errno.ENOMEM, 'Cannot allocate memory'),
    OSError(errno.EMFILE, 'Too many open files'),
    PermissionError(errno.EACCES, 'Permission denied'),
    TimeoutError(errno.ETIMEDOUT, 'Connection timed out'),
    MemoryError(),
    ValueError('UNKNOWN: ' + _TS_READ + 'Input/output error'),
    ValueError('RESOURCE_EXHAUSTED: ' + _TS_READ + 'No space left on device'),
    ValueError('RESOURCE_EXHAUSTED: ' + _TS_READ + 'Too many open files'),
    ValueError('PERMISSION_DENIED: ' + _TS_READ + 'Permission denied'),
    ValueError('FAILED_PRECONDITION: Error reading "/w/state/d/1" [OS error: Input/output error]'),
    jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: Out of memory allocating 4294967296 bytes.'),
    ValueError('pytree structure error: different types at key path'),  # e.g. changed code
    RuntimeError('something nobody expected'),
], ids=lambda e: damage.short_error(e)[:60])
def test_transient_and_unknown_errors_are_not_damage(error):
  assert not damage.is_damage(error)
  assert damage.outcome(error) == damage.FAILED


def test_wrapped_errors_are_judged_by_their_cause():
  def wrapped(cause):
    try:
      raise cause
    except Exception as e:
      try:
        raise checkpoint.CheckpointError('cannot read') from e
      except checkpoint.CheckpointError as outer:
        return outer
  assert damage.is_damage(wrapped(json.JSONDecodeError('Expecting value', '', 0)))
  assert not damage.is_damage(wrapped(OSError(errno.EIO, 'Input/output error')))
  assert not damage.is_damage(checkpoint.CheckpointError('no cause'))


def _orbax_wrapper(cause):
  """What orbax raises when it restores onto devices and one array read fails: a bare
  Exception from the failure, its message ending in a spec dump (orbax-checkpoint 0.12.8)."""
  try:
    try:
      raise cause
    except BaseException as e:  # as orbax does, GeneratorExit included
      raise Exception(  # pylint: disable=broad-exception-raised
          'Encountered error while reading array index: (slice(0, 400, 1), slice(0, 32, 1)). '
          'See full TensorStore details: <bound method spec of TensorStore({\n  \'context\': {'
          "\n    'data_copy_concurrency': {},\n  },\n  'driver': 'cast',\n})>.") from e
  except Exception as outer:  # pylint: disable=broad-except
    return outer


def test_orbax_wrappers_are_judged_and_named_by_their_cause():
  damaged = _orbax_wrapper(ValueError('OUT_OF_RANGE: Error reading "params.w/7.0": Requested '
                                      'byte range [169689, 175631) is not valid for value of '
                                      'size 1000'))
  assert damage.is_damage(damaged)
  assert damage.short_error(damaged) == (
      'ValueError: OUT_OF_RANGE: Error reading "params.w/7.0": Requested byte range [169689, '
      '175631) is not valid for value of size 1000')
  transient = _orbax_wrapper(ValueError('UNKNOWN: ' + _TS_READ + 'Input/output error'))
  assert not damage.is_damage(transient)
  with pytest.raises(checkpoint.CheckpointError) as raised:
    checkpoint.first_readable([2], lambda _: (_ for _ in ()).throw(transient), str)
  message = str(raised.value)
  assert message.startswith('2 could not be read (ValueError: UNKNOWN: ...')
  assert 'Input/output error), and that does not look like damaged files' in message
  assert 'TensorStore' not in message and 'data_copy_concurrency' not in message
  assert not damage.is_damage(_orbax_wrapper(GeneratorExit()))
  assert not damage.is_damage(Exception('a bare Exception of its own'))


def _random_params(seed):
  # Random values: constant arrays compress to a few bytes, and cutting a file of those
  # to 1000 bytes cuts nothing.
  rng = np.random.RandomState(seed)
  return {'w': jnp.asarray(rng.normal(size=(256, 256)), jnp.float32),
          'b': jnp.asarray(rng.normal(size=(256,)), jnp.float32)}


def test_training_sets_aside_a_checkpoint_with_an_array_file_cut_short(tmp_path, caplog):
  workdir = str(tmp_path / 'run')
  save(workdir, {1: _random_params(1), 2: _random_params(2)})
  largest = max(_files(os.path.join(workdir, 'checkpoints', '2'), 'state/**/d/*'),
                key=os.path.getsize)
  os.truncate(largest, 1000)  # what a full disk or a killed copy leaves
  params = _random_params(0)
  # Training restores onto the devices of its mesh (here replicated over 8): orbax's path
  # that wraps the read error (eval, decode and average restore to numpy).
  state = parallel.replicate(parallel.TrainState(
      jnp.asarray(0, jnp.int32), params, optax.adam(1e-3).init(params)), parallel.make_mesh())
  checkpointer = checkpoint.Checkpointer(workdir)
  with caplog.at_level(logging.WARNING):
    restored, data_state, step = checkpointer.restore_latest_good(
        checkpoint.abstract_like(state))
  checkpointer.close()
  assert (step, data_state) == (1, {'position': 1})
  np.testing.assert_array_equal(np.asarray(restored.params['w']), _random_params(1)['w'])
  assert [n.split('-')[0] for n in os.listdir(os.path.join(workdir, 'checkpoints_unreadable'))
          ] == ['2']
  [warning] = [r.getMessage() for r in caplog.records if 'is damaged' in r.getMessage()]
  assert warning.startswith(f'checkpoint {workdir}/checkpoints/2 is damaged (ValueError: '
                            'OUT_OF_RANGE: ') and '\n' not in warning, warning


def test_short_error_is_one_line_without_spec_dumps():
  error = ValueError('OUT_OF_RANGE: Error reading "a"\n: Requested byte range [0, 434) is not '
                     'valid for value of size 7 [tensorstore_spec=\'{"driver": "zarr"}\'] '
                     '[tensorstore_spec[1]=\'{}\']')
  assert damage.short_error(error) == (
      'ValueError: OUT_OF_RANGE: Error reading "a" : Requested byte range [0, 434) is not '
      'valid for value of size 7')
  long = damage.short_error(ValueError('DATA_LOSS: ' + 'x' * 500 + ' checksum failed'), 60)
  assert long == 'ValueError: DATA_LOSS: ...' + ('x' * 500 + ' checksum failed')[-49:]


@pytest.mark.parametrize('codes, decision', [
    ([damage.OK], damage.OK),
    ([damage.OK, damage.OK, damage.OK], damage.OK),
    ([damage.OK, damage.DAMAGED], damage.DAMAGED),   # one process cannot read it: nobody uses it
    ([damage.DAMAGED, damage.DAMAGED], damage.DAMAGED),
    ([damage.OK, damage.FAILED], damage.FAILED),     # a passing failure anywhere stops everyone
    ([damage.DAMAGED, damage.FAILED, damage.OK], damage.FAILED),
])
def test_processes_combine_outcomes(codes, decision):
  assert damage.combine(codes) == decision


def test_agree_in_one_process_is_the_local_outcome():
  assert damage.agree(damage.DAMAGED) == (damage.DAMAGED, [damage.DAMAGED])


def test_closed_loop_reports_of_a_failed_read_are_dropped_and_others_kept(monkeypatch):
  seen = []
  monkeypatch.setattr(sys, 'unraisablehook', lambda u: seen.append(repr(u.exc_value)))
  damage.quiet_closed_loop_reports()
  damage.quiet_closed_loop_reports()  # idempotent: one filter, not two

  class RaisesWhenCollected:
    def __init__(self, error):
      self.error = error

    def __del__(self):
      raise self.error

  RaisesWhenCollected(RuntimeError('Event loop is closed'))
  RaisesWhenCollected(ValueError('kept'))
  RaisesWhenCollected(RuntimeError('Event loop is running'))
  # A read coroutine closed unfinished (restoring onto devices), and one that failed.
  RaisesWhenCollected(_orbax_wrapper(GeneratorExit()))
  RaisesWhenCollected(_orbax_wrapper(ValueError('OUT_OF_RANGE: Error reading "a"')))
  RaisesWhenCollected(_orbax_wrapper(RuntimeError('kept too')))
  assert seen[:2] == ["ValueError('kept')", "RuntimeError('Event loop is running')"]
  assert len(seen) == 3 and seen[2].startswith('Exception("Encountered error'), seen


def test_unretrieved_tensorstore_read_errors_are_dropped_from_the_asyncio_log():
  damage.quiet_closed_loop_reports()
  logger = logging.getLogger('asyncio')

  def record(error, what='Future'):
    return logger.makeRecord('asyncio', logging.ERROR, 'base_events.py', 1, f'{what} exception '
                             'was never retrieved\nfuture: <Future finished>', (),
                             (type(error), error, None))

  assert not logger.filter(record(ValueError('OUT_OF_RANGE: Error reading byte range')))
  assert logger.filter(record(ValueError('an error of some other code')))
  assert logger.filter(record(RuntimeError('OUT_OF_RANGE: not tensorstore')))
  # Restoring onto devices: orbax's wrapper, in tasks and gathering futures.
  for what in ('Task', '_GatheringFuture'):
    assert not logger.filter(record(_orbax_wrapper(ValueError('DATA_LOSS: x')), what))
    assert not logger.filter(record(_orbax_wrapper(GeneratorExit()), what))
    assert logger.filter(record(_orbax_wrapper(RuntimeError('other')), what))


@pytest.mark.parametrize('error, missing', [
    (FileNotFoundError(errno.ENOENT, 'gone'), True),
    (FileNotFoundError('Metadata file (named _METADATA) does not exist'), True),
    (ValueError('NOT_FOUND: Error reading local file "x/state/_sharding"'), True),
    (KeyError('Item "state" was not found in the checkpoint.'), True),
    (ValueError('DATA_LOSS: CRC-32C checksum verification failed'), False),
    (json.JSONDecodeError('junk', '{', 0), False),
    (OSError(errno.EIO, 'Input/output error'), False),
])
def test_is_missing_file_is_what_a_deletion_under_way_raises(error, missing):
  # averaging.vanished waits for such a checkpoint to disappear before calling it damaged.
  assert damage.is_missing_file(error) is missing
  wrapped = Exception('Encountered error while reading array index')
  wrapped.__cause__ = error
  assert damage.is_missing_file(wrapped) is missing
