"""The run directory: writability check and an exclusive lock held by the live run.

The lock is an `flock` on `<workdir>/.t2t_jax.lock`: the kernel releases it when the holding
process dies (even by SIGKILL), so a crashed run never leaves a stale lock behind, while a
second live run on the same workdir is refused with the holder's pid, host and start time.
"""

import datetime
import fcntl
import os
import socket


class WorkdirError(RuntimeError):
  """The workdir cannot be used: not writable, or locked by another live run."""


LOCK_NAME = '.t2t_jax.lock'


def check_writable(workdir: str) -> str:
  """Creates `workdir` if needed and proves it is writable; returns its absolute path."""
  workdir = os.path.abspath(workdir)
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f'.write_test.{os.getpid()}')
    with open(probe, 'w') as f:
      f.write('ok')
    os.remove(probe)
  except OSError as e:
    raise WorkdirError(f'workdir {workdir} is not writable: {e.strerror or e}') from e
  return workdir


class WorkdirLock:
  """Exclusive lock on a workdir for the duration of a run (use as a context manager)."""

  def __init__(self, workdir: str):
    self.path = os.path.join(os.path.abspath(workdir), LOCK_NAME)
    self._fd = None

  def acquire(self) -> 'WorkdirLock':
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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
    return self

  def release(self) -> None:
    if self._fd is not None:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None

  def __enter__(self) -> 'WorkdirLock':
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()
