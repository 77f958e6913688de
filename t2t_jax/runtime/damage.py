"""Is a checkpoint that failed to read damaged, or did the read itself fail?

Only damaged files justify falling back to an older checkpoint (and, in training, moving the
damaged one to `checkpoints_unreadable/`). A read that failed for a passing reason (an I/O
error, a full disk, no memory) must fail loudly and change nothing: the same checkpoint reads
fine once the cause is gone. `is_damage` draws that line from the exception; `agree` makes
every process of a multi-process run take the same decision.
"""

import errno
import json
import logging
import re
import sys
from typing import List, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.experimental import multihost_utils

# The outcome of one process reading one checkpoint; a larger value wins when combined.
OK, DAMAGED, FAILED = 0, 1, 2

# tensorstore raises ValueError('<absl status code>: ...'). These codes say the bytes on disk
# are wrong or missing; its OS errors come as UNKNOWN (EIO), RESOURCE_EXHAUSTED (ENOSPC,
# ENOMEM, EMFILE) or PERMISSION_DENIED, or, in older versions, as FAILED_PRECONDITION with
# "[OS error: ...]" in the text.
_DAMAGE_CODES = ('OUT_OF_RANGE', 'DATA_LOSS', 'NOT_FOUND', 'FAILED_PRECONDITION')
_STATUS = re.compile(r'^([A-Z_]+): ')
_OS_ERROR = re.compile(r'\[OS error')
# What follows tensorstore's messages (and orbax's wrapper of them): the store's spec, dozens of
# lines that say nothing about the failure.
_SPEC = re.compile(r'\s*(\[tensorstore_spec|See full TensorStore details:).*', re.S)


class DamagedCheckpointError(ValueError):
  """A checkpoint file reads but holds something impossible (e.g. a config that is not an
  object); raised by our own checks, classified as damage."""


class VanishedCheckpointError(DamagedCheckpointError):
  """A checkpoint deleted while it was read: a live training run on the same workdir keeps
  only its last `keep_checkpoints` (readers take no lock). Skipped like damage, but named as
  what it is; nothing is moved."""


class ForeignCheckpointError(DamagedCheckpointError):
  """A checkpoint folder that t2t_jax did not write (none of `OUR_ITEMS`: another program's
  orbax checkpoint). Skipped like damage, but named as what it is; nothing is moved."""


# Items every checkpoint t2t_jax writes has one of: a training checkpoint `config` and `data`,
# an average `config` and `averaging`, a best one `config` and `best`.
OUR_ITEMS = ('config', 'data', 'averaging', 'best')


def foreign(path: str) -> Optional[str]:
  """Why the checkpoint folder `path` is not one t2t_jax wrote, or None (ours, or not there):
  it holds none of `OUR_ITEMS`."""
  from etils import epath  # pylint: disable=import-outside-toplevel
  folder = epath.Path(path)
  try:
    if not folder.is_dir() or any((folder / item).exists() for item in OUR_ITEMS):
      return None
    items = sorted(child.name for child in folder.iterdir())
  except OSError:
    return None  # the read that follows says what is wrong
  return (f'is not a t2t_jax checkpoint (it holds {", ".join(items) or "nothing"}; t2t_jax '
          'writes config, data and state): written by another program?')


def check_ours(path: str) -> None:
  """Raises ForeignCheckpointError when `foreign(path)` says why."""
  reason = foreign(path)
  if reason:
    raise ForeignCheckpointError(reason)


