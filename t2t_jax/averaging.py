"""Checkpoint averaging and the parameters eval and decode use (§6.1).

The paper's base models average the last 5 checkpoints, the big ones the last 20. Averaging
reads the training checkpoints of `<workdir>/checkpoints` (never writing or cleaning there),
verifies that their parameter trees, shapes and dtypes agree, and writes a params-only orbax
checkpoint `<workdir>/averaged/step_<last>_last_<N>` with the run config beside it, so eval and
decode can rebuild the model from it alone.
"""

import dataclasses
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from t2t_jax.checkpoint import CheckpointError


CHECKPOINTS_DIR = 'checkpoints'
AVERAGED_DIR = 'averaged'
_AVERAGED_NAME = re.compile(r'step_(\d+)_last_(\d+)')


@dataclasses.dataclass(frozen=True)
class AveragedCheckpoint:
  """An averaged checkpoint on disk.

  Attributes:
    path: its directory, `<workdir>/averaged/step_<last>_last_<N>`.
    steps: the training steps averaged, ascending.
    params: the mean parameters, a nested dict of host numpy arrays (the training dtypes).
  """
  path: str
  steps: Tuple[int, ...]
  params: Any


@dataclasses.dataclass(frozen=True)
class InferenceParams:
  """Parameters for eval/decode and what they came from.

  Attributes:
    params: a nested dict of float32 `jax.Array`s on the default device.
    config_json: the run config saved with the checkpoint (`config.from_json` reads it).
    description: e.g. 'averaged steps 600,700,800' or 'training checkpoint step 800'.
    step: the training step (for an averaged checkpoint, the last step averaged).
  """
  params: Any
  config_json: Dict[str, Any]
  description: str
  step: int


def _finalized(path: str) -> bool:
  """A complete orbax checkpoint directory (not an in-progress `*.orbax-checkpoint-tmp-*`)."""
  return os.path.isdir(path) and ocp.path.step.is_path_finalized(path)


def training_steps(workdir: str) -> List[int]:
  """Ascending steps of the finalized training checkpoints in `<workdir>/checkpoints`.

  A plain directory listing: unlike a CheckpointManager it cannot delete or clean anything.
  """
  directory = os.path.join(os.path.abspath(workdir), CHECKPOINTS_DIR)
  if not os.path.isdir(directory):
    return []
  return sorted(int(n) for n in os.listdir(directory)
                if n.isdigit() and _finalized(os.path.join(directory, n)))


def averaged_checkpoints(workdir: str) -> List[Tuple[int, int, str]]:
  """[(last step, N, path)] of the averaged checkpoints, oldest first (newest last)."""
  directory = os.path.join(os.path.abspath(workdir), AVERAGED_DIR)
  if not os.path.isdir(directory):
    return []
  return sorted((int(m.group(1)), int(m.group(2)), os.path.join(directory, name))
                for name in os.listdir(directory)
                if (m := _AVERAGED_NAME.fullmatch(name)) and _finalized(
                    os.path.join(directory, name)))


def _params_metadata(checkpoint_dir: str, what: str) -> Any:
  """The `params` subtree of `<checkpoint_dir>/state` as orbax metadata (reads no arrays)."""
  state_dir = os.path.join(checkpoint_dir, 'state')
  handler = ocp.PyTreeCheckpointHandler()
  try:
    tree = handler.metadata(epath.Path(state_dir)).tree
  except (OSError, ValueError) as e:
    raise CheckpointError(f'cannot read the state of {what} in {state_dir}: {e}') from e
  finally:
    handler.close()
  if not isinstance(tree, dict) or 'params' not in tree:
    raise CheckpointError(f'{what} ({state_dir}) has no "params" in its saved state')
  return tree['params']


def _signature(params_metadata) -> Dict[str, Tuple[Tuple[int, ...], np.dtype]]:
  """{'encoder/layer_0/kernel': (shape, dtype)} in tree order."""
  flat, _ = jax.tree_util.tree_flatten_with_path(params_metadata)
  return {'/'.join(str(getattr(k, 'key', getattr(k, 'name', getattr(k, 'idx', k)))) for k in path):
          (tuple(m.shape), np.dtype(m.dtype)) for path, m in flat}


