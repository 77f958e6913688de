"""What a resume refuses before it restores (`train._Run._restore`): a latest checkpoint that
holds another model's parameters, or a vocabulary other than the one it was trained with.
Each is one line naming the checkpoint and what to do; nothing is changed."""

from t2t_jax.data import vocab_record
from t2t_jax.model import variant
from t2t_jax.runtime import checkpoint


def check_parameters(checkpointer: checkpoint.Checkpointer, params, model_spec: str) -> None:
  """Refuses, in one line, a latest checkpoint whose parameter paths or shapes are not those
  of `params` (the model `--config.model=model_spec` builds; its factory's source changed
  since): not a read failure blamed on its files. A checkpoint whose parameters cannot be
  listed is left to `restore_latest_good`."""
  step = checkpointer.latest_step()
  try:
    saved = checkpointer.saved_param_shapes(step)
  except Exception:  # noqa: BLE001  damaged files: restore_latest_good skips or says so
    return
  mismatch = variant.tree_mismatch(params, saved)
  if mismatch:
    raise checkpoint.CheckpointError(
        f'checkpoint step {step} of {checkpointer.directory} does not hold the '
        f'parameters of the model this config builds ({mismatch}); was '
        f'--config.model={model_spec or "(the paper)"} edited since? Restore its '
        'source, or train in another --workdir; nothing was changed.')


def check_vocabulary(checkpointer: checkpoint.Checkpointer, step: int, tokenizer) -> None:
  """Refuses a vocabulary (`tokenizer`'s files) other than the one checkpoint `step` was
  trained with (replaced by another of the same size that still parses); checkpoints from
  before the vocabulary was saved with them pass."""
  saved = checkpointer.saved_fingerprint(step, checkpoint.VOCAB_ITEM)
  mismatch = vocab_record.mismatched_file(saved, tokenizer)  # either side's
  if mismatch:
    raise checkpoint.CheckpointError(
        f'{mismatch[0]} is not the vocabulary checkpoint step {step} of '
        f'{checkpointer.directory} was trained with ({mismatch[1]}): it was replaced; '
        'restore the original file from a copy, or train in a new --workdir')
