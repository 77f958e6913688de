"""Temporary folders a killed process leaves behind, and their removal by the next run.

A process killed by SIGKILL (or the OOM killer) cannot clean up. Its temporary folders carry
its pid in their names (`owned_temp_dir`), so the next run that makes one of the same kind
removes those whose process is gone (`remove_dead`); folders other programs name (TFDS's
`incomplete.*`) are removed once nothing in them changed for a long time (`remove_idle`).
Local folders only: pids are per host.
"""

import os
import shutil
import tempfile
import time
from typing import List, Optional


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # another user's process
  return True


def remove_dead(parent: str, stem: str, suffix: str = '') -> List[str]:
  """Removes the folders `<parent>/<stem><pid>-*<suffix>` whose process `pid` is not running
  on this host; returns their paths."""
  removed = []
  try:
    names = os.listdir(parent)
  except OSError:
    return removed
  for name in names:
    if not (name.startswith(stem) and name.endswith(suffix)):
      continue
    pid = name[len(stem):].split('-', 1)[0]
    path = os.path.join(parent, name)
    if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)) and os.path.isdir(
        path):
      shutil.rmtree(path, ignore_errors=True)
      removed.append(path)
  return removed


def owned_temp_dir(stem: str, parent: Optional[str] = None, suffix: str = '') -> str:
  """A new folder `<parent>/<stem><pid>-<random><suffix>` (parent: the system's temp folder),
  after removing the ones of this kind whose process died."""
  parent = parent or tempfile.gettempdir()
  remove_dead(parent, stem, suffix)
  return tempfile.mkdtemp(prefix=f'{stem}{os.getpid()}-', suffix=suffix, dir=parent)


def _newest_mtime(path: str) -> float:
  newest = os.path.getmtime(path)
  for folder, _, names in os.walk(path):
    for name in names:
      try:
        newest = max(newest, os.path.getmtime(os.path.join(folder, name)))
      except OSError:
        pass  # removed meanwhile
  return newest


def remove_idle(parent: str, prefix: str, idle_s: float = 3600.0) -> List[str]:
  """Removes the folders `<parent>/<prefix>*` in which nothing changed for `idle_s` seconds
  (a live writer changes its files all the time); returns their paths."""
  removed = []
  if not os.path.isdir(parent):
    return removed
  now = time.time()
  for name in os.listdir(parent):
    path = os.path.join(parent, name)
    if name.startswith(prefix) and os.path.isdir(path) and now - _newest_mtime(path) > idle_s:
      shutil.rmtree(path, ignore_errors=True)
      removed.append(path)
  return removed
