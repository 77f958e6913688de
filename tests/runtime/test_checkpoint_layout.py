"""How a checkpoint's replicated arrays are written on CPU devices
(`checkpoint.save_whole_arrays_on_cpu`): whole, by one replica; checkpoints written in slices
before still restore."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from checkpoint_helpers import leaves, save, tree
from t2t_jax.runtime import checkpoint, parallel


@pytest.mark.parametrize('written_sliced', [False, True], ids=['whole', 'sliced-before'])
def test_replicated_arrays_are_saved_whole_on_cpu_and_either_layout_restores(
    tmp_path, monkeypatch, written_sliced):
  """On the CPU backend each replicated array is written whole by one replica (no eager slice
  per array shape, `save_whole_arrays_on_cpu`); a checkpoint that orbax's replica-parallel
  save wrote in eight slices (before) restores to the same values."""
  handler = ocp.type_handlers.get_type_handler(jax.Array)
  assert checkpoint.save_whole_arrays_on_cpu() and not handler._use_replica_parallel
  if written_sliced:
    monkeypatch.setattr(checkpoint, 'save_whole_arrays_on_cpu', lambda: False)
    monkeypatch.setattr(handler, '_use_replica_parallel', True)
  mesh = parallel.make_mesh()
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  params = jax.device_put(tree(0.0, kernel_shape=(16, 4)), replicated)
  params = jax.tree_util.tree_map(lambda x: x + jnp.arange(x.size).reshape(x.shape), params)
  save(str(tmp_path), {3: params})
  metadata = json.loads((tmp_path / 'checkpoints' / '3' / 'state' / '_METADATA').read_text())
  shapes = {k: v['value_metadata']['write_shape'] for k, v in metadata['tree_metadata'].items()
            if 'params' in k and 'kernel' in k}
  assert list(shapes.values()) == [[2, 4] if written_sliced else [16, 4]], shapes
  monkeypatch.undo()
  checkpointer = checkpoint.Checkpointer(str(tmp_path))
  state = parallel.TrainState(jnp.asarray(3, jnp.int32), params, optax.adam(1e-3).init(params))
  restored, _ = checkpointer.restore(checkpoint.abstract_like(state))
  checkpointer.close()
  for a, b in zip(leaves(restored.params), leaves(params)):
    np.testing.assert_array_equal(a, b)
