"""The `--output` of a mode (decode's file, attention's and export's folders, plan's JSON):
proved writable before any work, as `workdir.check_writable` proves a workdir.

The folder the output goes into (the nearest one that exists: decode and attention create the
missing ones) must be a folder, and a small probe file must be writable there: a read-only
file system, a full disk or a quota then stops the mode in one line naming the path, before
it loads a checkpoint or decodes anything, instead of at its end. A disk that fills up during
the work is still possible: each mode reports that write in one line (`workdir.writing`) and
removes what it made.
"""

import os
import tempfile

from t2t_jax.storage import paths
from t2t_jax.storage.workdir import WorkdirError, write_failure


class OutputError(WorkdirError):
  """An `--output` that cannot be written: its folder is a file, read-only or full."""


def _folder(path: str) -> str:
  """`path` if it is a folder (attention may be given an empty one), else the nearest
  existing path above it."""
  if os.path.isdir(path):
    return path
  folder = os.path.dirname(path)
  while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
    folder = os.path.dirname(folder)
  return folder


def _probe(folder: str) -> None:
  """Creates, writes and removes a small file in `folder` (OSError when it cannot)."""
  fd, probe = tempfile.mkstemp(dir=folder, prefix='.t2t_jax-write-test.')
  try:
    os.write(fd, b'ok')
  finally:
    os.close(fd)
    try:
      os.unlink(probe)
    except OSError:
      pass


def check_writable(output: str, flag: str = '--output') -> str:
  """Refuses an output whose folder is not a folder or cannot be written; returns the
  absolute path. A URI (gs://...) passes: object stores have no folders to check.

  Raises:
    OutputError: naming `flag`, the output and the folder, and what to do.
  """
  path = paths.absolute(output)
  if not paths.is_local(path):
    return path
  folder = _folder(path)
  if not os.path.isdir(folder):
    what = 'a file, not a folder' if os.path.isfile(folder) else 'not a folder'
    raise OutputError(f'{flag}={output}: {folder} is {what}; the output must go into a '
                      'folder')
  try:
    _probe(folder)
  except OSError as e:
    failure = write_failure(e)
    reason = f'{failure[0]}; {failure[1]}' if failure else (e.strerror or str(e))
    raise OutputError(f'{flag}={output}: cannot write into {folder}: {reason}') from None
  return path
