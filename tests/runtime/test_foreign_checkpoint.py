"""Another program's orbax checkpoints in a workdir (issue 51, i6): named as not ours, never as
damaged, and never moved aside by a training run."""

import os

import numpy as np
import orbax.checkpoint as ocp
import pytest
from checkpoint_helpers import tiny_config

from t2t_jax.inference import checkpoint_choice
from t2t_jax.runtime import checkpoint, damage


@pytest.fixture
def foreign_workdir(tmp_path):
  manager = ocp.CheckpointManager(str(tmp_path / 'checkpoints'),
                                  options=ocp.CheckpointManagerOptions(create=True))
  manager.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave({'w': np.ones(3)})))
  manager.wait_until_finished()
  manager.close()
  return str(tmp_path)


def test_a_foreign_checkpoint_is_named_as_such_and_left_in_place(foreign_workdir):
  step = os.path.join(foreign_workdir, 'checkpoints', '1')
  assert damage.foreign(step).startswith('is not a t2t_jax checkpoint (it holds ')
  with pytest.raises(checkpoint_choice.CheckpointError,
                     match=r'ForeignCheckpointError: is not a t2t_jax checkpoint') as e:
    checkpoint_choice.load_inference_params(foreign_workdir)
  assert 'damaged' not in str(e.value)
  checkpointer = checkpoint.Checkpointer(foreign_workdir)
  with pytest.raises(checkpoint.CheckpointError, match=r'holds checkpoints t2t_jax did not '
                     r'write \(step 1 is not a t2t_jax checkpoint.*use another --workdir; '
                     r'nothing was changed'):
    checkpointer.check_compatible(tiny_config())
  checkpointer.close()
  assert os.listdir(os.path.join(foreign_workdir, 'checkpoints')) == ['1']
  assert not os.path.exists(os.path.join(foreign_workdir, 'checkpoints_unreadable'))
