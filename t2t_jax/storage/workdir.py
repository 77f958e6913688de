"""The run directory: writability check and an exclusive lock held by the live run.

Local workdir: an `flock` on `<workdir>/.t2t_jax.lock`: the kernel releases it when the
holding process dies (even by SIGKILL), so a crashed run never leaves a stale lock behind,
while a second live run on the same workdir is refused with the holder's pid, host and start
time.

Remote workdir (gs://...; object stores have no locks): a heartbeat lease file
`<workdir>/.t2t_jax.lease` (`lease.py`). A crashed run's lease goes stale after
`lease.Lease.stale_s` (3 minutes by default) and is then taken over with a warning; until
then a restart is refused with the old owner named.
"""

import contextlib
import datetime
import errno
import fcntl
import os
import socket
import sys
import threading
from typing import Any, Iterator, Optional, Tuple

from absl import logging
from etils import epath

from t2t_jax.storage import lease as lease_lib
from t2t_jax.storage import layout, paths


class WorkdirError(RuntimeError):
  """The workdir cannot be used: not writable, or locked by another live run."""


# A full disk, a quota, a read-only file system: a save fails until the user acts, and says so
# in one line. Each with what the user can do about it.
_FULL = {errno.ENOSPC: 'free space', errno.EDQUOT: 'free space or raise the quota',
         errno.EROFS: 'make it writable'}


