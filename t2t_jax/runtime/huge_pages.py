"""Transparent huge pages for the command's memory (Linux, glibc): its per-step temporaries
are then faulted in 2 MiB at a time, not 4 KiB.

XLA's CPU runtime allocates the temporaries of a compiled program afresh at every execution,
and glibc's malloc serves large blocks with fresh mappings, so every training step touches
its temporaries page by page for the first time: on the 2-core EPYC the embedded default's
training spent a third of its CPU time in the kernel (5 min 41 s of 16 min), about 80,000
minor page faults a second. glibc's `glibc.malloc.hugetlb=1` tunable makes malloc ask for
transparent huge pages: 47 times fewer faults, 1.48x the steps a second, the same floats
(docs/performance.md, "The embedded default in the same ten minutes").

glibc reads its tunables once, when the process starts, so `t2t-jax` / `python main.py`
re-executes itself once, first thing, with the tunable added to `GLIBC_TUNABLES`. Nothing
else changes: the same interpreter, arguments, environment and process id. It does not
when the environment already names `glibc.malloc.hugetlb` (the user's choice, or the
re-executed process), when the kernel's transparent huge pages are `never`, off Linux or
glibc, or with `T2T_HUGE_PAGES=0`. A library user sets the tunable themself.
"""

import os
import sys
from typing import Mapping, Optional, Sequence

SWITCH = 'T2T_HUGE_PAGES'
TUNABLE = 'glibc.malloc.hugetlb=1'
_THP = '/sys/kernel/mm/transparent_hugepage/enabled'


class HugePagesError(ValueError):
  """`T2T_HUGE_PAGES` set to something other than 0 or 1."""


def _thp_mode(path: str = _THP) -> Optional[str]:
  """The kernel's transparent huge page mode ('always', 'madvise' or 'never'), or None when
  it cannot be read."""
  try:
    with open(path, encoding='ascii') as f:
      text = f.read()
  except OSError:
    return None
  start, end = text.find('['), text.find(']')
  return text[start + 1:end] if 0 <= start < end else None


def wanted(environ: Mapping[str, str], platform: str = sys.platform,
           libc: Optional[str] = None, thp: Optional[str] = 'read') -> bool:
  """Whether the command should re-execute itself with `TUNABLE` (module docstring).
  `libc` (None: this process's) and `thp` (the kernel's mode; 'read': this machine's, None:
  unknown) are for tests.

  Raises HugePagesError for a `T2T_HUGE_PAGES` other than '0' or '1'."""
  switch = environ.get(SWITCH, '1')
  if switch not in ('0', '1'):
    raise HugePagesError(f'{SWITCH}={switch!r}: expected 1 (huge pages for malloc, the '
                         'default) or 0 (the process as started)')
  if switch == '0' or not platform.startswith('linux'):
    return False
  if 'glibc.malloc.hugetlb' in environ.get('GLIBC_TUNABLES', ''):
    return False
  if libc is None:
    try:
      libc = os.confstr('CS_GNU_LIBC_VERSION') or ''
    except (ValueError, OSError):
      libc = ''
  if not libc.startswith('glibc'):
    return False
  return (_thp_mode() if thp == 'read' else thp) in ('always', 'madvise')


def tunables(environ: Mapping[str, str]) -> str:
  """`environ`'s `GLIBC_TUNABLES` with `TUNABLE` appended (':'-separated)."""
  current = environ.get('GLIBC_TUNABLES')
  return f'{current}:{TUNABLE}' if current else TUNABLE


def reexec(argv: Optional[Sequence[str]] = None) -> None:
  """Replaces this process by itself with huge pages for malloc, when `wanted`; returns
  otherwise. `argv`: the interpreter's command line (default `sys.orig_argv`, which keeps
  `-m` and `-X` options)."""
  if not wanted(os.environ):
    return
  argv = list(sys.orig_argv if argv is None else argv)
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable, *argv[1:]],
            dict(os.environ, GLIBC_TUNABLES=tunables(os.environ)))