def _check_same(ref_step: int, ref, step: int, sig) -> None:
  """Raises CheckpointError naming the first parameter where `sig` differs from `ref`."""
  for name in list(ref) + [n for n in sig if n not in ref]:
    if name not in sig or name not in ref:
      has, lacks = (ref_step, step) if name in ref else (step, ref_step)
      problem = f'is in step {has} but missing from step {lacks}'
    elif sig[name] != ref[name]:
      what, i = ('shape', 0) if sig[name][0] != ref[name][0] else ('dtype', 1)
      problem = f'has {what} {sig[name][i]} in step {step} but {ref[name][i]} in step {ref_step}'
    else:
      continue
    raise CheckpointError(f'cannot average: parameter {name!r} {problem}')


def _restore_params(checkpoint_dir: str, params_metadata) -> Any:
  """Only the `params` subtree of `<checkpoint_dir>/state`, as host numpy arrays.

  The target is built from the checkpoint's own metadata, so no optimizer or model is needed;
  `partial_restore` skips the optimizer moments (2/3 of a training state). Restoring to numpy
  ignores the saved device sharding, so a checkpoint from 8 GPUs loads on 1 CPU.
  """
  restore_args = jax.tree_util.tree_map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), params_metadata)
  with ocp.PyTreeCheckpointer() as checkpointer:
    restored = checkpointer.restore(
        os.path.join(checkpoint_dir, 'state'), args=ocp.args.PyTreeRestore(
            item={'params': params_metadata}, restore_args={'params': restore_args},
            partial_restore=True))
  return restored['params']


def _read_json(item_dir: str) -> Any:
  with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
    return checkpointer.restore(item_dir, args=ocp.args.JsonRestore())


def latest_training_config(workdir: str) -> Dict[str, Any]:
  """The config JSON saved with the newest training checkpoint (read-only)."""
  steps = training_steps(workdir)
  source = os.path.join(os.path.abspath(workdir), CHECKPOINTS_DIR)
  if not steps:
    raise CheckpointError(f'no training checkpoint in {source}')
  return _read_json(os.path.join(source, str(steps[-1]), 'config'))


def average_checkpoints(workdir: str, num: int) -> AveragedCheckpoint:
  """Averages the `params` of the last `num` training checkpoints (§6.1: base 5, big 20).

  Writes `<workdir>/averaged/step_<last>_last_<num>/` (orbax: temp dir + rename, so it is
  complete or absent) with the mean parameters, the newest checkpoint's config and the steps
  averaged. If that directory exists already (same last step and N), it is returned as is.
  The training checkpoints are only read. The mean is a running float32 sum over checkpoints
  (host memory: one model plus the sum), divided once by `num`, then cast back to each
  parameter's dtype.

  Raises:
    CheckpointError: `num < 1`; no or fewer than `num` checkpoints; a checkpoint whose params
      differ from the newest one's in structure, shape or dtype (the first mismatch is named);
      an existing averaged checkpoint of the same name made from other steps.
  """
  workdir = os.path.abspath(workdir)
  source = os.path.join(workdir, CHECKPOINTS_DIR)
  if num < 1:
    raise CheckpointError(f'cannot average {num} checkpoints: the number must be at least 1')
  available = training_steps(workdir)
  if not available:
    raise CheckpointError(f'no training checkpoint to average in {source}')
  if num > len(available):
    raise CheckpointError(
        f'cannot average the last {num} checkpoints: only {len(available)} exist in {source} '
        f'(steps {", ".join(map(str, available))})')
  steps = tuple(available[-num:])
  target = os.path.join(workdir, AVERAGED_DIR, f'step_{steps[-1]}_last_{num}')
  if os.path.exists(target):
    done = tuple(_read_json(os.path.join(target, 'averaging'))['steps'])
    if done != steps:
      raise CheckpointError(f'{target} exists but averages steps {done}, not {steps}; move it '
                            f'away to rebuild it (nothing was changed)')
    logging.info('checkpoint averaging: %s exists (steps %s); not rewriting it', target,
                 ','.join(map(str, steps)))
    return AveragedCheckpoint(
        target, steps, _restore_params(target, _params_metadata(target, target)))

  # Check every tree against the newest before reading any array, so a mismatch costs nothing.
  step_dirs = {s: os.path.join(source, str(s)) for s in steps}
  metadata = {s: _params_metadata(step_dirs[s], f'training checkpoint {s}') for s in steps}
  ref = _signature(metadata[steps[-1]])
  for s in steps[:-1]:
    _check_same(steps[-1], ref, s, _signature(metadata[s]))
  for name, (_, dtype) in ref.items():
    if not jax.numpy.issubdtype(dtype, jax.numpy.floating):  # bfloat16 included
      raise CheckpointError(f'cannot average: parameter {name!r} has non-float dtype {dtype}')

  total = None
  for s in steps:
    params = _restore_params(step_dirs[s], metadata[s])
    if total is None:
      total = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32).copy(), params)
    else:
      # In place: memory stays one restored model plus the float32 sum, whatever `num` is.
      jax.tree_util.tree_map(lambda acc, x: np.add(acc, np.asarray(x, np.float32), out=acc),
                             total, params)
    del params
  dtypes = jax.tree_util.tree_map(lambda m: np.dtype(m.dtype), metadata[steps[-1]])
  mean = jax.tree_util.tree_map(lambda acc, dtype: (acc / np.float32(num)).astype(dtype),
                                total, dtypes)

  config = _read_json(os.path.join(step_dirs[steps[-1]], 'config'))
  os.makedirs(os.path.dirname(target), exist_ok=True)
  with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
    checkpointer.save(target, args=ocp.args.Composite(
        state=ocp.args.PyTreeSave({'params': mean}), config=ocp.args.JsonSave(config),
        averaging=ocp.args.JsonSave({'steps': list(steps), 'num': num, 'source': source})))
  logging.info('checkpoint averaging: averaged steps %s of %s into %s',
               ','.join(map(str, steps)), source, target)
  return AveragedCheckpoint(target, steps, mean)


