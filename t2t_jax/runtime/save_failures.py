"""Keeping a failed checkpoint save to one line: orbax reports the failure of a save in each
of its background threads, with a traceback each, and again as its coroutines are closed at
exit; `checkpoint.Checkpointer` raises it once (`workdir.write_failure`), these drop the rest.
"""

import logging as pylogging
import sys

from t2t_jax.storage.workdir import write_failure


class FailedSaveReports(pylogging.Filter):
  """Drops orbax's ERROR records (each with a traceback, one per background thread the
  failure passes through) of a save that failed for want of space: `Checkpointer` raises
  that failure as one line. Once it has, also the threads of that save still running when
  the run closes orbax: 'RuntimeError: cannot schedule new futures after shutdown'."""

  raised = False  # a Checkpointer raised a write failure in this process

  def filter(self, record: pylogging.LogRecord) -> bool:
    if '/orbax/' not in record.pathname or record.levelno < pylogging.ERROR:
      return True
    error = record.exc_info[1] if record.exc_info else None
    if error is None:
      return True
    closed = (type(error) is RuntimeError
              and str(error).startswith('cannot schedule new futures after'))
    # Writes of that save still running when its temporary folder is removed (`close`).
    removed = '.orbax-checkpoint-tmp' in str(error)
    return write_failure(error) is None and not ((closed or removed) and
                                                 FailedSaveReports.raised)


def quiet_abandoned_writes() -> None:
  """Drops the reports of orbax's write coroutines that a failed save leaves pending: at
  interpreter exit each is closed and prints 'Exception ignored in: <coroutine ...
  write_fragment>' with a traceback (observed, orbax-checkpoint 0.12.8, full tmpfs) after the
  one-line error. Every other report still goes to the previous hook. Idempotent."""
  previous = sys.unraisablehook
  if getattr(previous, 'quiet_abandoned_writes', False):
    return

  def hook(unraisable):
    code = getattr(unraisable.object, 'cr_code', None)
    if '/orbax/' in getattr(code, 'co_filename', ''):
      return
    previous(unraisable)

  hook.quiet_abandoned_writes = True
  sys.unraisablehook = hook


def quiet_failed_save_reports() -> None:
  """Installs `FailedSaveReports` on the absl logger orbax logs through (idempotent)."""
  absl_logger = pylogging.getLogger('absl')
  if not any(isinstance(f, FailedSaveReports) for f in absl_logger.filters):
    absl_logger.addFilter(FailedSaveReports())
