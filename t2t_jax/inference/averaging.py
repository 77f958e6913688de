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

from t2t_jax.runtime import damage
from t2t_jax.storage import paths
from t2t_jax.runtime.checkpoint import (CheckpointError, first_readable, read_config_item,
                                        read_json_item)


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
  return epath.Path(path).is_dir() and ocp.path.step.is_path_finalized(path)


def _names(directory: str) -> List[str]:
  """The entry names of a folder."""
  return [p.name for p in epath.Path(directory).iterdir()]


def training_steps(workdir: str) -> List[int]:
  """Ascending steps of the finalized training checkpoints in `<workdir>/checkpoints`.

  A plain directory listing: unlike a CheckpointManager it cannot delete or clean anything.
  """
  directory = os.path.join(paths.absolute(workdir), CHECKPOINTS_DIR)
  paths.forget(directory)
  if not epath.Path(directory).is_dir():
    return []
  return sorted(int(n) for n in _names(directory)
                if n.isdigit() and _finalized(os.path.join(directory, n)))


def averaged_checkpoints(workdir: str) -> List[Tuple[int, int, str]]:
  """[(last step, N, path)] of the averaged checkpoints, oldest first (newest last)."""
  directory = os.path.join(paths.absolute(workdir), AVERAGED_DIR)
  paths.forget(directory)
  if not epath.Path(directory).is_dir():
    return []
  return sorted((int(m.group(1)), int(m.group(2)), os.path.join(directory, name))
                for name in _names(directory)
                if (m := _AVERAGED_NAME.fullmatch(name)) and _finalized(
                    os.path.join(directory, name)))


