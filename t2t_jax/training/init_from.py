"""Fine-tuning: a run that starts from another run's parameters (`--config.init_from`; fairseq's
`--finetune-from-model`, t5x's `initial_checkpoint_path`, maxtext's `load_parameters_path`).

`init_from` names the source run: 'WORKDIR' (its newest averaged checkpoint, else its last
training checkpoint, as eval and decode choose), 'WORKDIR:STEP' or 'WORKDIR:best'
(`--checkpoint=best`). Only the parameters are taken: the optimizer state, the schedule and
the step start fresh. The source's vocabulary is taken as it is, byte for byte
(`vocab_record.given`; both sides' with `share_vocab=False`), never trained again. The source's model must be this run's: a model
key that differs is refused naming it, and so is a parameter missing, unexpected or of another
shape, by path. The start is recorded with every checkpoint (`checkpoint.INIT_ITEM`: the
source workdir, the checkpoint, its step and the sha256 of its parameters); once the run has
a checkpoint, rerunning the command resumes it and `init_from` is not read again.
"""

import hashlib
from typing import Any, Callable, Dict, Tuple

import jax
import ml_collections
import numpy as np
from absl import logging
from etils import epath

from t2t_jax import config as config_lib
from t2t_jax.inference import checkpoint_choice
from t2t_jax.model import variant
from t2t_jax.runtime import checkpoint, resolution
from t2t_jax.storage import layout


def params_sha256(params: Any) -> str:
  """The sha256 of a parameter tree's paths, shapes, dtypes and bytes, in tree order."""
  digest = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    value = np.asarray(leaf)
    digest.update(f'{jax.tree_util.keystr(path)}:{value.shape}:{value.dtype}'.encode())
    digest.update(np.ascontiguousarray(value).tobytes())
  return digest.hexdigest()


def load(config: ml_collections.ConfigDict, params: Any) -> Tuple[Any, Dict[str, Any]]:
  """(the source run's parameters placed as `params`, the record of where they came from).

  `params`: the fresh model's (their shardings and dtypes are kept).

  Raises:
    ConfigError: the source's model keys differ from this run's (named).
    CheckpointError: no such run or checkpoint; parameters that do not fit (by path).
  """
  spec = config.init_from
  workdir, which = config_lib.init_from_parts(spec)
  source = checkpoint_choice.load_inference_params(
      workdir, which, choose=(f'--config.init_from={workdir}:STEP',
                              f'give --config.init_from={workdir}'))
  saved = resolution.from_saved(source.config_json, f'checkpoint {source.path}')
  changed = resolution.differences(saved, config, config_lib.MODEL_KEYS, source.model_source)
  if changed:
    detail = '; '.join(f'{k}: {a!r} there, {b!r} here' for k, a, b in changed)
    raise config_lib.ConfigError(f'--config.init_from={spec}: {source.path} is another model '
                                 f'({detail}); a fine-tune keeps the model of its source')
  mismatch = variant.tree_mismatch(params, source.params)
  if mismatch:
    raise checkpoint.CheckpointError(f'--config.init_from={spec}: the parameters of '
                                     f'{source.path} do not fit this model ({mismatch})')
  placed = jax.tree_util.tree_map(
      lambda mine, theirs: jax.device_put(np.asarray(theirs, mine.dtype), mine.sharding),
      params, source.params)
  record = {'init_from': spec, 'workdir': workdir, 'checkpoint': source.path,
            'description': source.description, 'step': int(source.step),
            'params_sha256': params_sha256(source.params)}
  return placed, record


def check(config: ml_collections.ConfigDict) -> None:
  """Refuses, before any work, an `init_from` that names no run (no folder, no vocabulary)."""
  if not config.init_from:
    return
  workdir, _ = config_lib.init_from_parts(config.init_from)
  if not epath.Path(workdir).is_dir():
    raise config_lib.ConfigError(f'--config.init_from={config.init_from}: {workdir} is not a '
                                 'folder; expected the workdir of a trained run')
  if not epath.Path(layout.of(workdir).vocab).is_file():
    raise config_lib.ConfigError(f'--config.init_from={config.init_from}: {workdir} is not the '
                                 'workdir of a trained run (it has no vocab/spm.model); expected '
                                 'a run with checkpoints')
  source_vocab = layout.of(workdir).source_vocab
  if not (config.share_vocab and config.share_tokenizer) and not epath.Path(
      source_vocab).is_file():
    raise config_lib.ConfigError(f'--config.init_from={config.init_from}: {workdir} has no '
                                 f'source vocabulary ({source_vocab}) for share_vocab=False; a '
                                 'fine-tune keeps the vocabularies of its source')


def start(config: ml_collections.ConfigDict, state: Any, create: Callable[..., Any],
          checkpointer: Any) -> Any:
  """The state a run without checkpoints starts from: `state` (fresh), or with `init_from`
  `create(params=...)` of the source's parameters (`load`; the optimizer state is made from
  them, so a moving average of the weights starts at the source's), the record kept by
  `checkpointer` to be saved with every checkpoint."""
  if not config.init_from:
    return state
  params, checkpointer.init_record = load(config, state.params)
  logging.info('fine-tuning from %s (%s, parameters sha256 %s...)',
               checkpointer.init_record['checkpoint'], checkpointer.init_record['description'],
               checkpointer.init_record['params_sha256'][:12])
  return create(params=params)
