"""A broken optional install fails the test run instead of passing as skipped tests.

`requirements-dev.txt` installs every optional extra the tests use (README "Start"), so a test
skipped because one of them does not import (a wheel missing its shared library, a half-finished
install) hides a whole area (export parity, the notebook, the TPU plan) behind a green run.
`SkipGuard` (registered by conftest.py) collects the skips whose reason is such an install
problem and, at the end of the session, names each one and turns the exit status to 1.

A skip is an install problem when its reason is
- pytest.importorskip's "could not import 'MODULE': ..." (or "module 'MODULE' has __version__
  ..."), MODULE belonging to a package that requirements-dev.txt lists (directly or through a
  `-r` file); or
- a reason naming a requirements file that requirements-dev.txt includes (the suite's custom
  reasons say "pip install -r requirements-notebook.txt").
Every other skip stays a skip: no GPU, no C compiler, no `node`, a package outside
requirements-dev.txt.
"""

import importlib.metadata
import os
import re
from typing import Dict, List, Optional, Set, Tuple

import pytest

_MODULE = re.compile(r"(?:could not import|module) '([\w.]+)'")
_FILE = re.compile(r'requirements-[\w.-]+?\.txt')


def _norm(name: str) -> str:
  """A distribution or module name compared loosely: 'import-linter' == 'importlinter'."""
  return re.sub(r'[-_.]+', '', name).lower()


def read_requirements(path: str) -> Tuple[Set[str], Set[str]]:
  """(normalized package names, basenames of the `-r` files) of `path`, following `-r`."""
  packages: Set[str] = set()
  files: Set[str] = set()
  with open(path, encoding='utf-8') as f:
    for line in f:
      line = line.split('#', 1)[0].strip()
      if line.startswith(('-r ', '--requirement ')):
        name = line.split(None, 1)[1].strip()
        files.add(os.path.basename(name))
        more_packages, more_files = read_requirements(os.path.join(os.path.dirname(path), name))
        packages |= more_packages
        files |= more_files
      elif line and not line.startswith('-'):
        match = re.match(r'[A-Za-z0-9][A-Za-z0-9._-]*', line)
        if match:
          packages.add(_norm(match.group(0)))
  return packages, files


def _distributions_of(module: str) -> List[str]:
  """The installed distributions that provide top-level `module` (may be none)."""
  try:
    return importlib.metadata.packages_distributions().get(module, [])
  except Exception:  # noqa: BLE001 - a damaged environment: fall back to the module name
    return []


def install_problem(reason: str, packages: Set[str], files: Set[str]) -> Optional[str]:
  """The message for a skip `reason` that is a broken install of a required package (see the
  module doc), else None."""
  match = _MODULE.search(reason)
  if match:
    top = match.group(1).split('.')[0]
    names = {_norm(top)} | {_norm(d) for d in _distributions_of(top)}
    if names & packages:
      return (f'{top} is in requirements-dev.txt but failed to import: {reason.strip()}; '
              f'fix the install (pip install -r requirements-dev.txt)')
  match = _FILE.search(reason)
  if match and match.group(0) in files:
    return (f'skipped ({reason.strip()}), but requirements-dev.txt installs '
            f'{match.group(0)}; fix the install (pip install -r requirements-dev.txt)')
  return None


def _reason(report) -> str:
  longrepr = report.longrepr
  if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, 'Skipped: ...')
    longrepr = longrepr[2]
  return str(longrepr).removeprefix('Skipped: ')


class SkipGuard:
  """The pytest plugin (see the module doc); runs where the reports arrive (pytest-xdist's
  controller, or the single process)."""

  def __init__(self, requirements_path: str):
    self.packages, self.files = read_requirements(requirements_path)
    self.problems: Dict[str, List[str]] = {}  # message -> the tests (or modules) it skipped

  def _note(self, report) -> None:
    if report.skipped:
      message = install_problem(_reason(report), self.packages, self.files)
      if message:
        self.problems.setdefault(message, []).append(report.nodeid or str(report.fspath))

  def pytest_collectreport(self, report) -> None:  # module-level importorskip
    self._note(report)

  def pytest_runtest_logreport(self, report) -> None:
    self._note(report)

  @pytest.hookimpl(trylast=True)
  def pytest_sessionfinish(self, session) -> None:
    if self.problems and session.exitstatus in (pytest.ExitCode.OK,
                                                pytest.ExitCode.NO_TESTS_COLLECTED):
      session.exitstatus = pytest.ExitCode.TESTS_FAILED

  def pytest_terminal_summary(self, terminalreporter) -> None:
    if not self.problems:
      return
    terminalreporter.section('optional installs that failed (the run fails)', red=True)
    for message, where in self.problems.items():
      more = f' (and {len(where) - 1} more)' if len(where) > 1 else ''
      terminalreporter.line(f'{where[0]}{more}: {message}', red=True)


def register(config, requirements_path: str) -> None:
  """Adds a `SkipGuard` to `config` unless this is a pytest-xdist worker (the controller
  receives every worker's reports)."""
  if not hasattr(config, 'workerinput'):
    config.pluginmanager.register(SkipGuard(requirements_path), 'skip_guard')
