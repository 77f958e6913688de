"""A checkpoint save that fails for want of space or on a read-only file system: named in one
line (`checkpoint.write_failure`), the previous step kept, the failed save's folder removed."""

import errno
import logging
import os
import threading
import time

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t2t_jax.runtime import checkpoint, parallel
from t2t_jax.runtime.checkpoint import CheckpointError

from checkpoint_helpers import leaves, save, tiny_config, tree

_TENSORSTORE_FULL = (  # what a save onto a full tmpfs raised (orbax 0.12.8, tensorstore 0.1.86)
    'RESOURCE_EXHAUSTED: Error writing "opt_state.0.nu.encoder.layer_0.ffn.wi.kernel/0.0" in '
    'OCDBT database at local file "/w/checkpoints/20.orbax-checkpoint-tmp/state.orbax-checkpoint'
    '-tmp/ocdbt.process_0/": Failed writing: "/w/checkpoints/20.orbax-checkpoint-tmp/state.orbax'
    '-checkpoint-tmp/ocdbt.process_0/d/b3878fc5966f366b0831763e657e36b4": Failed to write 11782 '
    "bytes to file 27: No space left on device [os_error_code='28']")


def _wrapped(error):
  wrapper = Exception('Encountered error while writing')
  wrapper.__cause__ = error
  return wrapper


@pytest.mark.parametrize('error, expected', [
    (OSError(errno.ENOSPC, 'No space left on device'), ('No space left on device', 'free space')),
    (OSError(errno.EDQUOT, 'Disk quota exceeded'),
     ('Disk quota exceeded', 'free space or raise the quota')),
    (OSError(errno.EROFS, 'Read-only file system'), ('Read-only file system', 'make it writable')),
    (ValueError(_TENSORSTORE_FULL), ('No space left on device', 'free space')),
    (_wrapped(OSError(errno.ENOSPC, 'No space left on device')),
     ('No space left on device', 'free space')),
    (OSError(errno.EIO, 'Input/output error'), None),
    (ValueError('DATA_LOSS: Error reading: CRC-32C checksum verification failed'), None),
    (MemoryError('out of host memory'), None),
], ids=['ENOSPC', 'EDQUOT', 'EROFS', 'tensorstore ENOSPC', 'wrapped', 'EIO', 'DATA_LOSS',
        'MemoryError'])
def test_write_failure_names_a_full_or_read_only_file_system(error, expected):
  assert checkpoint.write_failure(error) == expected


def test_a_save_onto_a_full_disk_fails_in_one_line_keeping_the_previous_step(
    tmp_path, monkeypatch, caplog):
  from orbax.checkpoint._src.serialization import serialization
  workdir = str(tmp_path)
  save(workdir, {1: tree(1.0)})

  async def full_disk(*args, **kwargs):  # as tensorstore fails, in orbax's save threads
    raise ValueError(_TENSORSTORE_FULL)

  monkeypatch.setattr(serialization, 'async_serialize_from_host', full_disk)
  checkpointer = checkpoint.Checkpointer(workdir, keep=50)
  params = tree(2.0)
  state = parallel.TrainState(jnp.asarray(2, jnp.int32), params, optax.adam(1e-3).init(params))
  checkpointer.save(2, state, {'position': 2}, tiny_config())  # fails in the background ...
  with pytest.raises(CheckpointError) as raised:
    checkpointer.save(3, state, {'position': 3}, tiny_config())  # ... found by the next save
  assert str(raised.value) == (
      f'cannot write checkpoint step 2 in {workdir}/checkpoints: No space left on device; the '
      'previous checkpoint (step 1) is intact; free space and rerun to resume')
  checkpointer.close()  # the same failure is not raised twice
  # orbax's threads logged it with tracebacks (3 ERROR records); the one line says it all.
  assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []

  monkeypatch.undo()  # space freed: the rerun resumes from step 1 and saves step 2
  checkpointer = checkpoint.Checkpointer(workdir, keep=50)
  restored, data_state, step = checkpointer.restore_latest_good(checkpoint.abstract_like(state))
  assert (step, data_state) == (1, {'position': 1})
  np.testing.assert_array_equal(leaves(restored.params)[0], 1.0)
  checkpointer.save(2, state, {'position': 2}, tiny_config())
  checkpointer.close()
  assert checkpoint.Checkpointer(workdir).all_steps() == [1, 2]



def test_a_failed_saves_folder_that_comes_back_after_its_removal_is_removed_again(
    tmp_path, monkeypatch):
  """A write of the failed save that orbax abandoned (tensorstore's commit of the sharding
  metadata) makes the folder anew after the first removal: CI once kept it."""
  monkeypatch.setattr(checkpoint, '_PARTIAL_QUIET_S', 0.4)
  checkpointer = checkpoint.Checkpointer(str(tmp_path))
  partial = os.path.join(checkpointer.directory, '20.orbax-checkpoint-tmp')
  late = os.path.join(partial, 'state.orbax-checkpoint-tmp', '_sharding.__lock')
  os.makedirs(os.path.dirname(late))

  def abandoned_write():  # once the folder is gone, 0.2 s later, as tensorstore did
    while os.path.exists(partial):
      time.sleep(0.005)
    time.sleep(0.2)
    os.makedirs(os.path.dirname(late))
    open(late, 'w').close()

  writer = threading.Thread(target=abandoned_write)
  writer.start()
  checkpointer._remove_partial(20)  # pylint: disable=protected-access
  writer.join()
  assert sorted(os.listdir(checkpointer.directory)) == []
  checkpointer.close()
