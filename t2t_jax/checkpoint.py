"""Orbax checkpoints of training: state, data-iterator position and config, saved together.

Layout: `<workdir>/checkpoints/<step>/{state,data,config}`. `state` is the `TrainState`
(step, params, optimizer state); `data` the JSON state of the input iterator; `config` the run
config as JSON, so a rerun can refuse an incompatible config instead of mixing two models.
When to save is `save_policy.py`'s decision (every T minutes, §5.2, and/or every N steps); the
last K checkpoints are kept (orbax deletes only checkpoints it wrote). On resume, a checkpoint that
does not restore is moved (never deleted) to `<workdir>/checkpoints_unreadable/`.

Averaging the last N checkpoints for eval and decode lives in `averaging.py`.
"""

import os
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import ml_collections
import orbax.checkpoint as ocp
from absl import logging

from t2t_jax import config as config_lib
from jax.experimental import multihost_utils

# Keys whose change makes an existing checkpoint unusable for this run: the parameter shapes,
# or the data order and batch shapes the saved iterator position refers to.
RESUME_KEYS = config_lib.MODEL_KEYS + (
    'dataset', 'source_lang', 'target_lang', 'local_corpus_dir', 'train_split', 'max_length',
    'tokens_per_batch', 'bucket_lengths', 'shuffle_seed', 'pack_examples', 'grad_accum_steps')


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
  """

  def __init__(self, workdir: str, keep: int = 20):
    self.directory = os.path.join(os.path.abspath(workdir), 'checkpoints')
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> List[int]:
    return sorted(self._manager.all_steps())

  def save(self, step: int, state, data_state: Dict[str, Any],
           config: ml_collections.ConfigDict) -> None:
    """Writes a checkpoint at `step` (asynchronously; `wait()` blocks until it is on disk)."""
    if step in self._manager.all_steps():
      return
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
        config=ocp.args.JsonSave(config_to_json(config))), force=True)
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
