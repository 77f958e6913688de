"""Orbax checkpoints of training: state, data-iterator position and config, saved together.

Layout: `<workdir>/checkpoints/<step>/{state,data,config}`. `state` is the `TrainState`
(step, params, optimizer state); `data` the JSON state of the input iterator; `config` the run
config as JSON, so a rerun can refuse an incompatible config instead of mixing two models;
`data_fingerprint` what the training data was (`data/fingerprint.py`), so a rerun on edited
data is refused too (checkpoints written before it existed have none and are accepted);
`vocabulary` the vocabulary's sha256; `model_source` the file and sha256 of a `--config.model`
factory's module, so that every mode that reads the run says when that file was edited since.
When to save is `save_policy.py`'s decision (every T minutes, §5.2, and/or every N steps); the
last K checkpoints are kept (orbax deletes only checkpoints it wrote). On resume, a checkpoint
whose files are damaged (`damage.py`) is moved (never deleted) to
`<workdir>/checkpoints_unreadable/` once an older one restores; a read that fails for a passing
reason (I/O error, memory) stops the run and moves nothing. Every process reads each candidate
and they agree on the outcome (`damage.agree`) before anything is decided; reads go through
orbax's handlers directly, which (unlike a CheckpointManager's restore) hold no cross-process
barrier a failed read would miss. Averaging the last N checkpoints lives in `averaging.py`.
"""

import contextlib
import errno
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import ml_collections
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from t2t_jax import config as config_lib
from t2t_jax.runtime import damage, resolution, save_failures
from t2t_jax.runtime.readable import CheckpointError, first_readable, refuse_foreign  # noqa: F401
from t2t_jax.runtime.save_failures import quiet_failed_save_reports  # noqa: F401  (as before)
from t2t_jax.storage import layout, paths
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.storage.workdir import write_failure
from t2t_jax.data import fingerprint as fingerprint_lib
from jax.experimental import multihost_utils

FINGERPRINT_ITEM = 'data_fingerprint'
VOCAB_ITEM = 'vocabulary'  # sha256 and size of the vocabulary, each side's (`vocab_record.py`)
# The file and sha256 of a `--config.model` factory's module (`variant.source_record`).
MODEL_ITEM = 'model_source'
# Where a fine-tuned run started (`training/init_from.py`): saved with each of its checkpoints.
INIT_ITEM = 'init_from'
# What averaging copies from the newest training checkpoint beside the config.
SETUP_ITEMS = (VOCAB_ITEM, MODEL_ITEM, FINGERPRINT_ITEM, INIT_ITEM)
# Where a run with --config.ema_decay keeps the moving average of its parameters inside the
# saved state (`training/ema.py`), which `--checkpoint=ema` reads.
EMA_PATH = ('opt_state', 'ema')
# A failed save's partial folder is removed, then watched until it has stayed away this long
# (`_remove_partial`), polled this often, for this long at most.
_PARTIAL_QUIET_S, _PARTIAL_POLL_S, _PARTIAL_WATCH_S = 2.0, 0.05, 10.0

# The keys whose change makes a checkpoint unusable, and their comparison (`resolution`).
RESUME_KEYS = resolution.RESUME_KEYS
incompatible_keys = resolution.incompatible_keys


def save_whole_arrays_on_cpu() -> bool:
  """On the CPU backend, makes orbax save each replicated array from one replica instead of
  slicing it among the replicas (its replica-parallel save, orbax's default off GPU).

  On CPU devices the replicas are copies in one host memory: there is no device-to-host
  transfer to share out, and each slice was an eager program, compiled once per array shape
  in every process (at 8 simulated devices, 56 compiles, 1.4 s of a tiny run's 8 s). The
  values written are the same; orbax's files now hold each array as one chunk
  (`write_shape`), as on a GPU, and checkpoints written in slices restore as before. Returns
  whether orbax's handler of jax.Array now saves whole arrays (False on other backends, or if
  orbax renamed the option: then it stays as orbax has it).
  """
  if jax.default_backend() != 'cpu':
    return False
  handler = ocp.type_handlers.get_type_handler(jax.Array)
  if not hasattr(handler, '_use_replica_parallel'):
    return False
  # The registered handler itself (registering another logs a warning in every run): the
  # same metadata store and options, one flag changed; no public option reaches it.
  handler._use_replica_parallel = False  # pylint: disable=protected-access
  return True


def read_json_item(item_dir: str) -> Any:
  """A JSON item of a checkpoint (e.g. `<step>/config`), read by its handler alone."""
  handler = ocp.JsonCheckpointHandler()
  try:
    return handler.restore(epath.Path(item_dir), args=ocp.args.JsonRestore())
  finally:
    handler.close()


