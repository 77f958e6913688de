"""The first of several checkpoints (newest first) that reads on every process, skipping
damaged ones (`damage.is_damage`) and stopping at any other failure."""

from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import jax
from absl import logging

from t2t_jax.runtime import damage


class CheckpointError(RuntimeError):
  """A checkpoint is missing, unreadable or incompatible with the run's config."""


T = TypeVar('T')
C = TypeVar('C')


def first_readable(candidates: Sequence[C], read: Callable[[C], T], name: Callable[[C], str],
                   warn: bool = True) -> Tuple[Optional[T], Optional[C], List[Tuple[C, str]]]:
  """The first of `candidates` (newest first) that `read` reads on every process.

  A candidate whose files are damaged on any process (`damage.is_damage`) is skipped, with a
  one-line warning if `warn`. Every process must call this with the same candidates (one
  collective per candidate tried).

  Returns:
    (value, candidate, skipped): `skipped` lists (candidate, reason) of the damaged ones tried
    first; value and candidate are None when no candidate reads.

  Raises:
    CheckpointError: a read failed for another reason (I/O error, memory, ...) on some
      process; nothing is skipped, the caller moves nothing.
  """
  damage.quiet_closed_loop_reports()  # a failing read reports as it fails: filter before
  skipped = []
  for candidate in candidates:
    value, error, code = None, None, damage.OK
    try:
      value = read(candidate)
    except Exception as e:  # noqa: BLE001  classified below; orbax/tensorstore raise many
      error, code = e, damage.outcome(e)
    combined, codes = damage.agree(code)
    if combined == damage.OK:
      return value, candidate, skipped
    others = [i for i, c in enumerate(codes) if c == combined and i != jax.process_index()]
    reason = '; '.join(([damage.short_error(error)] if error is not None else []) + (
        [f'on process(es) {", ".join(map(str, others))}'] if others else []))
    if combined == damage.FAILED:
      raise CheckpointError(
          f'{name(candidate)} could not be read ({reason}), and that does not look like damaged '
          'files (an I/O error, a full disk, too little memory?), so nothing was skipped or '
          'moved. Fix the cause and rerun; if its files really are damaged, move it away.'
      ) from error
    if warn:  # a checkpoint deleted while it was read is not damaged: its reason says so
      gone = isinstance(error, (damage.VanishedCheckpointError, damage.ForeignCheckpointError))
      logging.warning('%s %s; skipping it', name(candidate),
                      error if gone else f'is damaged ({reason})')
    skipped.append((candidate, reason))
  return None, None, skipped


def refuse_foreign(directory: str, candidates: Dict[str, str]) -> None:
  """Raises CheckpointError when any of `candidates` ({name: checkpoint folder}) in
  `directory` is another program's (`damage.foreign`): not ours to resume from, nor to move
  aside as damaged."""
  foreign = [f'{name} {reason}' for name, path in candidates.items()
             if (reason := damage.foreign(path))]
  if foreign:
    raise CheckpointError(f'{directory} holds checkpoints t2t_jax did not write '
                          f'({"; ".join(foreign)}); use another --workdir; nothing was changed.')
