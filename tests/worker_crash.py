"""A pytest-xdist worker that dies inside a test runs that test once more, on a fresh worker.

A worker process killed by a signal is not an assertion of ours that failed: the same test,
rerun in a new worker, tells the two apart. The one seen (CI, then 3 of 3 local fast-tier runs
on 2026-11-29) was a segfault in XLA:CPU's `deserialize_executable` once the worker held
64,826 memory-mapped regions, against the kernel's vm.max_map_count of 65,530. Each loaded
executable maps its code. conftest.py now drops jax's caches between test modules past
40,000 regions, which removed it (the crashed worker's 551 tests replayed in one process:
crash before, 552 passed after, peak 49,137 regions). This rerun stays as the net for the
next crash of that kind.
`WorkerCrashes` (registered by conftest.py) reschedules a crashed test once through
pytest-xdist's `pytest_handlecrashitem` hook; a second crash of the same test is reported as
the failure it is. A test that fails normally is never rerun. Every crash, rerun or not, is
named in the terminal summary, so a run that needed one says so.
"""

from typing import Dict, List

import pytest

RERUNS = 1  # per test: a test that crashes its worker twice fails


class WorkerCrashes:
  """The controller's record of crashed tests: nodeid -> crashes so far."""

  def __init__(self, reruns: int = RERUNS):
    self.reruns = reruns
    self.crashes: Dict[str, int] = {}
    self.lines: List[str] = []

  @pytest.hookimpl(optionalhook=True)
  def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
    count = self.crashes[crashitem] = self.crashes.get(crashitem, 0) + 1
    node = getattr(getattr(report, 'node', None), 'gateway', None)
    worker = node.id if node is not None else '?'
    if count <= self.reruns:
      sched.mark_test_pending(crashitem)
      report.outcome = 'rerun'  # not 'failed': the session's failure count stays as it was
      self.lines.append(f'worker {worker} crashed running {crashitem}; it runs again')
    else:
      self.lines.append(f'worker {worker} crashed running {crashitem} again: a failure')

  def pytest_report_teststatus(self, report: pytest.TestReport):
    if report.outcome == 'rerun':
      return 'rerun', 'R', ('RERUN', {'yellow': True})
    return None

  def pytest_terminal_summary(self, terminalreporter) -> None:
    if self.lines:
      terminalreporter.write_sep('=', 'workers that crashed (tests/worker_crash.py)')
      for line in self.lines:
        terminalreporter.write_line(line)


def register(config: pytest.Config) -> None:
  """Registers the record in the controller only: a worker cannot reschedule its own crash."""
  if not hasattr(config, 'workerinput'):
    config.pluginmanager.register(WorkerCrashes(), 'worker_crash')
