"""Checkpoint helpers shared by tests/runtime/test_checkpoint.py, test_damage.py and
tests/inference/test_averaging.py: small parameter trees, training checkpoints written as
train.py writes them, and a workdir of four of them (the `four` fixture)."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import default
from t2t_jax.runtime import checkpoint, parallel


def tiny_config():
  c = default.get_config()
  c.vocab_size, c.d_model, c.d_ff, c.num_heads, c.num_layers, c.max_len = 32, 8, 16, 2, 1, 16
  c.bucket_lengths, c.max_length = (8, 16), 16
  return c


def tree(value, kernel_shape=(3, 4), dtype=jnp.float32, extra=False, drop=None):
  """A small params-like tree with every leaf equal to `value`."""
  params = {'encoder': {'kernel': jnp.full(kernel_shape, value, dtype),
                        'bias': jnp.full((4,), value, jnp.float32)},
            'embedding': jnp.full((5, 4), value, jnp.float32)}
  if extra:
    params['decoder'] = {'kernel': jnp.full((2, 2), value, jnp.float32)}
  if drop:
    del params[drop]
  return params


def save(workdir, items, config=None):
  """Writes training checkpoints {step: params} as train.py does (TrainState + data + config)."""
  config = config or tiny_config()
  checkpointer = checkpoint.Checkpointer(workdir, keep=50)
  for step, params in items.items():
    state = parallel.TrainState(jnp.asarray(step, jnp.int32), params,
                                jax.jit(optax.adam(1e-3).init)(params))
    checkpointer.save(step, state, {'position': step}, config)
  checkpointer.close()


def snapshot(directory):
  """{relative path: (size, mtime_ns)} of every file and directory under `directory`."""
  out = {}
  for root, dirs, files in os.walk(directory):
    for name in dirs + files:
      path = os.path.join(root, name)
      st = os.stat(path)
      out[os.path.relpath(path, directory)] = (st.st_size, st.st_mtime_ns)
  return out


def leaves(params):
  return [np.asarray(x) for x in jax.tree_util.tree_leaves(params)]


@pytest.fixture
def four(tmp_path):
  """A workdir with checkpoints at steps 1..4; steps 2..4 hold 1, 2, 6 (mean 3)."""
  workdir = str(tmp_path / 'run')
  save(workdir, {1: tree(100.0), 2: tree(1.0), 3: tree(2.0), 4: tree(6.0)})
  return workdir