def is_damage(error: BaseException) -> bool:
  """True when `error`, raised while reading a checkpoint, means its files are damaged.

  Observed with orbax-checkpoint 0.12.8 and tensorstore 0.1.86, garbling a saved checkpoint
  (and injecting errno values into its reads with an LD_PRELOAD shim):

  Damaged (True):
    - array files truncated or overwritten with junk: ValueError 'OUT_OF_RANGE: ... Requested
      byte range [0, 434) is not valid for value of size 7'.
    - array bytes flipped, `manifest.ocdbt` junk: ValueError 'DATA_LOSS: ... CRC-32C checksum
      verification failed' / '... Error decoding manifest'.
    - array files or the manifest deleted (or a directory in their place): 'NOT_FOUND: ...'.
    - `state/_sharding` junk: ValueError 'FAILED_PRECONDITION: ... Invalid JSON'.
    - garbled JSON files (`state/_METADATA`, `state/array_metadatas/*`, `config`, `data`,
      `data_fingerprint`): json.JSONDecodeError; binary junk in them: UnicodeDecodeError.
    - a missing item directory or `_METADATA`: FileNotFoundError; through a CheckpointManager,
      KeyError('Item "state" was not found in the checkpoint...').
    - DamagedCheckpointError from our own checks.
  Not damaged (False; nothing is moved, the caller fails loudly):
    - OSError other than ENOENT from Python reads: EIO, ENOSPC, ENOMEM, EACCES, EMFILE, ...
    - the same errnos inside tensorstore: ValueError 'UNKNOWN: ... Input/output error',
      'RESOURCE_EXHAUSTED: ... No space left on device' (also ENOMEM, EMFILE),
      'PERMISSION_DENIED: ...', and any status text carrying '[OS error: ...]'.
    - MemoryError; jax runtime errors (e.g. XLA RESOURCE_EXHAUSTED placing arrays on devices).
    - anything else, e.g. a state tree that no longer matches the code (a deleted
      `state/_METADATA` read through a CheckpointManager looks like this too: a pytree
      structure ValueError), so an unknown failure never costs a checkpoint.
  A garbled `_CHECKPOINT_METADATA` raises nothing: orbax logs an error and the step restores.
  Wrappers are judged by their cause (`cause`).
  """
  error = cause(error)
  if isinstance(error, DamagedCheckpointError):
    return True
  if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
    return True
  if isinstance(error, OSError):
    return error.errno == errno.ENOENT or (
        error.errno is None and isinstance(error, FileNotFoundError))
  if isinstance(error, KeyError):
    return 'was not found in the checkpoint' in str(error)
  if type(error) is ValueError:  # tensorstore's exception type; subclasses are not its
    text = str(error)
    status = _STATUS.match(text)
    return bool(status) and status.group(1) in _DAMAGE_CODES and not _OS_ERROR.search(text)
  return False


def is_missing_file(error: BaseException) -> bool:
  """Whether `error` (a checkpoint read) says a file or item of the checkpoint is missing, as
  it does while the checkpoint is being deleted: FileNotFoundError, tensorstore's NOT_FOUND,
  orbax's KeyError for an item that is not there."""
  error = cause(error)
  if isinstance(error, OSError):
    return error.errno == errno.ENOENT or (
        error.errno is None and isinstance(error, FileNotFoundError))
  if isinstance(error, KeyError):
    return 'was not found in the checkpoint' in str(error)
  if type(error) is ValueError:  # tensorstore's, as in is_damage
    status = _STATUS.match(str(error))
    return bool(status) and status.group(1) == 'NOT_FOUND'
  return False


def _is_wrapper(error: BaseException) -> bool:
  """Whether `error` only wraps its `__cause__`: our CheckpointError, or a bare Exception.

  Restoring onto devices (training: `Checkpointer.restore` with shardings), orbax re-raises a
  failed array read as `Exception('Encountered error while reading array index: ... See full
  TensorStore details: <the spec>')` from tensorstore's ValueError (orbax-checkpoint 0.12.8);
  restoring to numpy (eval, decode, average) raises the ValueError itself.
  """
  return error.__cause__ is not None and (type(error) is Exception
                                          or type(error).__name__ == 'CheckpointError')


def cause(error: BaseException) -> BaseException:
  """The error that `error` wraps (see `_is_wrapper`), itself when it wraps none."""
  while _is_wrapper(error):
    error = error.__cause__
  return error


