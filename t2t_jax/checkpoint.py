"""Orbax checkpoints of training: state, data-iterator position and config, saved together.

Layout: `<workdir>/checkpoints/<step>/{state,data,config}`. `state` is the `TrainState`
(step, params, optimizer state); `data` the JSON state of the input iterator; `config` the run
config as JSON, so a rerun can refuse an incompatible config instead of mixing two models.
Saving follows the paper's policy (every T minutes, §5.2) and/or every N steps; the last K
checkpoints are kept (orbax deletes only checkpoints it wrote). On resume, a checkpoint that
does not restore is moved (never deleted) to `<workdir>/checkpoints_unreadable/`.

Checkpoint averaging (§6.1: "for the base models, we used a single model obtained by averaging
the last 5 checkpoints ... For the big models, we averaged the last 20 checkpoints") writes a
params-only checkpoint, `<workdir>/averaged/step_<last>_last_<N>/{state,config,averaging}`:
`state` holds the tree `{'params': mean}` (the same `params` subtree as a training `state`, so
one reader serves both), `config` the config of the newest step averaged, `averaging` a JSON
`{'steps': [...], 'num': N, 'source': <checkpoints dir>}`. `load_inference_params` picks the
newest averaged checkpoint, else the latest training one, for eval and decode. Both only read
`checkpoints/` (plain listings and checkpointers, never a CheckpointManager, which may clean up).
"""

import dataclasses
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from jax.experimental import multihost_utils

# Keys whose change makes an existing checkpoint unusable for this run: the parameter shapes,
# or the data order and batch shapes the saved iterator position refers to.
RESUME_KEYS = ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'd_k', 'd_v', 'num_layers',
               'positional', 'norm_position', 'max_len', 'dataset', 'source_lang',
               'target_lang', 'local_corpus_dir', 'train_split', 'max_length',
               'tokens_per_batch', 'bucket_lengths', 'shuffle_seed', 'pack_examples',
               'grad_accum_steps')


class CheckpointError(RuntimeError):
  """A checkpoint is missing, unreadable or incompatible with the run's config."""


def config_to_json(config: ml_collections.ConfigDict) -> Dict[str, Any]:
  """The config as plain JSON values (tuples become lists)."""
  return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.to_dict().items()}


def incompatible_keys(saved: Dict[str, Any], config: ml_collections.ConfigDict,
                      keys=RESUME_KEYS) -> List[Tuple[str, Any, Any]]:
  """[(key, saved value, current value)] for every `keys` entry that differs."""
  current = config_to_json(config)
  return [(k, saved.get(k), current.get(k)) for k in keys if saved.get(k) != current.get(k)]


class Checkpointer:
  """Saves and restores training checkpoints under `<workdir>/checkpoints`.

  Args:
    workdir: the run's directory.
    keep: how many of the latest checkpoints to keep.
    every_steps: save when the step is a multiple of this (0: off).
    every_minutes: save when this many minutes passed since the last save (0: off).
  """

  def __init__(self, workdir: str, keep: int = 20, every_steps: int = 0,
               every_minutes: float = 0.0):
    self.directory = os.path.join(os.path.abspath(workdir), 'checkpoints')
    self.every_steps = every_steps
    self.every_minutes = every_minutes
    self._last_save = time.monotonic()
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> List[int]:
    return sorted(self._manager.all_steps())

  def should_save(self, step: int) -> bool:
    """The save policy: every N steps and/or every T minutes."""
    if self.every_steps and step % self.every_steps == 0:
      return True
    return bool(self.every_minutes) and (
        time.monotonic() - self._last_save >= 60.0 * self.every_minutes)

  def save(self, step: int, state, data_state: Dict[str, Any],
           config: ml_collections.ConfigDict) -> None:
    """Writes a checkpoint at `step` (asynchronously; `wait()` blocks until it is on disk)."""
    if step in self._manager.all_steps():
      return
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
        config=ocp.args.JsonSave(config_to_json(config))), force=True)
    self._last_save = time.monotonic()
    logging.info('checkpoint: saving step %d to %s', step, self.directory)

  def saved_config(self, step: Optional[int] = None) -> Dict[str, Any]:
    step = self.latest_step() if step is None else step
    return self._manager.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))[
        'config']

  def check_compatible(self, config: ml_collections.ConfigDict) -> None:
    """Refuses to resume from checkpoints of a different model or data setup.

    Raises CheckpointError naming every differing key, with saved and current values.
    """
    step = self.latest_step()
    if step is None:
      return
    diffs = incompatible_keys(self.saved_config(step), config)
    if diffs:
      detail = '; '.join(f'{k}: checkpoint has {a!r}, config has {b!r}' for k, a, b in diffs)
      raise CheckpointError(
          f'{self.directory} holds checkpoints (latest step {step}) of an incompatible config '
          f'({detail}). Use another --workdir, or restore those values; nothing was changed.')

  def restore(self, abstract_state, step: Optional[int] = None):
    """(state, data_state) from `step` (default: the latest), placed like `abstract_state`.

    `abstract_state` is a tree of `jax.ShapeDtypeStruct` with shardings (see `abstract_like`).
    """
    step = self.latest_step() if step is None else step
    if step is None:
      raise CheckpointError(f'no checkpoint in {self.directory}')
    restored = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()))
    return restored['state'], restored['data']

  def restore_latest_good(self, abstract_state) -> Tuple[Any, Dict[str, Any], int]:
    """(state, data_state, step) of the newest checkpoint that restores.

    A newer checkpoint that fails to restore (damaged files) is logged and moved, not deleted,
    to `<workdir>/checkpoints_unreadable/<step>-<time>`, so the resumed run saves that step
    anew instead of skipping it as already saved. Raises CheckpointError (moving nothing)
    when no checkpoint restores.
    """
    errors = []
    for step in reversed(self.all_steps()):
      try:
        state, data_state = self.restore(abstract_state, step)
      except Exception as e:  # pylint: disable=broad-except  (orbax/tensorstore raise many)
        logging.warning('checkpoint %s/%d does not restore (%s); skipping it and trying the '
                        'previous one', self.directory, step, e)
        errors.append((step, e))
        continue
      if errors:
        self._set_aside([s for s, _ in errors])
      return state, data_state, step
    raise CheckpointError(f'no checkpoint in {self.directory} restores: ' + '; '.join(
        f'step {s}: {type(e).__name__}: {str(e)[:300]}' for s, e in errors))

  def _set_aside(self, steps: List[int]) -> None:
    aside = os.path.join(os.path.dirname(self.directory), 'checkpoints_unreadable')
    if jax.process_index() == 0:
      os.makedirs(aside, exist_ok=True)
      for step in steps:
        target = os.path.join(aside, f'{step}-{int(time.time())}')
        os.rename(os.path.join(self.directory, str(step)), target)
        logging.warning('checkpoint: moved unreadable step %d to %s', step, target)
    multihost_utils.sync_global_devices('t2t_jax_checkpoint_set_aside')  # all see the move
    self._manager.reload()

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()


def abstract_like(tree) -> Any:
  """Shape/dtype/sharding skeleton of a tree of arrays, for restoring into the same layout."""
  return jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, tree)


# --- Checkpoint averaging and inference parameters (§6.1) --------------------------------------

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