def _resolve(workdir: str, checkpoint: Optional[str]) -> Tuple[str, int, Optional[List[int]]]:
  """(checkpoint dir, step, averaged steps or None for a training checkpoint)."""
  source = os.path.join(workdir, CHECKPOINTS_DIR)
  available = training_steps(workdir)
  listing = (f'training steps available in {source}: '
             f'{", ".join(map(str, available)) if available else "none"}')
  if checkpoint is None:
    averaged = averaged_checkpoints(workdir)
    if averaged:
      # Newest: the highest last step, then the largest N (sorted tuples: the last one).
      checkpoint = averaged[-1][2]
    elif available:
      return os.path.join(source, str(available[-1])), available[-1], None
    else:
      raise CheckpointError(f'no checkpoint in workdir {workdir}: looked in {source} and '
                            f'{os.path.join(workdir, AVERAGED_DIR)}')
  elif checkpoint.isdigit():
    if int(checkpoint) not in available:
      raise CheckpointError(f'no training checkpoint at step {checkpoint}; {listing}')
    return os.path.join(source, str(int(checkpoint))), int(checkpoint), None
  # A path: as given, else relative to the workdir (e.g. 'averaged/step_800_last_5').
  path = next((os.path.abspath(p) for p in (checkpoint, os.path.join(workdir, checkpoint))
               if os.path.isdir(p)), None)
  if path is None or not _finalized(path):
    raise CheckpointError(f'checkpoint {checkpoint!r} does not exist or is incomplete; '
                          f'{listing}; averaged: '
                          f'{[os.path.basename(a[2]) for a in averaged_checkpoints(workdir)]}')
  if os.path.isdir(os.path.join(path, 'averaging')):
    steps = [int(s) for s in _read_json(os.path.join(path, 'averaging'))['steps']]
    return path, steps[-1], steps
  name = os.path.basename(path)
  if not (name.isdigit() and os.path.isdir(os.path.join(path, 'state'))):
    raise CheckpointError(f'{path} is neither a training step directory (<step>/state) nor '
                          f'an averaged checkpoint (with an "averaging" entry)')
  return path, int(name), None


def load_inference_params(workdir: str, checkpoint: Optional[str] = None) -> InferenceParams:
  """The parameters for eval/decode, restored without knowing the optimizer or the model.

  Args:
    workdir: the run's directory.
    checkpoint: None: the newest averaged checkpoint (highest last step, then largest N) if
      there is one, else the latest training checkpoint; a step number as a string: that
      training checkpoint; or the path of an averaged or training step directory.

  Returns:
    InferenceParams; `t2t_jax.config.from_json(result.config_json)` rebuilds the config.

  Raises:
    CheckpointError: no checkpoint, or the requested one does not exist (available listed).
  """
  workdir = os.path.abspath(workdir)
  path, step, averaged = _resolve(workdir, checkpoint)
  params = _restore_params(path, _params_metadata(path, f'checkpoint {path}'))
  params = jax.tree_util.tree_map(lambda x: jax.device_put(np.asarray(x, np.float32)), params)
  config_json = _read_json(os.path.join(path, 'config'))
  description = (f'averaged steps {",".join(map(str, averaged))}' if averaged
                 else f'training checkpoint step {step}')
  logging.info('inference parameters: %s (%s)', description, path)
  return InferenceParams(params, config_json, description, step)
