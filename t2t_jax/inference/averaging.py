"""Checkpoint averaging (§6.1) and the listing and reading of checkpoints it shares with
`checkpoint_choice.py`.

The paper's base models average the last 5 checkpoints, the big ones the last 20. Averaging
reads the training checkpoints of `<workdir>/checkpoints` (never writing or cleaning there),
verifies that their parameter trees, shapes and dtypes agree, and writes a params-only orbax
checkpoint `<workdir>/averaged/step_<last>_last_<N>` with the run config beside it, so eval and
decode can rebuild the model from it alone.
"""

import dataclasses
import functools
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from t2t_jax.model import param_paths
from t2t_jax.runtime import checkpoint as checkpoint_lib
from t2t_jax.runtime import damage
from t2t_jax.storage import layout, paths
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.runtime.checkpoint import (CheckpointError, first_readable, read_config_item,
                                        read_json_item)


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


def is_finalized(path: str) -> bool:
  """A complete orbax checkpoint directory (not an in-progress `*.orbax-checkpoint-tmp-*`)."""
  return epath.Path(path).is_dir() and ocp.path.step.is_path_finalized(path)


def _names(directory: str) -> List[str]:
  """The entry names of a folder."""
  return [p.name for p in epath.Path(directory).iterdir()]


def training_steps(workdir: str) -> List[int]:
  """Ascending steps of the finalized training checkpoints in `<workdir>/checkpoints`.

  A plain directory listing: unlike a CheckpointManager it cannot delete or clean anything.
  """
  directory = layout.of(workdir).checkpoints
  paths.forget(directory)
  if not epath.Path(directory).is_dir():
    return []
  return sorted(int(n) for n in _names(directory)
                if n.isdigit() and is_finalized(os.path.join(directory, n)))


def averaged_checkpoints(workdir: str) -> List[Tuple[int, int, str]]:
  """[(last step, N, path)] of the averaged checkpoints, oldest first (newest last)."""
  directory = layout.of(workdir).averaged
  paths.forget(directory)
  if not epath.Path(directory).is_dir():
    return []
  return sorted((int(m.group(1)), int(m.group(2)), os.path.join(directory, name))
                for name in _names(directory)
                if (m := _AVERAGED_NAME.fullmatch(name)) and is_finalized(
                    os.path.join(directory, name)))


PARAMS_PATH = ('params',)


def params_metadata(checkpoint_dir: str, at: Tuple[str, ...] = PARAMS_PATH) -> Any:
  """The `params` subtree of `<checkpoint_dir>/state` as orbax metadata (reads no arrays); `at`:
  another subtree of the same shape (`checkpoint.EMA_PATH`, the moving average)."""
  state_dir = os.path.join(checkpoint_dir, 'state')
  handler = ocp.PyTreeCheckpointHandler()
  try:
    tree = handler.metadata(epath.Path(state_dir)).tree
  finally:
    handler.close()
  for key in at:
    if not isinstance(tree, dict) or key not in tree:
      if at != PARAMS_PATH:
        raise CheckpointError(f'{checkpoint_dir} holds no {"/".join(at)} in its saved state')
      raise damage.DamagedCheckpointError(f'{state_dir} has no "params" in its saved state')
    tree = tree[key]
  return tree


def _signature(metadata) -> Dict[str, Tuple[Tuple[int, ...], np.dtype]]:
  """{'encoder/layer_0/kernel': (shape, dtype)} in tree order."""
  flat, _ = jax.tree_util.tree_flatten_with_path(metadata)
  return {param_paths.path_name(path):
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


def restore_params(checkpoint_dir: str, metadata: Any, at: Tuple[str, ...] = PARAMS_PATH) -> Any:
  """Only the `params` subtree of `<checkpoint_dir>/state`, as host numpy arrays.

  The target is built from the checkpoint's own metadata, so no optimizer or model is needed;
  `partial_restore` skips the optimizer moments (2/3 of a training state). Restoring to numpy
  ignores the saved device sharding, so a checkpoint from 8 GPUs loads on 1 CPU. The handler
  is used alone: each process reads on its own, with no barrier (see `checkpoint.py`). `at`:
  the subtree to restore (`params_metadata`).
  """
  restore_args = jax.tree_util.tree_map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), metadata)
  handler = ocp.PyTreeCheckpointHandler()
  try:
    nest = lambda leaf: functools.reduce(lambda t, k: {k: t}, reversed(at), leaf)  # noqa: E731
    restored = handler.restore(
        epath.Path(checkpoint_dir) / 'state', args=ocp.args.PyTreeRestore(
            item=nest(metadata), restore_args=nest(restore_args), partial_restore=True))
  finally:
    handler.close()
  return functools.reduce(lambda t, k: t[k], at, restored)