def read_config_item(item_dir: str) -> Dict[str, Any]:
  """The saved run config; raises DamagedCheckpointError when it is not a JSON object
  (ForeignCheckpointError: the checkpoint is not one t2t_jax wrote)."""
  damage.check_ours(os.path.dirname(item_dir))
  config = read_json_item(item_dir)
  if not isinstance(config, dict):
    raise damage.DamagedCheckpointError(
        f'{item_dir} holds a {type(config).__name__}, not a config object')
  return config


def config_to_json(config: ml_collections.ConfigDict) -> Dict[str, Any]:
  """The config as plain JSON values (tuples become lists)."""
  return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.to_dict().items()}


class Checkpointer:
  """Saves and restores training checkpoints under `<workdir>/checkpoints`.

  Args:
    workdir: the run's directory.
    keep: how many of the latest checkpoints to keep.
    data_fingerprint: what the training data is (`data.fingerprint.compute`); saved with
      every checkpoint and compared by `check_compatible`. None: neither.
  """

  def __init__(self, workdir: str, keep: int = 20,
               data_fingerprint: Optional[Dict[str, Any]] = None):
    if keep < 1:
      raise ValueError(f'Checkpointer: keep={keep}; expected 1 or more checkpoints to keep')
    self.directory = layout.of(workdir).checkpoints
    self.data_fingerprint = data_fingerprint
    self.vocabulary: Optional[Dict[str, Any]] = None  # saved with every step once set
    self.model_source: Optional[Dict[str, Any]] = None  # likewise
    self.init_record: Optional[Dict[str, Any]] = None  # likewise, the start of a fine-tune
    self._damaged: Dict[int, str] = {}  # step -> reason, found (and agreed on) while reading
    self._pending: Optional[int] = None  # the step being saved in the background
    self._last_saved: Optional[int] = None  # the step of the latest save started
    self._failed: Optional[int] = None  # the step whose failed save was raised
    save_failures.quiet_failed_save_reports()
    save_whole_arrays_on_cpu()
    if paths.is_local(self.directory):  # a folder under a file, read-only: one line naming it
      workdir_lib.check_writable(os.path.dirname(self.directory))
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> List[int]:
    return sorted(self._manager.all_steps())

  def save(self, step: int, state, data_state: Dict[str, Any],
           config: ml_collections.ConfigDict) -> None:
    """Writes a checkpoint at `step` (asynchronously; `wait()` blocks until it is on disk).

    Raises:
      CheckpointError: this save, or the previous one still in the background, failed for
        want of space or on a read-only file system (`write_failure`); one line naming the
        step and the checkpoint that is intact.
    """
    if step in self._manager.all_steps():
      return
    self.wait()  # a failure of the previous save is that step's
    items = dict(state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
                 config=ocp.args.JsonSave(config_to_json(config)))
    if self.data_fingerprint is not None:
      items[FINGERPRINT_ITEM] = ocp.args.JsonSave(self.data_fingerprint)
    if self.vocabulary is not None:
      items[VOCAB_ITEM] = ocp.args.JsonSave(self.vocabulary)
    for name, value in ((MODEL_ITEM, self.model_source), (INIT_ITEM, self.init_record)):
      if value is not None:
        items[name] = ocp.args.JsonSave(value)
    with self._writing(step):
      self._manager.save(step, args=ocp.args.Composite(**items), force=True)
    self._pending = self._last_saved = step
    logging.info('checkpoint: saving step %d to %s', step, self.directory)

  def _step_dir(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def _name(self, step: int) -> str:
    return f'checkpoint {self._step_dir(step)}'

  def saved_config(self, step: Optional[int] = None) -> Dict[str, Any]:
    step = self.latest_step() if step is None else step
    return read_config_item(os.path.join(self._step_dir(step), 'config'))

  def saved_fingerprint(self, step: int, name: str = FINGERPRINT_ITEM) -> Optional[Any]:
    """The data fingerprint (or the JSON item `name`) saved with `step`; None for
    checkpoints written without one."""
    item = os.path.join(self._step_dir(step), name)
    return read_json_item(item) if epath.Path(item).is_dir() else None

  def saved_param_shapes(self, step: int) -> Any:
    """The `params` subtree of `step`'s state as orbax metadata (shapes; reads no arrays)."""
    handler = ocp.PyTreeCheckpointHandler()
    try:
      tree = handler.metadata(epath.Path(self._step_dir(step)) / 'state').tree
    finally:
      handler.close()
    return tree['params']

  def _read_setup(self, step: int) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    return self.saved_config(step), self.saved_fingerprint(step)

  def check_compatible(self, config: ml_collections.ConfigDict) -> None:
    """Refuses to resume from checkpoints of a different model or data setup.

    Compares the config (and the data fingerprint, if both sides have one) saved with the
    newest checkpoint whose config reads; newer ones with damaged files are noted, to be set
    aside by `restore_latest_good`.

    Raises:
      CheckpointError: naming every differing key with saved and current values, or the
        training data files that changed; or a config that could not be read for a passing
        reason.
    """
    steps = [s for s in reversed(self.all_steps()) if s not in self._damaged]
    refuse_foreign(self.directory, {f'step {s}': self._step_dir(s) for s in steps})
    setup, step, skipped = first_readable(steps, self._read_setup, self._name)
    self._damaged.update(skipped)
    if setup is None:
      return  # nothing readable to compare with: restore_latest_good says so
    refusal = self._refusal(config, step, *setup)
    # Each process hashed its own copy of the data: all stop if any of them refuses.
    combined, codes = damage.agree(damage.FAILED if refusal else damage.OK)
    if combined != damage.OK:
      others = ', '.join(str(i) for i, c in enumerate(codes) if c != damage.OK)
      raise CheckpointError(refusal or f'process(es) {others} refused to resume from '
                            f'{self.directory} (their log says why); nothing was changed.')

  def _refusal(self, config: ml_collections.ConfigDict, step: int, saved_config: Dict[str, Any],
               saved_fingerprint: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why this run must not resume from `step` (saved config and fingerprint), or None.
    Keys of the saved config this version lacks are ignored with a warning, as eval and
    decode ignore them (`config.from_json`)."""
    config_lib.warn_obsolete_keys(saved_config, self._name(step))
    has_fingerprints = self.data_fingerprint is not None and saved_fingerprint is not None
    diffs = incompatible_keys(saved_config, config, paths_by_content=has_fingerprints,
                              model_source=self.saved_fingerprint(step, MODEL_ITEM))
    if diffs:
      detail = '; '.join(f'{k}: checkpoint has {a!r}, config has {b!r}' for k, a, b in diffs)
      return (f'{self.directory} holds checkpoints (latest step {step}) of an incompatible '
              f'config ({detail}). Use another --workdir, or restore those values; nothing was '
              'changed.')
    resolution.warn_schedule_change(saved_config, config, step)
    if self.data_fingerprint is None:
      return None
    if saved_fingerprint is None:
      logging.info('checkpoint step %d was written without a data fingerprint; the training '
                   'data cannot be compared with it', step)
      return None
    refusal, notes = fingerprint_lib.compare(saved_fingerprint, self.data_fingerprint)
    for note in notes:
      logging.warning('%s (checkpoint step %d)', note, step)
    if refusal:
      advice = fingerprint_lib.folder_advice(saved_config, config)
      return (f'{self.directory} holds checkpoints (latest step {step}) trained on other data: '
              f'{refusal}. {advice}Restore those files, or train in another --workdir; nothing '
              'was changed.')
    return None

  def restore(self, abstract_state, step: Optional[int] = None):
    """(state, data_state) from `step` (default: the latest), placed like `abstract_state`.

    `abstract_state` is a tree of `jax.ShapeDtypeStruct` with shardings (see `abstract_like`).
    Each process reads on its own (no barrier), so a failure on one cannot strand the others.
    """
    step = self.latest_step() if step is None else step
    if step is None:
      raise CheckpointError(f'no checkpoint in {self.directory}')
    handler = ocp.StandardCheckpointHandler()
    try:
      state = handler.restore(epath.Path(self._step_dir(step)) / 'state',
                              args=ocp.args.StandardRestore(abstract_state))
    finally:
      handler.close()
    return state, read_json_item(os.path.join(self._step_dir(step), 'data'))

  def _read_step(self, abstract_state, step: int):
    self._read_setup(step), self.saved_fingerprint(step, VOCAB_ITEM)  # every item must read
    return self.restore(abstract_state, step)

  def restore_latest_good(self, abstract_state) -> Tuple[Any, Dict[str, Any], int]:
    """(state, data_state, step) of the newest checkpoint that restores.

    Newer checkpoints with damaged files (see `damage.is_damage`) are logged and moved, not
    deleted, to `<workdir>/checkpoints_unreadable/<step>-<time>`, so the resumed run saves
    those steps anew instead of skipping them as already saved.

    Raises:
      CheckpointError: a read failed for a passing reason (I/O error, memory: nothing is
        moved, rerun later); or no checkpoint restores (nothing is moved either).
    """
    steps = [s for s in reversed(self.all_steps()) if s not in self._damaged]
    restored, step, skipped = first_readable(
        steps, lambda s: self._read_step(abstract_state, s), self._name)
    self._damaged.update(skipped)
    if restored is None:
      raise CheckpointError(
          f'no checkpoint in {self.directory} restores (nothing was moved; move them away or '
          'use another --workdir to start afresh): ' + '; '.join(
              f'step {s}: {reason}' for s, reason in sorted(self._damaged.items())))
    newer = sorted(s for s in self._damaged if s > step)
    if newer:
      self._set_aside(newer)
    return restored[0], restored[1], step

  def _set_aside(self, steps: List[int]) -> None:
    aside = layout.of(os.path.dirname(self.directory)).unreadable
    if jax.process_index() == 0:
      for step in steps:
        target = os.path.join(aside, f'{step}-{int(time.time())}')
        paths.move(os.path.join(self.directory, str(step)), target)
        logging.warning('checkpoint: moved unreadable step %d to %s', step, target)
    multihost_utils.sync_global_devices('t2t_jax_checkpoint_set_aside')  # all see the move
    for step in steps:
      self._damaged.pop(step, None)
    self._manager.reload()

  @contextlib.contextmanager
  def _writing(self, step: Optional[int]):
    """Turns a `write_failure` of the save of `step` into one CheckpointError."""
    try:
      yield
    except Exception as e:  # noqa: BLE001  orbax and tensorstore raise many types
      failure = write_failure(e)
      if failure is None:
        raise
      if step is not None and step == self._failed:
        return  # the same failure again (orbax keeps two of them): already raised
      self._failed = step
      save_failures.FailedSaveReports.raised = True
      save_failures.quiet_abandoned_writes()
      workdir_lib.report_write_failure()
      reason, remedy = failure
      previous = max((s for s in self._manager.all_steps() if s != step), default=None)
      kept = ('nothing earlier was saved' if previous is None else
              f'the previous checkpoint (step {previous}) is intact')
      raise CheckpointError(
          f'cannot write checkpoint step {step} in {self.directory}: {reason}; {kept}; '
          f'{remedy} and rerun to {"start" if previous is None else "resume"}') from e

  def _remove_partial(self, step: Optional[int]) -> None:
    """Removes what the failed save of `step` made, orbax's `<step>.orbax-checkpoint-tmp*`
    folder, which a rerun would find beside the checkpoints. Best effort: a read-only file
    system keeps it (the one line said why). Watched until it has stayed away for
    `_PARTIAL_QUIET_S`: writes of that save that orbax abandoned go on in tensorstore's own
    threads after orbax has closed, and one of them, the sharding metadata's commit, makes the
    folder anew (`state.orbax-checkpoint-tmp/_sharding.__lock`): in 72 full-disk runs, 8 at a
    time on 2 cores, it came back in every one, up to 0.64 s after the first removal."""
    if step is None or jax.process_index() != 0:
      return
    start = time.monotonic()
    gone_since = None
    while True:
      now = time.monotonic()
      left = list(epath.Path(self.directory).glob(f'{step}.orbax-checkpoint-tmp*'))
      for partial in left:
        try:
          partial.rmtree()
        except FileNotFoundError:
          pass
        except OSError as e:
          if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return  # it cannot be removed; trying again would not change that
      gone_since = None if left else (now if gone_since is None else gone_since)
      if (gone_since is not None and now - gone_since >= _PARTIAL_QUIET_S
          or now - start >= _PARTIAL_WATCH_S):
        return
      time.sleep(_PARTIAL_POLL_S)

  def check_background(self) -> None:
    """Raises the failure of the save in the background as soon as it has ended
    (CheckpointError: as `save`), so that training stops at the failed save rather than at
    the next one; a no-op while it runs. One process only: processes see their saves end at
    different steps, and every process must stop at the same one (there, the next `save`
    or `close` raises it)."""
    if self._pending is None or jax.process_count() > 1:
      return
    if not self._manager.is_saving_in_progress():
      self.wait()

  def wait(self) -> None:
    """Blocks until the save in the background is on disk (CheckpointError: as `save`)."""
    step, self._pending = self._pending, None
    with self._writing(self._last_saved if step is None else step):
      self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for the last save (CheckpointError: as `save`) and closes the manager."""
    try:
      self.wait()
    finally:
      # orbax keeps a second error of a failed save (the items' own, beside the checkpoint
      # metadata's) and raises it here; raised once (`_writing`).
      try:
        with self._writing(self._last_saved):
          self._manager.close()
      finally:  # only now: the failed save's other writes may run until orbax is closed
        self._remove_partial(self._failed)


def abstract_like(tree) -> Any:
  """Shape/dtype/sharding skeleton of a tree of arrays, for restoring into the same layout."""
  return jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, tree)
