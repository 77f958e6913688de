"""Which checkpoint eval, decode, attention and export read, and its parameters (§6.1).

Eval and decode prefer the newest averaged checkpoint (`averaging.py` writes them), then the
newest training checkpoint; a damaged one is skipped with a warning. The parameters are
restored without the optimizer or the model, as float32 on the default device.
"""

import dataclasses
import functools
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np
from absl import logging
from etils import epath

from t2t_jax.data import tokenizer, vocab_record
from t2t_jax.inference.averaging import (checkpoint_config, is_finalized, gone,
                                         checkpoint_name, params_metadata, restore_params,
                                         averaged_checkpoints, training_steps, unless_vanished,
                                         setup_items, PARAMS_PATH)
from t2t_jax.model import variant
from t2t_jax.runtime import checkpoint as checkpoint_lib, damage
from t2t_jax.runtime.checkpoint import CheckpointError, first_readable, read_json_item
from t2t_jax.storage import layout, paths


@dataclasses.dataclass(frozen=True)
class InferenceParams:
  """Parameters for eval/decode and what they came from.

  Attributes:
    params: a nested dict of float32 `jax.Array`s on the default device.
    config_json: the run config saved with the checkpoint (`config.from_json` reads it).
    description: e.g. 'averaged steps 600,700,800' or 'training checkpoint step 800'.
    step: the training step (for an averaged checkpoint, the last step averaged).
    path: the checkpoint's directory.
    vocabulary: the sha256 and size of the vocabulary it was trained with (None: a
      checkpoint from before they were saved).
    model_source: the file and sha256 of its `--config.model` factory's module
      (`variant.source_record`; None: the paper's model, or a checkpoint from before).
    data_fingerprint: what its training data was (`data/fingerprint.py`; None: a checkpoint
      from before it was saved, or an average from before averages carried it).
    init_record: where a fine-tuned run started (`training/init_from.py`; None: not one).
    label: what an evaluation's result file is named by (`evaluate.write_result`): the step,
      or 'best_<step>' / 'ema_<step>' for the best kept checkpoint and the moving average,
      whose step a training checkpoint or an average also has.
  """
  params: Any
  config_json: Dict[str, Any]
  description: str
  step: int
  path: str = ''
  vocabulary: Optional[Dict[str, Any]] = None
  model_source: Optional[Dict[str, Any]] = None
  data_fingerprint: Optional[Dict[str, Any]] = None
  init_record: Optional[Dict[str, Any]] = None
  label: str = ''


def latest_training_config(workdir: str) -> Dict[str, Any]:
  """The config JSON saved with the newest training checkpoint whose config reads (read-only;
  damaged ones are skipped with a warning)."""
  return latest_training_setup(workdir)[0]


def chosen_config(workdir: str, checkpoint: Optional[str] = None) -> Optional[Dict[str, Any]]:
  """The config JSON of the checkpoint `load_inference_params(workdir, checkpoint)` would
  read, without reading parameters (None when there is none, or it cannot be read: the load
  itself then says why)."""
  try:
    candidates = (_default_candidates(workdir) if checkpoint is None
                  else [_resolve(layout.of(workdir), checkpoint)])
    for path in candidates:
      try:
        return checkpoint_config(path)
      except (CheckpointError, OSError, ValueError):
        continue
  except (CheckpointError, OSError, ValueError):
    pass
  return None


def has_checkpoint(workdir: Optional[str]) -> bool:
  """Whether `workdir` holds a finalized training checkpoint (its inputs are then provenance:
  `resolution.resolve(recorded=True)`)."""
  try:
    return bool(workdir) and bool(training_steps(workdir))
  except (OSError, ValueError):
    return False


def remember_factory(workdir: Optional[str], typed: str = '') -> None:
  """Makes the `--config.model` factory file the run `workdir` was trained with loadable here
  from its newest checkpoint's record (`variant.remember`), should the file have moved or
  gone: a later mode or a resume needs only the workdir (`typed`: the command line's
  `--config.model`, as `variant.remember` takes it). Nothing for a run of the paper's
  model, a workdir without checkpoints, or records that do not read (the mode reading them
  says why)."""
  if not workdir:
    return
  try:
    steps = training_steps(workdir)
  except (OSError, ValueError):
    return
  for step in reversed(steps):
    item = os.path.join(layout.of(workdir).checkpoints, str(step), checkpoint_lib.MODEL_ITEM)
    try:
      if epath.Path(item).is_dir():
        variant.remember(read_json_item(item), typed)
      return
    except (OSError, ValueError, CheckpointError):
      continue