def checkpoint_config(checkpoint_dir: str) -> Dict[str, Any]:
  return read_config_item(os.path.join(checkpoint_dir, 'config'))


def checkpoint_name(path: str) -> str:
  return f'checkpoint {path}'


def vocabulary_item(checkpoint_dir: str) -> Optional[Dict[str, Any]]:
  """The vocabulary's sha256 and size saved with a checkpoint; None for one without."""
  item = os.path.join(checkpoint_dir, checkpoint_lib.VOCAB_ITEM)
  return read_json_item(item) if epath.Path(item).is_dir() else None


def setup_items(checkpoint_dir: str) -> Dict[str, Any]:
  """{item: JSON} of the `checkpoint.SETUP_ITEMS` a checkpoint has (vocabulary, factory
  source, data fingerprint), which an average of it carries on."""
  found = {}
  for name in checkpoint_lib.SETUP_ITEMS:
    item = os.path.join(checkpoint_dir, name)
    if epath.Path(item).is_dir():
      found[name] = read_json_item(item)
  return found


def gone(path: str) -> bool:
  """Whether `path` no longer exists (asking the store, not a cache)."""
  paths.forget(path)
  return not epath.Path(path).exists()


# How long a checkpoint whose read found a file missing may take to vanish: a training run's
# keep_checkpoints deletes a step's files before its folder, so a reader may fail on a missing
# file while the folder is still there for a moment.
DELETION_WAIT_S = 1.0


def vanished(path: str, error: BaseException) -> bool:
  """Whether `path`, whose read raised `error`, was deleted: it is gone, or `error` says a
  file of it is missing and the folder vanishes within `DELETION_WAIT_S` (a deletion under
  way; a damaged checkpoint with a file missing costs that wait once)."""
  if gone(path):
    return True
  if not damage.is_missing_file(error):
    return False
  deadline = time.monotonic() + DELETION_WAIT_S
  while time.monotonic() < deadline:
    time.sleep(0.05)
    if gone(path):
      return True
  return False


def unless_vanished(read):
  """`read(path)` that raises `damage.VanishedCheckpointError` when it failed because `path`
  was deleted meanwhile (a live training run keeps only its last keep_checkpoints), also when
  the deletion was still under way (`vanished`)."""
  def wrapped(path):
    try:
      return read(path)
    except Exception as e:  # noqa: BLE001  whatever a half-deleted checkpoint raises
      if vanished(path, e):
        raise damage.VanishedCheckpointError(
            'was deleted while it was read (a training run on this workdir keeps only its '
            'last keep_checkpoints)') from e
      raise
  return wrapped


class _Relist(Exception):
  """Steps vanished while averaging: list the training checkpoints again."""


def _pick_readable(source: str, available: List[int], num: int, damaged: Dict[int, str]
                   ) -> Dict[int, Any]:
  """{step: params metadata} of the newest `num` steps whose metadata reads; steps found
  damaged are added to `damaged` (step -> reason) and skipped."""
  metadata: Dict[int, Any] = {}
  remaining = [s for s in reversed(available) if s not in damaged]
  while len(metadata) < num:
    meta, step, skipped = first_readable(
        remaining, lambda s: unless_vanished(params_metadata)(os.path.join(source, str(s))),
        lambda s: checkpoint_name(os.path.join(source, str(s))))
    damaged.update(skipped)
    if step is None and any(gone(os.path.join(source, str(s))) for s in damaged):
      raise _Relist()
    if step is None:
      raise CheckpointError(
          f'cannot average the last {num} checkpoints: only {len(metadata)} of the '
          f'{len(available)} in {source} are readable (damaged: ' + '; '.join(
              f'step {s}: {reason}' for s, reason in sorted(damaged.items())) + ')')
    metadata[step] = meta
    remaining = remaining[remaining.index(step) + 1:]
  return metadata