def write_failure(error: BaseException) -> Optional[Tuple[str, str]]:
  """(strerror, remedy) when `error` (or what it wraps) is a write refused for want of space
  or by a read-only file system, else None: an OSError with ENOSPC, EDQUOT or EROFS, or
  tensorstore's ValueError of one (observed, orbax-checkpoint 0.12.8 on a full tmpfs:
  'RESOURCE_EXHAUSTED: Error writing ... Failed to write 11782 bytes to file 27: No space
  left on device [os_error_code='28']')."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in _FULL:
      return os.strerror(error.errno), _FULL[error.errno]
    if type(error) is ValueError:  # tensorstore's
      for code, remedy in _FULL.items():
        if os.strerror(code) in str(error) or f"os_error_code='{code}'" in str(error):
          return os.strerror(code), remedy
    error = error.__cause__ or error.__context__
  return None


_reported = [0]  # write failures this process reported as one line


def write_failures_reported() -> int:
  """How many write failures this process has reported as one line so far."""
  return _reported[0]


def report_write_failure() -> None:
  """Counts a write failure about to be reported as one line. From then on the same
  condition's reports from elsewhere (a writer's thread, an atexit flush, a coroutine closed
  at exit: tensorboardX, orbax) are dropped: the one line said it all."""
  _reported[0] += 1
  if getattr(threading.excepthook, 'quiet_writes', False):
    return
  thread_hook, unraisable_hook = threading.excepthook, sys.unraisablehook

  def on_thread(args):
    if write_failure(args.exc_value) is None:
      thread_hook(args)

  def on_unraisable(unraisable):
    if write_failure(unraisable.exc_value) is None:
      unraisable_hook(unraisable)

  on_thread.quiet_writes = True
  threading.excepthook, sys.unraisablehook = on_thread, on_unraisable


@contextlib.contextmanager
def writing(path: str, then: str = '') -> Iterator[None]:
  """Turns a `write_failure` while writing `path` into one WorkdirError naming it, what the
  user can do and `then` (e.g. ' and rerun to resume'); other errors pass unchanged."""
  try:
    yield
  except Exception as e:  # noqa: BLE001  orbax and tensorstore wrap OSErrors in many types
    failure = write_failure(e)
    if failure is None:
      raise
    report_write_failure()
    raise WorkdirError(f'cannot write {path}: {failure[0]}; {failure[1]}{then}') from e


LOCK_NAME = layout.RUN_LOCK.name
LEASE_NAME = layout.RUN_LEASE.name


def broken_symlink(path: str) -> Optional[str]:
  """Why `path` cannot be reached through a symbolic link on the way to it (itself or a
  folder above it), naming that link and where it points; None when no link is broken.

  A dangling link or a loop neither exists nor can be created (`os.makedirs` says 'File
  exists'), so the mistake is named here instead. Local paths only.
  """
  if not paths.is_local(path):
    return None
  path = os.path.abspath(path)
  parts = path.split(os.sep)
  for i in range(2, len(parts) + 1):
    link = os.sep.join(parts[:i]) or os.sep
    if not os.path.islink(link):
      continue
    target = os.readlink(link)
    try:
      os.stat(link)
    except OSError as e:
      if e.errno == errno.ELOOP:
        return (f'{link} is a symbolic link loop ({link} -> {target} -> ... never reaches a '
                'file or folder); point it at a directory or remove it')
      if e.errno == errno.ENOENT:
        return (f'{link} is a symbolic link to {target}, which does not exist; create '
                f'{os.path.join(os.path.dirname(link), target)}, point the link at a '
                'directory or remove it')
  return None


MISSING, EMPTY = 'missing', 'empty'


def new_state(workdir: str) -> Optional[str]:
  """MISSING or EMPTY when a run in `workdir` starts from nothing, else None."""
  path = epath.Path(paths.absolute(workdir))
  if not path.exists():
    return MISSING
  return EMPTY if path.is_dir() and next(iter(path.iterdir()), None) is None else None


def clear_refused(workdir: str, was: str) -> list:
  """Empties `workdir`, which was MISSING or EMPTY (`new_state`) before a run that was
  refused before its first step wrote into it (prepared data, a vocabulary, the lock), and
  removes it if it `was` MISSING: a new workdir is left as it was found, so that the
  corrected command starts as the first would have. Returns the names removed; one that
  cannot be removed is left, and named in a warning."""
  removed, folder = [], epath.Path(paths.absolute(workdir))
  for child in sorted(folder.iterdir(), key=lambda p: p.name):
    is_dir = child.is_dir()
    try:
      if is_dir:
        child.rmtree()
      else:
        child.unlink()
      removed.append(child.name + ('/' if is_dir else ''))
    except OSError as e:
      logging.warning('could not remove %s after the refused run: %s', child, e)
  if was == MISSING:
    try:
      folder.rmdir()
    except OSError:
      pass  # not empty after all (a file that would not go, named above)
  return removed


def check_writable(workdir: str, create: bool = True) -> str:
  """Creates `workdir` if needed and proves it is writable; returns its absolute path.

  With create=False a missing `workdir` is left missing and passes (the mode that reads it
  says what it lacks); an existing one must be writable. A broken symbolic link on the way
  (`broken_symlink`) is refused, with create=False too.
  """
  workdir = paths.absolute(workdir)
  broken = broken_symlink(workdir)
  if broken:
    raise WorkdirError(f'workdir {workdir}: {broken}')
  if not create and not epath.Path(workdir).exists():
    return workdir
  try:
    paths.makedirs(workdir)
    probe = epath.Path(workdir) / f'.write_test.{socket.gethostname()}.{os.getpid()}'
    try:
      probe.write_text('ok')
    finally:  # a full disk creates the file, then refuses its bytes: leave nothing behind
      try:
        probe.unlink()
      except OSError:
        pass
  except OSError as e:
    raise WorkdirError(f'workdir {workdir} is not writable: {e.strerror or e}') from e
  return workdir


class _Flock:
  """The local lock (see the module doc)."""

  def __init__(self, path: str):
    self.path = path
    self._fd = None

  def acquire(self) -> None:
    try:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    except IsADirectoryError:
      raise WorkdirError(f'{self.path} is a directory; expected the run\'s lock file (no run '
                         'makes a folder there): remove it') from None
    except OSError as e:
      raise WorkdirError(f'cannot open the run\'s lock file {self.path}: {e.strerror or e}; '
                         'make it readable and writable or use another --workdir') from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.read(fd, 4096).decode('utf-8', 'replace').strip() or 'unknown process'
      os.close(fd)
      raise WorkdirError(f'{os.path.dirname(self.path)} is in use by another live run '
                         f'({holder}; lock file {self.path}). Wait for it to finish or use '
                         'another --workdir.') from None
    started = datetime.datetime.now().isoformat(timespec='seconds')
    os.ftruncate(fd, 0)
    os.write(fd, f'pid {os.getpid()} on {socket.gethostname()} since {started}\n'.encode())
    self._fd = fd

  def release(self) -> None:
    if self._fd is not None:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None


class WorkdirLock:
  """Exclusive lock on a workdir for the duration of a run (use as a context manager).

  `lease_options` (heartbeat_s, stale_s, settle_s) tune the lease of a remote workdir.
  """

  def __init__(self, workdir: str, **lease_options: Any):
    workdir = paths.absolute(workdir)
    if paths.is_local(workdir):
      self.path = layout.of(workdir).lock
      self._impl = _Flock(self.path)
    else:
      self.path = layout.of(workdir).lease
      self._impl = lease_lib.Lease(self.path, **lease_options)

  def acquire(self) -> 'WorkdirLock':
    try:
      self._impl.acquire()
    except lease_lib.LeaseError as e:
      raise WorkdirError(f'{os.path.dirname(self.path)}: {e}. Wait for it to finish or use '
                         'another --workdir.') from None
    return self

  def release(self) -> None:
    self._impl.release()

  def __enter__(self) -> 'WorkdirLock':
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()