def outcome(error: BaseException) -> int:
  """DAMAGED or FAILED for a read that raised `error`."""
  return DAMAGED if is_damage(error) else FAILED


def short_error(error: BaseException, limit: int = 240) -> str:
  """One line naming `error` (or what orbax's wrapper of it wraps, `cause`): its type and
  message, without tensorstore's spec dumps."""
  if type(error) is Exception:  # not CheckpointError: its own message says what was read
    error = cause(error)
  text = _SPEC.sub('', str(error))
  text = ' '.join(text.split())
  if len(text) > limit:
    status = _STATUS.match(text)
    head = status.group(0) if status else ''
    text = f'{head}...{text[-(limit - len(head)):]}'
  return f'{type(error).__name__}: {text}'


def combine(codes: Sequence[int]) -> int:
  """The decision for all processes from each one's outcome: OK only if every process read
  the checkpoint; FAILED if any failed for a passing reason (it must not be moved); else
  DAMAGED."""
  return int(max(codes))


def agree(code: int) -> Tuple[int, List[int]]:
  """(combined outcome, per-process outcomes) of this process's `code` and everyone else's.

  A collective in multi-process runs: every process must call it for every read attempt.
  """
  if jax.process_count() == 1:
    return code, [code]
  codes = [int(c) for c in np.asarray(
      multihost_utils.process_allgather(np.asarray(code, np.int32))).reshape(-1)]
  return combine(codes), codes


def _abandoned_read(error: Optional[BaseException]) -> bool:
  """Whether `error` is what one read of a failed restore leaves behind: a tensorstore read
  error ('<STATUS>: ...'), or orbax's wrapper (`_is_wrapper`) of one or of the GeneratorExit
  that closes a read coroutine nobody waits for any more."""
  if error is None:
    return False
  wrapped = cause(error)
  return (type(wrapped) is ValueError and bool(_STATUS.match(str(wrapped)))
          or wrapped is not error and isinstance(wrapped, GeneratorExit))


def _closed_loop_report(unraisable) -> bool:
  error = unraisable.exc_value
  return (isinstance(error, RuntimeError) and str(error) == 'Event loop is closed'
          or _abandoned_read(error))


class _UnretrievedReadErrors(logging.Filter):
  """Drops asyncio's '<Future, Task, _GatheringFuture> exception was never retrieved' ERROR
  records of tensorstore read errors: the other reads of a failed restore, completing after
  orbax stopped waiting."""

  def filter(self, record: logging.LogRecord) -> bool:
    error = record.exc_info[1] if record.exc_info else None
    return not ('exception was never retrieved' in record.getMessage().split('\n', 1)[0]
                and _abandoned_read(error))


def quiet_closed_loop_reports() -> None:
  """Drops the 'Event loop is closed' and abandoned read tracebacks a failed read leaves
  behind (and asyncio's '... exception was never retrieved' records of the same reads).

  When one array of a checkpoint fails to read, orbax stops waiting and closes its event loop
  while tensorstore still completes the other reads; each completion then fails to reach the
  closed loop, or (restoring onto devices) its read coroutine is closed unfinished, which
  orbax turns into an Exception, and is reported through `sys.unraisablehook` as a traceback
  (dozens on the console of a one-line warning). Those reports carry nothing: the failure
  itself was raised and handled. Every other report still goes to the previous hook.
  Idempotent; installed before reading, since the reports start while the failed read is
  still unwinding.
  """
  previous = sys.unraisablehook
  if getattr(previous, 'quiet_closed_loop', False):
    return

  def hook(unraisable):
    if not _closed_loop_report(unraisable):
      previous(unraisable)

  hook.quiet_closed_loop = True
  sys.unraisablehook = hook
  logging.getLogger('asyncio').addFilter(_UnretrievedReadErrors())