def existing_average(target: str, steps: Tuple[int, ...]) -> Optional[AveragedCheckpoint]:
  """The averaged checkpoint `target` if it exists (made from `steps`, else CheckpointError)."""
  if not epath.Path(target).exists():
    return None
  found, _, skipped = first_readable(
      [target], lambda t: (tuple(read_json_item(os.path.join(t, 'averaging'))['steps']),
                           restore_params(t, params_metadata(t))), checkpoint_name, warn=False)
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
    params, _, skipped = first_readable(
        [path], unless_vanished(lambda p: restore_params(p, metadata[s])), checkpoint_name)
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
  workdir = layout.of(workdir)
  source = workdir.checkpoints
  available = _available_steps(source, workdir, num)
  existing = existing_average(
      workdir.averaged_checkpoint(available[-1], num),
      tuple(available[-num:]))
  if existing is not None:
    return existing  # made before any damage: nothing to read
  damaged: Dict[int, str] = {}
  for _ in range(_MAX_RELISTS):  # again after a step turns out damaged or deleted
    try:
      found = _average_once(workdir, available, num, damaged)
    except _Relist:
      found = None
    if isinstance(found, AveragedCheckpoint):
      return found
    if found is not None:
      break
    # A live training run may have deleted (and saved) steps meanwhile: list them again.
    available = _available_steps(source, workdir, num)
    damaged = {s: r for s, r in damaged.items() if s in available}
  else:
    raise CheckpointError(f'cannot average the last {num} checkpoints of {source}: they kept '
                          'changing while they were read; rerun')
  target, steps, total, config, setup, metadata = found
  dtypes = jax.tree_util.tree_map(lambda m: np.dtype(m.dtype), metadata[steps[-1]])
  mean = jax.tree_util.tree_map(lambda acc, dtype: (acc / np.float32(num)).astype(dtype),
                                total, dtypes)
  write_average(target, mean, config, steps, num, source, setup)
  return AveragedCheckpoint(target, steps, mean)


_MAX_RELISTS = 1000  # each try rules out a step, or follows a training run that moved on


def _average_once(workdir: layout.Workdir, available: List[int], num: int,
                  damaged: Dict[int, str]):
  """One try of `average_checkpoints` over `available`: an existing AveragedCheckpoint, or
  (target, steps, float32 sum, config, setup items, metadata), or None when a step turned
  out damaged or deleted (added to `damaged`; `_Relist` when deleted before it was chosen)."""
  source = workdir.checkpoints
  # Check every tree against the newest before reading any array: a mismatch costs nothing.
  metadata = _pick_readable(source, available, num, damaged)
  steps = tuple(sorted(metadata))
  target = workdir.averaged_checkpoint(steps[-1], num)
  existing = existing_average(target, steps)
  if existing is not None:
    return existing
  check_averageable(steps, metadata)
  newest = os.path.join(source, str(steps[-1]))
  setup, _, skipped = first_readable(
      [newest], unless_vanished(lambda p: (checkpoint_config(p), setup_items(p))),
      checkpoint_name)
  if setup is None:
    damaged[steps[-1]] = skipped[0][1]
    return None
  total = _sum_params(source, metadata, damaged)
  return None if total is None else (target, steps, total, *setup, metadata)


def _available_steps(source: str, workdir: str, num: int) -> List[int]:
  """The training checkpoints' steps, oldest first, checked to hold at least `num`."""
  if num < 1:
    raise CheckpointError(f'cannot average {num} checkpoints: the number must be at least 1')
  available = training_steps(workdir)
  if not available:
    raise CheckpointError(f'no training checkpoint to average in {source}')
  if num > len(available):
    raise CheckpointError(
        f'cannot average the last {num} checkpoints: only {len(available)} exist in {source} '
        f'(steps {", ".join(map(str, available))})')
  return available


def check_averageable(steps: Tuple[int, ...], metadata: Dict[int, Any]) -> None:
  """Every tree has the newest one's structure, shapes and dtypes, and those are floats."""
  ref = _signature(metadata[steps[-1]])
  for s in steps[:-1]:
    _check_same(steps[-1], ref, s, _signature(metadata[s]))
  for name, (_, dtype) in ref.items():
    if not jax.numpy.issubdtype(dtype, jax.numpy.floating):  # bfloat16 included
      raise CheckpointError(f'cannot average: parameter {name!r} has non-float dtype {dtype}')


def write_average(target: str, mean: Any, config: Dict[str, Any], steps: Tuple[int, ...],
                   num: int, source: str, setup: Optional[Dict[str, Any]] = None) -> None:
  """Saves the mean parameters with the newest config, its `setup_items` and the steps
  averaged (orbax writes a temporary directory and renames it, so `target` is complete or
  absent)."""
  items = {name: ocp.args.JsonSave(value) for name, value in (setup or {}).items() if value}
  paths.makedirs(os.path.dirname(target))
  checkpoint_lib.quiet_failed_save_reports()  # a full disk: one line, not orbax's tracebacks
  with workdir_lib.writing(target, ' and average again'), ocp.Checkpointer(
      ocp.CompositeCheckpointHandler()) as checkpointer:
    checkpointer.save(target, args=ocp.args.Composite(
        state=ocp.args.PyTreeSave({'params': mean}), config=ocp.args.JsonSave(config),
        averaging=ocp.args.JsonSave({'steps': list(steps), 'num': num, 'source': source}),
        **items))
  logging.info('checkpoint averaging: averaged steps %s of %s into %s',
               ','.join(map(str, steps)), source, target)
