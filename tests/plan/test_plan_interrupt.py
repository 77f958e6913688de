"""Ctrl-C and SIGTERM stop `--mode=plan` within seconds, also during a compile of minutes
(issue 43 item 3.7: a SIGTERM waited more than 7 minutes for XLA to return).

The compile is faked by a native call that, like XLA's, neither returns nor lets Python run
a signal handler until it is done: glibc's pthread_mutex_timedlock on a mutex already held
goes back to waiting when a signal interrupts it.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, main_command_with

pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'),
                                reason='the fake compile is glibc pthread_mutex_timedlock')

_FAKE_COMPILE = '''
import ctypes, sys, time
from t2t_jax.plan import report, topology
libc = ctypes.CDLL(None)

class _Timespec(ctypes.Structure):
  _fields_ = [('tv_sec', ctypes.c_long), ('tv_nsec', ctypes.c_long)]

def compile_for_minutes(*args, **kwargs):
  mutex = ctypes.create_string_buffer(64)  # zeroed: a default mutex
  libc.pthread_mutex_lock(mutex)
  sys.stderr.write('compiling\\n')
  sys.stderr.flush()
  deadline = _Timespec(int(time.time()) + 60, 0)
  libc.pthread_mutex_timedlock(mutex, ctypes.byref(deadline))  # 60 s, signals or not
  raise AssertionError('the fake compile returned')

report.make_plan = compile_for_minutes
topology.check_compiler = lambda: None  # libtpu need not be installed
'''


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'SIGINT'])
def test_a_signal_during_a_long_compile_ends_the_plan_within_seconds(tmp_path, sig):
  output = tmp_path / 'plan.json'
  process = subprocess.Popen(
      main_command_with(_FAKE_COMPILE, '--mode=plan', '--topology=v5e:2x4',
                        f'--output={output}', f'--compilation_cache={tmp_path / "cache"}'),
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    lines = []
    for line in process.stderr:  # until the compile runs
      lines.append(line)
      if line == 'compiling\n':
        break
    assert lines and lines[-1] == 'compiling\n', ''.join(lines)[-3000:]
    time.sleep(0.5)  # well inside the native call
    sent = time.monotonic()
    process.send_signal(sig)
    try:
      _, stderr = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
      pytest.fail(f'{sig.name} was not acted on within 15 s of a compile')
    assert time.monotonic() - sent < 15
  finally:
    if process.poll() is None:
      process.kill()
      process.communicate()
  name = 'SIGTERM' if sig == signal.SIGTERM else 'SIGINT (Ctrl-C)'
  assert process.returncode == 130, stderr[-3000:]
  assert stderr.strip().splitlines()[-1] == (
      f'error: interrupted by {name}; what this command had not finished is not kept: run '
      'the same command again')
  assert 'Traceback' not in stderr
  assert not output.exists() and not os.path.exists(tmp_path / 'cache')
