"""What the scripts a user runs share, so that each keeps the product's rules: a bad argument
stops the script in one line naming it, before any work, and nothing the script made is left
behind however it ends (Ctrl-C and SIGTERM included).

  * `at_least(n)`, `positive_int`: argparse types that refuse a number the script cannot
    honour (`--steps 0` never means "the default");
  * `unwritable(path, folder)`: why a file (or a folder) cannot be written at `path`, checked
    before any work; `writable_file` is that check as an argparse type;
  * `Stopped`, `stops_raise()`: SIGINT and SIGTERM raise `Stopped` in the main thread, so
    every `finally` runs; `deferred_stops()`: a block that a stop signal does not cut short
    (the signal takes effect when the block ends);
  * `git_worktree(repo, path, commit)`: a detached checkout of `commit` for a block, removed
    afterwards (its folder and git's record of it) whatever ended the block.

Nothing here imports jax: a script checks its arguments in the time Python takes to start.
"""

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
from typing import Callable, Iterator, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def at_least(minimum: int) -> Callable[[str], int]:
  """An argparse type: a whole number >= `minimum`, else the flag's one-line error."""
  def parse(text: str) -> int:
    try:
      value = int(text)
    except ValueError:
      value = None
    if value is None or value < minimum:
      raise argparse.ArgumentTypeError(f'expected a whole number of at least {minimum}, '
                                       f'not {text!r}')
    return value
  parse.__name__ = f'at_least_{minimum}'
  return parse


positive_int = at_least(1)


def unwritable(path: str, folder: bool = False) -> Optional[str]:
  """Why a file (`folder`: a folder) cannot be made or written at `path`, or None when it
  can: a folder where the file should be (or a file where the folder should be), a file on
  the way to it, or no write permission. Nothing is created."""
  path = os.path.abspath(path)
  if folder and os.path.exists(path) and not os.path.isdir(path):
    return 'is a file; expected a folder'
  if not folder and os.path.isdir(path):
    return 'is a folder; expected the path of a file'
  if os.path.exists(path):
    return None if os.access(path, os.W_OK | (os.X_OK if folder else 0)) else \
        'exists and is not writable'
  above = os.path.dirname(path)
  while not os.path.exists(above):
    above = os.path.dirname(above)
  if not os.path.isdir(above):
    return f'{above} is a file, not a folder'
  if not os.access(above, os.W_OK | os.X_OK):
    return f'the folder {above} is not writable'
  return None


def writable_file(text: str) -> str:
  """An argparse type: the path of a file that can be written (`unwritable`), as given."""
  problem = unwritable(text)
  if problem:
    raise argparse.ArgumentTypeError(f'{text}: {problem}')
  return text


class Stopped(Exception):
  """SIGINT or SIGTERM reached the script (under `stops_raise`)."""

  def __init__(self, signum: int):
    super().__init__(signal.Signals(signum).name)
    self.signum = signum

  @property
  def exit_code(self) -> int:
    """The shell's status for a process ended by the signal: 130 (SIGINT), 143 (SIGTERM)."""
    return 128 + self.signum


def _raise_stopped(signum, frame):  # pylint: disable=unused-argument
  raise Stopped(signum)


@contextlib.contextmanager
def stops_raise() -> Iterator[None]:
  """Within the block, SIGINT and SIGTERM raise `Stopped` (main thread only); the previous
  handlers are back afterwards."""
  previous = {s: signal.signal(s, _raise_stopped) for s in STOP_SIGNALS}
  try:
    yield
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)


@contextlib.contextmanager
def deferred_stops() -> Iterator[None]:
  """A block that SIGINT and SIGTERM do not interrupt: one that arrives meanwhile is held and
  handed to the handler in place before the block (`Stopped` under `stops_raise`) when the
  block ends. The processes the block starts have them blocked too (a Ctrl-C reaches the
  whole process group). For the few seconds a cleanup or a `git worktree add` takes: cut
  short, either would leave a half-made thing behind. Outside the main thread: no effect."""
  held = []
  try:
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum))
                for s in STOP_SIGNALS}
  except ValueError:  # not the main thread, which alone handles signals
    previous = None
  mask = (signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
          if previous is not None and hasattr(signal, 'pthread_sigmask') else None)
  try:
    yield
  finally:
    if mask is not None:
      signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one blocked meanwhile arrives: held
    for s, handler in (previous or {}).items():
      signal.signal(s, handler)
    if held:
      handler = previous[held[0]]
      if callable(handler):
        handler(held[0], None)
      elif handler == signal.SIG_DFL:
        signal.raise_signal(held[0])


class WorktreeError(RuntimeError):
  """`git worktree add` failed (its message is git's last line)."""


def _git(repo: str, *args: str) -> subprocess.CompletedProcess:
  return subprocess.run(['git', '-C', repo, *args], capture_output=True, text=True,
                        check=False)


def remove_worktree(repo: str, path: str) -> None:
  """The worktree at `path` gone: its folder and git's record of it (a locked or half-made
  one included: `git worktree prune` drops the record of a folder that is gone)."""
  with deferred_stops():
    _git(repo, 'worktree', 'remove', '--force', '--force', path)
    shutil.rmtree(path, ignore_errors=True)
    _git(repo, 'worktree', 'prune')


@contextlib.contextmanager
def git_worktree(repo: str, path: str, commit: str, keep: bool = False) -> Iterator[str]:
  """`commit` of the repository `repo` checked out, detached, at `path` (which must not
  exist) for the block; afterwards removed (`remove_worktree`) unless `keep`, however the
  block ended. Raises WorktreeError when git cannot add it (nothing is left)."""
  if os.path.lexists(path):
    raise WorktreeError(f'{path} exists: a worktree needs a new folder')
  try:
    with deferred_stops():
      added = _git(repo, 'worktree', 'add', '--detach', path, commit)
    if added.returncode:
      lines = (added.stderr or added.stdout).strip().splitlines() or ['no message']
      raise WorktreeError(f'git worktree add {path} {commit} failed: {lines[-1]}')
    yield path
  finally:
    if not keep:
      remove_worktree(repo, path)