def latest_training_setup(workdir: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
  """(config JSON, its `checkpoint.SETUP_ITEMS` present) of the newest training checkpoint
  whose config reads, as `latest_training_config`."""
  source = layout.of(workdir).checkpoints
  steps = training_steps(workdir)
  if not steps:
    raise CheckpointError(f'no training checkpoint in {source}')

  def read(path):
    return checkpoint_config(path), setup_items(path)

  setup, _, skipped = first_readable(
      [os.path.join(source, str(s)) for s in reversed(steps)], unless_vanished(read),
      checkpoint_name)
  if setup is None:
    raise CheckpointError(f'no training checkpoint in {source} has a readable config: '
                          + '; '.join(f'{p}: {reason}' for p, reason in skipped))
  return setup


# Best checkpoints (`training/best.py` writes them): <workdir>/best/step_<step>, each with a
# `best` JSON item {'step', 'metric', 'value', 'metrics'}.
BEST_NAME = re.compile(r'step_(\d+)')
BEST_ITEM = 'best'
# `--checkpoint=ema` (the newest training checkpoint's) or `ema:STEP`: the moving average of
# the weights a run with --config.ema_decay keeps (`training/ema.py`).
EMA = 'ema'
# The provenance item of a model imported from transformers (`pretrained/import_mode.py`).
IMPORTED_ITEM = 'imported'
LOWER_IS_BETTER = {'loss': True, 'bleu': False}


def best_dir(workdir: str) -> str:
  return layout.of(workdir).best


def best_checkpoints(workdir: str) -> List[Tuple[int, Dict[str, Any], str]]:
  """[(step, its `best` record, path)] of the finalized best checkpoints of `workdir`, best
  first (by the metric each was kept by)."""
  folder = best_dir(workdir)
  if not epath.Path(folder).is_dir():
    return []
  found = []
  for child in epath.Path(folder).iterdir():
    match = BEST_NAME.fullmatch(child.name)
    if not match or not is_finalized(str(child)):
      continue
    try:
      record = read_json_item(str(child / BEST_ITEM))
    except Exception:  # noqa: BLE001  a damaged record: not a candidate (eval says so if named)
      logging.warning('%s: its %s record does not read; not counted among the best', child,
                      BEST_ITEM)
      continue
    found.append((int(match.group(1)), record, str(child)))
  return sorted(found, key=lambda f: rank(f[1]['metric'], f[1]['value'], f[0]))


def rank(metric: str, value: float, step: int) -> Tuple[float, int]:
  """Sort key, best first; a tie goes to the earlier step (it reached the value first)."""
  return (value if LOWER_IS_BETTER[metric] else -value, step)


def _default_candidates(workdir: str) -> List[str]:
  """Eval/decode's preference: the averaged checkpoints, newest first (highest last step,
  then largest N), then the training checkpoints, newest first."""
  source = layout.of(workdir).checkpoints
  return ([path for _, _, path in reversed(averaged_checkpoints(workdir))]
          + [os.path.join(source, str(s)) for s in reversed(training_steps(workdir))])


def _resolve(workdir: str, checkpoint: str) -> str:
  """The directory an explicit --checkpoint (a step, or a path) names."""
  source = layout.of(workdir).checkpoints
  available = training_steps(workdir)
  listing = (f'training steps available in {source}: '
             f'{", ".join(map(str, available)) if available else "none"}')
  if checkpoint == EMA or checkpoint.startswith(EMA + ':'):
    step = checkpoint.partition(':')[2] or (str(available[-1]) if available else '')
    if not step:
      raise CheckpointError(f'--checkpoint={checkpoint}: no training checkpoint in {source}')
    path = _resolve(workdir, step)
    try:
      params_metadata(path, checkpoint_lib.EMA_PATH)
    except CheckpointError:
      raise CheckpointError(
          f'--checkpoint={checkpoint}: {path} holds no moving average of the weights (the run '
          'was trained without --config.ema_decay); choose another --checkpoint') from None
    return path
  if checkpoint == 'best':
    best = best_checkpoints(workdir)
    if not best:
      raise CheckpointError(f'--checkpoint=best: no best checkpoint in {best_dir(workdir)} '
                            '(train with --config.keep_best=K and eval_every_steps > 0)')
    return best[0][2]
  if checkpoint.isdigit():
    if int(checkpoint) not in available:
      raise CheckpointError(f'no training checkpoint at step {checkpoint}; {listing}')
    return os.path.join(source, str(int(checkpoint)))
  # A path: as given, else relative to the workdir (e.g. 'averaged/step_800_last_5').
  path = next((paths.absolute(p) for p in (checkpoint, os.path.join(workdir, checkpoint))
               if epath.Path(p).is_dir()), None)
  if path is None or not is_finalized(path):
    raise CheckpointError(f'checkpoint {checkpoint!r} does not exist or is incomplete; '
                          f'{listing}; averaged: '
                          f'{[os.path.basename(a[2]) for a in averaged_checkpoints(workdir)]}')
  if not (epath.Path(path, 'averaging').is_dir() or (
      os.path.basename(path).isdigit() and epath.Path(path, 'state').is_dir())):
    raise CheckpointError(f'{path} is neither a training step directory (<step>/state) nor '
                          f'an averaged checkpoint (with an "averaging" entry)')
  return path


def _read_inference(path: str, ema: bool = False) -> InferenceParams:
  """Params (float32, on the default device), config and origin of the checkpoint `path`;
  `ema`: its moving average of the weights instead (`training/ema.py`)."""
  kind = ''
  if ema:
    step, kind = int(os.path.basename(path)), 'ema_'
    description = f'moving average (ema) of training checkpoint step {step}'
  elif epath.Path(path, BEST_ITEM).is_dir():
    record = read_json_item(os.path.join(path, BEST_ITEM))
    step, kind = int(record['step']), 'best_'
    of = ' of the moving average of the weights' if record.get('weights') == 'ema' else ''
    description = (f'best checkpoint step {step} (dev {record["metric"]} '
                   f'{record["value"]:.4g}{of})')
  elif epath.Path(path, IMPORTED_ITEM).is_dir():
    record = read_json_item(os.path.join(path, IMPORTED_ITEM))
    step = 0
    description = (f'imported {record["family"]} from {record["input"]} '
                   f'({os.path.basename(record["weights"])} sha256 {record["sha256"][:12]}...)')
  elif epath.Path(path, 'averaging').is_dir():
    steps = [int(s) for s in read_json_item(os.path.join(path, 'averaging'))['steps']]
    description, step = f'averaged steps {",".join(map(str, steps))}', steps[-1]
  else:
    step = int(os.path.basename(path))
    description = f'training checkpoint step {step}'
  damage.check_ours(path)  # another program's checkpoint is named as such, not as damaged
  at = checkpoint_lib.EMA_PATH if ema else PARAMS_PATH
  params = restore_params(path, params_metadata(path, at), at)
  params = jax.tree_util.tree_map(lambda x: jax.device_put(np.asarray(x, np.float32)), params)
  items = setup_items(path)
  return InferenceParams(params, checkpoint_config(path), description, step, path,
                         *(items.get(name) for name in checkpoint_lib.SETUP_ITEMS),
                         label=f'{kind}{step}')


def _warn_if_stale(workdir: str, inference: InferenceParams, path: str) -> None:
  """Says so when training checkpoints newer than the averaged one `path` exist."""
  newer = [s for s in training_steps(workdir) if s > inference.step]
  if newer and epath.Path(path, 'averaging').is_dir():
    logging.warning(
        'using %s (%s), but training checkpoints up to step %d are newer; refresh the average '
        'with: python main.py --mode=average --workdir=%s (or pick one with --checkpoint=%d)',
        os.path.relpath(path, workdir), inference.description, newer[-1], workdir, newer[-1])


def load_inference_params(workdir: str, checkpoint: Optional[str] = None,
                          choose: Tuple[str, str] = ('--checkpoint=STEP',
                                                     'leave --checkpoint out')
                          ) -> InferenceParams:
  """The parameters for eval/decode, restored without knowing the optimizer or the model.

  Args:
    workdir: the run's directory.
    checkpoint: None: the newest averaged checkpoint (highest last step, then largest N) if
      there is one, else the latest training checkpoint; one with damaged files is skipped
      with a one-line warning for the next in that order, and an average older than the
      newest training checkpoint is used with a warning naming the command that refreshes
      it. A step number as a string: that training checkpoint; or the path of an averaged or
      training step directory: exactly that one (damaged: CheckpointError). 'best': the best
      kept checkpoint (`training/best.py`); 'ema' or 'ema:STEP': the moving average of the
      weights saved with the newest (or that) training checkpoint.
    choose: how the caller's user names another checkpoint, and the default one (the flag
      they gave), for the advice when the one named is damaged.

  Returns:
    InferenceParams; `t2t_jax.config.from_json(result.config_json)` rebuilds the config.

  Raises:
    CheckpointError: no (readable) checkpoint, the requested one does not exist (available
      listed) or is damaged, or a read failed for a passing reason (I/O error, memory).
  """
  workdir = layout.of(workdir)
  for _ in range(_MAX_RELISTS):  # again when a live training run deleted what was listed
    candidates = _default_candidates(workdir) if checkpoint is None else [
        _resolve(workdir, checkpoint)]
    if not candidates:
      raise CheckpointError(f'no checkpoint in workdir {workdir}: looked in '
                            f'{workdir.checkpoints} and {workdir.averaged}')
    ema = checkpoint is not None and checkpoint.partition(':')[0] == EMA
    inference, path, skipped = first_readable(
        candidates, unless_vanished(functools.partial(_read_inference, ema=ema)),
        checkpoint_name, warn=checkpoint is None)
    if inference is not None or checkpoint is not None or not any(
        gone(p) for p, _ in skipped):
      break
  if inference is None and checkpoint is not None:
    steps = ', '.join(map(str, training_steps(workdir))) or 'none'
    what = ('was deleted while it was read (a live training run on this workdir keeps only '
            'its last keep_checkpoints)' if gone(candidates[0])
            else f'is damaged ({skipped[0][1]})')
    pick, default = choose
    raise CheckpointError(
        f'{checkpoint_name(candidates[0])} {what}; choose another with {pick} '
        f'(training steps: {steps}) or {default} to use the newest readable one')
  if inference is None:
    raise CheckpointError(f'no checkpoint in workdir {workdir} is readable: ' + '; '.join(
        f'{p}: {reason}' for p, reason in skipped))
  if checkpoint is None:
    _warn_if_stale(workdir, inference, path)
  _check_vocabulary(workdir, inference)
  logging.info('inference parameters: %s (%s)', inference.description, path)
  return inference


_MAX_RELISTS = 10


def check_built_from(config: Any, inference: InferenceParams, net: Any = None) -> None:
  """What every mode reading a checkpoint checks of the model before it builds it: a
  `--config.model` factory whose module file changed since the checkpoint recorded it gets a
  warning (the output may not be the trained model's); parameters that are not those of the
  model `config` builds now (`net`, None: `variant.from_config(config)`; a renamed module)
  are refused.

  Raises:
    CheckpointError: one line naming the checkpoint and the missing, unexpected or reshaped
      parameter paths.
  """
  name = checkpoint_name(inference.path)
  spec = config.model or '(the paper\'s model)'
  change = variant.source_change(inference.model_source, config.model)
  if change:
    logging.warning('%s was trained with --config.model=%s, whose %s: what it computes now '
                    'may not be the trained model', name, spec, change)
  mismatch = variant.parameter_mismatch(
      variant.from_config(config) if net is None else net, inference.params)
  if mismatch:
    raise CheckpointError(f'{name} does not hold the parameters of the model --config.model='
                          f'{spec} builds now ({mismatch}); was its source edited since '
                          'training? Restore it to use this checkpoint')


def _check_vocabulary(workdir: layout.Workdir, inference: InferenceParams) -> None:
  """Refuses a checkpoint trained with another vocabulary than the workdir's (each side's,
  with separate vocabularies: `_check_side`)."""
  _check_side(workdir, inference, inference.vocabulary, 'vocab_size')
  source = vocab_record.side_item(inference.vocabulary, 'source')
  if source is not None:  # the source side's, `vocab/source_spm.model`
    _check_side(workdir.source_side, inference, source, 'source_vocab_size')


def _check_side(workdir: layout.Workdir, inference: InferenceParams, saved: Any,
                size_key: str) -> None:
  """Refuses a checkpoint whose vocabulary `saved` (`vocab_record.side_item`; `size_key`: the
  config key of its size) is not `workdir.vocab`: blaming the checkpoint when the vocabulary
  is the one trained in this workdir (its record describes it) or the checkpoint lies outside
  it, else the vocabulary (replaced). A missing or damaged vocabulary is left to the mode's
  own load to report."""
  try:
    tok = tokenizer.Tokenizer(workdir.vocab) if epath.Path(workdir.vocab).is_file() else None
  except tokenizer.TokenizerError:
    return
  problem = tok and vocab_record.checkpoint_mismatch(
      saved, inference.config_json.get(size_key), tok)
  if not problem:
    return
  inside = paths.absolute(inference.path).startswith(workdir.root + os.sep)
  if vocab_record.describes(workdir, tok) or not inside:
    training = ', '.join(map(str, training_steps(workdir))) or 'none'
    raise CheckpointError(
        f'{checkpoint_name(inference.path)} was trained with another vocabulary than this '
        f'workdir\'s {workdir.vocab} ({problem}): it belongs to another run; use its own '
        f'--workdir, or one of this workdir\'s checkpoints (training steps: {training})')
  raise tokenizer.TokenizerError(
      f'{workdir.vocab} is not the vocabulary {checkpoint_name(inference.path)} was trained '
      f'with ({problem}): it was replaced; restore the original file from a copy, or train '
      'in a new --workdir')
