"""The device check's processes: a stage child that cannot outlive its parent, and the
stages' shared scratch folder.

A stage runs in a process group of its own (so that a box, Ctrl-C or SIGTERM stops it and
every process it started, e.g. main.py, at once), and asks the kernel to kill it when its
parent dies (`die_with_parent`: the parent killed with SIGKILL, as the device tool does at
its limit, runs no cleanup of its own). main.py children of a stage ask the same through
`launcher()`: this file run as a script sets the signal and execs the command (a flag that
survives exec; a `preexec_fn` instead would fork a multi-threaded JAX process).
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from typing import Dict, Iterator, List, Optional, TextIO

PARENT_PID_VAR = 'DEVICE_CHECK_PARENT_PID'
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
  """This process gets SIGKILL when the process that started it ends (Linux; elsewhere a
  no-op). If that parent is already gone (it died before the call), exits at once."""
  if not sys.platform.startswith('linux'):
    return
  import ctypes  # pylint: disable=import-outside-toplevel
  ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
  expected = os.environ.get(PARENT_PID_VAR)
  if expected and os.getppid() != int(expected):
    os._exit(1)  # the parent died before the call: nobody waits for this stage


def run_stage(command: List[str], env: Dict[str, str], deadline: float,
              log: TextIO) -> Optional[str]:
  """Runs a stage child until it exits or `deadline` (+15 s to write what it has) passes.
  Returns a problem ('timeout after ...', 'exit code ...') or None. However this call ends
  (a timeout, a signal's exception), the child's process group is killed."""
  from benchmarks.shared import harness  # pylint: disable=import-outside-toplevel
  stage = command[command.index('--stage') + 1]
  log.write(f'\n===== {stage} ({harness.timestamp()}) =====\n')
  log.flush()
  timeout = max(5.0, deadline - harness.now() + 15)
  child = subprocess.Popen(command, env=dict(env, **{PARENT_PID_VAR: str(os.getpid())}),
                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
  try:
    code = child.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    return f'timeout after {timeout:.0f} s (killed)'
  finally:
    kill_group(child)
  return None if code == 0 else f'exit code {code}'


def launcher(command: List[str]) -> List[str]:
  """`command` run so that it dies with this process (see the module's docstring); its
  environment needs `PARENT_PID_VAR` set to this process's pid (`launcher_env`)."""
  return [sys.executable, os.path.abspath(__file__), *command]


def launcher_env(env: Dict[str, str]) -> Dict[str, str]:
  return dict(env, **{PARENT_PID_VAR: str(os.getpid())})


def kill_group(child: subprocess.Popen) -> None:
  """SIGKILL to the child's process group (what it started too), then reaps the child."""
  try:
    os.killpg(child.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass
  child.wait()


def log_tail(path: str, stage: str, chars: int = 2500) -> str:
  """The end of `stage`'s part of the children's log."""
  with open(path, encoding='utf-8', errors='replace') as f:
    text = f.read()
  return text[text.rfind(f'===== {stage} '):][-chars:]


@contextlib.contextmanager
def scratch_folder(path: Optional[str]) -> Iterator[str]:
  """`path` (made if missing), or a temporary folder removed afterwards."""
  if path:
    os.makedirs(path, exist_ok=True)
    yield path
    return
  with tempfile.TemporaryDirectory(prefix='device_check_') as scratch:
    yield scratch


if __name__ == '__main__':
  die_with_parent()
  os.execv(sys.argv[1], sys.argv[1:])