def _params_metadata(checkpoint_dir: str) -> Any:
  """The `params` subtree of `<checkpoint_dir>/state` as orbax metadata (reads no arrays)."""
  state_dir = os.path.join(checkpoint_dir, 'state')
  handler = ocp.PyTreeCheckpointHandler()
  try:
    tree = handler.metadata(epath.Path(state_dir)).tree
  finally:
    handler.close()
  if not isinstance(tree, dict) or 'params' not in tree:
    raise damage.DamagedCheckpointError(f'{state_dir} has no "params" in its saved state')
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
  ignores the saved device sharding, so a checkpoint from 8 GPUs loads on 1 CPU. The handler
  is used alone: each process reads on its own, with no barrier (see `checkpoint.py`).
  """
  restore_args = jax.tree_util.tree_map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), params_metadata)
  handler = ocp.PyTreeCheckpointHandler()
  try:
    restored = handler.restore(
        epath.Path(checkpoint_dir) / 'state', args=ocp.args.PyTreeRestore(
            item={'params': params_metadata}, restore_args={'params': restore_args},
            partial_restore=True))
  finally:
    handler.close()
  return restored['params']


def _config(checkpoint_dir: str) -> Dict[str, Any]:
  return read_config_item(os.path.join(checkpoint_dir, 'config'))


def latest_training_config(workdir: str) -> Dict[str, Any]:
  """The config JSON saved with the newest training checkpoint whose config reads (read-only;
  damaged ones are skipped with a warning)."""
  source = os.path.join(paths.absolute(workdir), CHECKPOINTS_DIR)
  steps = training_steps(workdir)
  if not steps:
    raise CheckpointError(f'no training checkpoint in {source}')
  config, _, skipped = first_readable(
      [os.path.join(source, str(s)) for s in reversed(steps)], _config, _name)
  if config is None:
    raise CheckpointError(f'no training checkpoint in {source} has a readable config: '
                          + '; '.join(f'{p}: {reason}' for p, reason in skipped))
  return config


def _name(path: str) -> str:
  return f'checkpoint {path}'


def _pick_readable(source: str, available: List[int], num: int, damaged: Dict[int, str]
                   ) -> Dict[int, Any]:
  """{step: params metadata} of the newest `num` steps whose metadata reads; steps found
  damaged are added to `damaged` (step -> reason) and skipped."""
  metadata: Dict[int, Any] = {}
  remaining = [s for s in reversed(available) if s not in damaged]
  while len(metadata) < num:
    meta, step, skipped = first_readable(
        remaining, lambda s: _params_metadata(os.path.join(source, str(s))),
        lambda s: _name(os.path.join(source, str(s))))
    damaged.update(skipped)
    if step is None:
      raise CheckpointError(
          f'cannot average the last {num} checkpoints: only {len(metadata)} of the '
          f'{len(available)} in {source} are readable (damaged: ' + '; '.join(
              f'step {s}: {reason}' for s, reason in sorted(damaged.items())) + ')')
    metadata[step] = meta
    remaining = remaining[remaining.index(step) + 1:]
  return metadata


def _existing_average(target: str, steps: Tuple[int, ...]) -> Optional[AveragedCheckpoint]:
  """The averaged checkpoint `target` if it exists (made from `steps`, else CheckpointError)."""
  if not epath.Path(target).exists():
    return None
  found, _, skipped = first_readable(
      [target], lambda t: (tuple(read_json_item(os.path.join(t, 'averaging'))['steps']),
                           _restore_params(t, _params_metadata(t))), _name, warn=False)
  if found is None or found[0] != steps:
    made = (f'is damaged ({skipped[0][1]})' if found is None
            else f'averages steps {found[0]}, not {steps}')
    raise CheckpointError(f'{target} exists but {made}; move it away to rebuild it (nothing '
                          'was changed)')
  logging.info('checkpoint averaging: %s exists (steps %s); not rewriting it', target,
               ','.join(map(str, steps)))
  return AveragedCheckpoint(target, steps, found[1])


def _sum_params(source: str, metadata: Dict[int, Any], damaged: Dict[int, str]) -> Any:
  """float32 sum of the params of `metadata`'s steps; None (and the step added to `damaged`)
  when one of them turns out damaged."""
  total = None
  for s in sorted(metadata):
    path = os.path.join(source, str(s))
    params, _, skipped = first_readable([path], lambda p: _restore_params(p, metadata[s]), _name)
    if params is None:
      damaged[s] = skipped[0][1]
      return None
    if total is None:
      total = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32).copy(), params)
    else:
      # In place: memory stays one restored model plus the float32 sum, whatever `num` is.
      jax.tree_util.tree_map(lambda acc, x: np.add(acc, np.asarray(x, np.float32), out=acc),
                             total, params)
    del params
  return total


def average_checkpoints(workdir: str, num: int) -> AveragedCheckpoint:
  """Averages the `params` of the last `num` training checkpoints (§6.1: base 5, big 20).

  Writes `<workdir>/averaged/step_<last>_last_<num>/` (orbax: temp dir + rename, so it is
  complete or absent) with the mean parameters, the newest checkpoint's config and the steps
  averaged. If that directory exists already (same last step and N), it is returned as is.
  The training checkpoints are only read; one with damaged files is skipped with a warning
  and the next older one is used instead (the name and the `averaging` entry say which steps
  were averaged). The mean is a running float32 sum over checkpoints (host memory: one model
  plus the sum), divided once by `num`, then cast back to each parameter's dtype.

  Raises:
    CheckpointError: `num < 1`; fewer than `num` (readable) checkpoints; a checkpoint whose
      params differ from the newest one's in structure, shape or dtype (the first mismatch is
      named); an existing averaged checkpoint of the same name made from other steps; a read
      that failed for a passing reason (I/O error, memory).
  """
  workdir = paths.absolute(workdir)
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
  existing = _existing_average(
      os.path.join(workdir, AVERAGED_DIR, f'step_{available[-1]}_last_{num}'),
      tuple(available[-num:]))
  if existing is not None:
    return existing  # made before any damage: nothing to read
  damaged: Dict[int, str] = {}
  while True:  # again after a step turns out damaged while its arrays are read
    # Check every tree against the newest before reading any array: a mismatch costs nothing.
    metadata = _pick_readable(source, available, num, damaged)
    steps = tuple(sorted(metadata))
    target = os.path.join(workdir, AVERAGED_DIR, f'step_{steps[-1]}_last_{num}')
    existing = _existing_average(target, steps)
    if existing is not None:
      return existing
    ref = _signature(metadata[steps[-1]])
    for s in steps[:-1]:
      _check_same(steps[-1], ref, s, _signature(metadata[s]))
    for name, (_, dtype) in ref.items():
      if not jax.numpy.issubdtype(dtype, jax.numpy.floating):  # bfloat16 included
        raise CheckpointError(f'cannot average: parameter {name!r} has non-float dtype {dtype}')
    newest = os.path.join(source, str(steps[-1]))
    config, _, skipped = first_readable([newest], _config, _name)
    if config is None:
      damaged[steps[-1]] = skipped[0][1]
      continue
    total = _sum_params(source, metadata, damaged)
    if total is not None:
      break
  dtypes = jax.tree_util.tree_map(lambda m: np.dtype(m.dtype), metadata[steps[-1]])
  mean = jax.tree_util.tree_map(lambda acc, dtype: (acc / np.float32(num)).astype(dtype),
                                total, dtypes)
  paths.makedirs(os.path.dirname(target))
  with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
    checkpointer.save(target, args=ocp.args.Composite(
        state=ocp.args.PyTreeSave({'params': mean}), config=ocp.args.JsonSave(config),
        averaging=ocp.args.JsonSave({'steps': list(steps), 'num': num, 'source': source})))
  logging.info('checkpoint averaging: averaged steps %s of %s into %s',
               ','.join(map(str, steps)), source, target)
  return AveragedCheckpoint(target, steps, mean)


def _default_candidates(workdir: str) -> List[str]:
  """Eval/decode's preference: the averaged checkpoints, newest first (highest last step,
  then largest N), then the training checkpoints, newest first."""
  source = os.path.join(workdir, CHECKPOINTS_DIR)
  return ([path for _, _, path in reversed(averaged_checkpoints(workdir))]
          + [os.path.join(source, str(s)) for s in reversed(training_steps(workdir))])


def _resolve(workdir: str, checkpoint: str) -> str:
  """The directory an explicit --checkpoint (a step, or a path) names."""
  source = os.path.join(workdir, CHECKPOINTS_DIR)
  available = training_steps(workdir)
  listing = (f'training steps available in {source}: '
             f'{", ".join(map(str, available)) if available else "none"}')
  if checkpoint.isdigit():
    if int(checkpoint) not in available:
      raise CheckpointError(f'no training checkpoint at step {checkpoint}; {listing}')
    return os.path.join(source, str(int(checkpoint)))
  # A path: as given, else relative to the workdir (e.g. 'averaged/step_800_last_5').
  path = next((paths.absolute(p) for p in (checkpoint, os.path.join(workdir, checkpoint))
               if epath.Path(p).is_dir()), None)
  if path is None or not _finalized(path):
    raise CheckpointError(f'checkpoint {checkpoint!r} does not exist or is incomplete; '
                          f'{listing}; averaged: '
                          f'{[os.path.basename(a[2]) for a in averaged_checkpoints(workdir)]}')
  if not (epath.Path(path, 'averaging').is_dir() or (
      os.path.basename(path).isdigit() and epath.Path(path, 'state').is_dir())):
    raise CheckpointError(f'{path} is neither a training step directory (<step>/state) nor '
                          f'an averaged checkpoint (with an "averaging" entry)')
  return path


def _read_inference(path: str) -> InferenceParams:
  """Params (float32, on the default device), config and origin of the checkpoint `path`."""
  if epath.Path(path, 'averaging').is_dir():
    steps = [int(s) for s in read_json_item(os.path.join(path, 'averaging'))['steps']]
    description, step = f'averaged steps {",".join(map(str, steps))}', steps[-1]
  else:
    step = int(os.path.basename(path))
    description = f'training checkpoint step {step}'
  params = _restore_params(path, _params_metadata(path))
  params = jax.tree_util.tree_map(lambda x: jax.device_put(np.asarray(x, np.float32)), params)
  return InferenceParams(params, _config(path), description, step)


def _warn_if_stale(workdir: str, inference: InferenceParams, path: str) -> None:
  """Says so when training checkpoints newer than the averaged one `path` exist."""
  newer = [s for s in training_steps(workdir) if s > inference.step]
  if newer and epath.Path(path, 'averaging').is_dir():
    logging.warning(
        'using %s (%s), but training checkpoints up to step %d are newer; refresh the average '
        'with: python main.py --mode=average --workdir=%s (or pick one with --checkpoint=%d)',
        os.path.relpath(path, workdir), inference.description, newer[-1], workdir, newer[-1])


def load_inference_params(workdir: str, checkpoint: Optional[str] = None) -> InferenceParams:
  """The parameters for eval/decode, restored without knowing the optimizer or the model.

  Args:
    workdir: the run's directory.
    checkpoint: None: the newest averaged checkpoint (highest last step, then largest N) if
      there is one, else the latest training checkpoint; one with damaged files is skipped
      with a one-line warning for the next in that order, and an average older than the
      newest training checkpoint is used with a warning naming the command that refreshes
      it. A step number as a string: that training checkpoint; or the path of an averaged or
      training step directory: exactly that one (damaged: CheckpointError).

  Returns:
    InferenceParams; `t2t_jax.config.from_json(result.config_json)` rebuilds the config.

  Raises:
    CheckpointError: no (readable) checkpoint, the requested one does not exist (available
      listed) or is damaged, or a read failed for a passing reason (I/O error, memory).
  """
  workdir = paths.absolute(workdir)
  candidates = _default_candidates(workdir) if checkpoint is None else [
      _resolve(workdir, checkpoint)]
  if not candidates:
    raise CheckpointError(f'no checkpoint in workdir {workdir}: looked in '
                          f'{os.path.join(workdir, CHECKPOINTS_DIR)} and '
                          f'{os.path.join(workdir, AVERAGED_DIR)}')
  inference, path, skipped = first_readable(candidates, _read_inference, _name,
                                            warn=checkpoint is None)
  if inference is None and checkpoint is not None:
    steps = ', '.join(map(str, training_steps(workdir))) or 'none'
    raise CheckpointError(
        f'{_name(candidates[0])} is damaged ({skipped[0][1]}); choose another with '
        f'--checkpoint=STEP (training steps: {steps}) or leave --checkpoint out to use the '
        'newest readable one')
  if inference is None:
    raise CheckpointError(f'no checkpoint in workdir {workdir} is readable: ' + '; '.join(
        f'{p}: {reason}' for p, reason in skipped))
  if checkpoint is None:
    _warn_if_stale(workdir, inference, path)
  logging.info('inference parameters: %s (%s)', inference.description, path)
  return inference
