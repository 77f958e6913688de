"""Averaging the best kept checkpoints instead of the last ones (`--mode=average` with
`--config.average_best=N`; fairseq's `average_checkpoints.py` over the best, t5x's
averaging of chosen steps).

The N best of `<workdir>/best` (`training/best.py` keeps the `keep_best` best periodic
evaluations by `best_metric`) are averaged exactly as the last N training checkpoints are
(`averaging.py`: the same checks of their trees, float32 sum, one division), into
`<workdir>/averaged/step_<last>_best_<N>`, where `<last>` is the newest of the steps averaged.
Eval and decode read it when `--checkpoint` names it; it is never chosen by default, so the
paper's average of the last N stays what a run reports.
"""

from typing import Any, Dict

import jax
import numpy as np

from t2t_jax.inference import averaging, checkpoint_choice
from t2t_jax.runtime.checkpoint import CheckpointError, first_readable
from t2t_jax.storage import layout


def average_best(workdir: str, num: int) -> averaging.AveragedCheckpoint:
  """Averages the parameters of the `num` best kept checkpoints of `workdir`.

  Raises:
    CheckpointError: `num < 1`; fewer than `num` best checkpoints kept; one of them is
      unreadable or another model; an existing average of the same name made from other
      steps (move it away to rebuild it).
  """
  workdir = layout.of(workdir)
  best = checkpoint_choice.best_checkpoints(workdir)
  if num >= 1 and not best:
    raise CheckpointError(
        f'--config.average_best={num}: the run kept no best checkpoints '
        f'({checkpoint_choice.best_dir(workdir)} has none); train with --config.keep_best >= '
        f'{num} to keep them, or average the last ones with --config.average_last={num}')
  if num < 1 or num > len(best):
    raise CheckpointError(
        f'--config.average_best={num}: expected 1 to {len(best)}, the best checkpoints kept in '
        f'{checkpoint_choice.best_dir(workdir)} (train with --config.keep_best >= {max(num, 1)})')
  chosen = sorted(best[:num])
  steps = tuple(step for step, _, _ in chosen)
  paths = {step: path for step, _, path in chosen}
  target = workdir.averaged_checkpoint(steps[-1], num, chosen='best')
  existing = averaging.existing_average(target, steps)
  if existing is not None:
    return existing
  metadata = {s: _read(paths[s], averaging.params_metadata) for s in steps}
  averaging.check_averageable(steps, metadata)
  total = None
  for step in steps:
    params = _read(paths[step], lambda p: averaging.restore_params(p, metadata[step]))
    params = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), params)
    total = params if total is None else jax.tree_util.tree_map(np.add, total, params)
  dtypes = jax.tree_util.tree_map(lambda m: np.dtype(m.dtype), metadata[steps[-1]])
  mean = jax.tree_util.tree_map(lambda acc, dtype: (acc / np.float32(num)).astype(dtype),
                                total, dtypes)
  newest = paths[steps[-1]]
  averaging.write_average(target, mean, averaging.checkpoint_config(newest), steps, num,
                          checkpoint_choice.best_dir(workdir), averaging.setup_items(newest))
  return averaging.AveragedCheckpoint(target, steps, mean)


def _read(path: str, read) -> Any:
  """`read(path)`, or one CheckpointError naming the best checkpoint that does not read."""
  value, _, skipped = first_readable([path], read, averaging.checkpoint_name, warn=False)
  if value is None:
    raise CheckpointError(f'best checkpoint {path} does not read ({skipped[0][1]}); average '
                          'fewer with --config.average_best, or move it away')
  return value


def describe(result: averaging.AveragedCheckpoint, records: Dict[int, Dict[str, Any]]) -> str:
  """'averaged best steps 800 (dev bleu 21.3), ... into PATH' for `--mode=average`."""
  parts = [f'{s} (dev {records[s]["metric"]} {records[s]["value"]:.4g})' for s in result.steps]
  return f'averaged best steps {", ".join(parts)} into {result.path}'
