"""Ctrl-C and SIGTERM stop `--mode=plan` within seconds, also during a compile of minutes
(issue 43 item 3.7: a SIGTERM waited more than 7 minutes for XLA to return).

The compile is faked (`fake_compiles`) by a native call that, like XLA's, neither returns nor
lets Python run a signal handler until it is done; in one case it also keeps the GIL, as
native code may (no thread of its process then runs Python, not even a signal handler). A
last test interrupts a real compile for a TPU slice.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from t2t_jax.plan import cache as cache_lib
from conftest import ROOT, main_command, main_command_with

pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'),
                                reason='the fake compile is glibc pthread_mutex_timedlock')

_FAKE_COMPILE = f'''
import sys
sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
import fake_compiles
from t2t_jax.plan import report, topology
report.make_plan = fake_compiles.{{}}
topology.check_compiler = lambda: None  # libtpu need not be installed
'''
_LAST_LINE = ('error: interrupted by {}; what this command had not finished is not kept: run '
              'the same command again')


def _gone(pid, within=5.0):
  """Whether process `pid` has ended (and been reaped) within `within` seconds."""
  deadline = time.monotonic() + within
  while time.monotonic() < deadline:
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return True
    time.sleep(0.1)
  return False


def _interrupt(process, sig, timeout):
  """Sends `sig`; (seconds until the process ended, its stderr)."""
  sent = time.monotonic()
  process.send_signal(sig)
  try:
    _, stderr = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    pytest.fail(f'{sig.name} was not acted on within {timeout} s of a compile')
  return time.monotonic() - sent, stderr


@pytest.mark.parametrize('fake', ['compile_for_minutes', 'compile_for_minutes_holding_the_gil'],
                         ids=['releasing the GIL', 'holding the GIL'])
@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'SIGINT'])
def test_a_signal_during_a_long_compile_ends_the_plan_within_seconds(tmp_path, sig, fake):
  output = tmp_path / 'plan.json'
  process = subprocess.Popen(
      main_command_with(_FAKE_COMPILE.format(fake), '--mode=plan', '--topology=v5e:2x4',
                        f'--output={output}', f'--compilation_cache={tmp_path / "cache"}'),
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    lines = []
    for line in process.stderr:  # until the compile runs
      lines.append(line)
      if line.startswith('compiling '):
        break
    assert lines and lines[-1].startswith('compiling '), ''.join(lines)[-3000:]
    compiler = int(lines[-1].split()[1])
    assert compiler != process.pid  # the compile runs in a child process (`interruptible`)
    time.sleep(0.5)  # well inside the native call
    seconds, stderr = _interrupt(process, sig, timeout=15)
    assert seconds < 5
  finally:
    if process.poll() is None:
      process.kill()
      process.communicate()
  name = 'SIGTERM' if sig == signal.SIGTERM else 'SIGINT (Ctrl-C)'
  assert process.returncode == 130, stderr[-3000:]
  assert stderr.strip().splitlines()[-1] == _LAST_LINE.format(name)
  assert 'Traceback' not in stderr
  assert not output.exists() and not os.path.exists(tmp_path / 'cache')
  assert _gone(compiler)  # no compile left running


@pytest.mark.slow
def test_ctrl_c_during_a_real_compile_for_a_tpu_slice_ends_the_plan_within_seconds(tmp_path):
  pytest.importorskip('libtpu')
  cache = tmp_path / 'cache'
  process = subprocess.Popen(
      main_command('--mode=plan', '--topology=v5e:2x2', f'--compilation_cache={cache}',
                   '--config.d_model=32', '--config.d_ff=64', '--config.num_heads=2',
                   '--config.num_layers=1', '--config.vocab_size=300'),
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    # The plan compiles for minutes; the first compile's record marks one under way.
    deadline = time.monotonic() + 120
    while not (cache / 'plan').is_dir() or not any((cache / 'plan').glob('*.json')):
      assert process.poll() is None and time.monotonic() < deadline, process.communicate()
      time.sleep(0.2)
    children = subprocess.run(['pgrep', '-P', str(process.pid)], capture_output=True,
                              text=True, check=False).stdout.split()
    time.sleep(1)
    seconds, stderr = _interrupt(process, signal.SIGINT, timeout=30)
  finally:
    if process.poll() is None:
      process.kill()
      process.communicate()
  assert process.returncode == 130, stderr[-3000:]
  assert seconds < 5
  assert stderr.strip().splitlines()[-1] == _LAST_LINE.format('SIGINT (Ctrl-C)')
  assert children and all(_gone(int(pid)) for pid in children)
  for record in (cache / 'plan').iterdir():  # whole records, no temporary files
    assert record.suffix == '.json' and not record.name.startswith('.'), record
    assert cache_lib.valid_record(json.loads(record.read_text()))


def test_a_signal_swallowed_during_the_plan_prints_and_writes_no_plan(tmp_path, monkeypatch):
  """Issue 51 c7: a SIGTERM whose KeyboardInterrupt a finalizer swallowed (it is recorded
  by `interruptible.raise_on_signals`) stops the plan before it is printed or written."""
  import io
  import ml_collections
  from t2t_jax.plan import mode, topology
  from t2t_jax.runtime import interruptible
  state = interruptible._Signals()  # pylint: disable=protected-access
  monkeypatch.setattr(interruptible, '_state', state)
  monkeypatch.setattr(topology, 'check_compiler', lambda: None)

  def plan_then_signal(*args, **kwargs):
    del args, kwargs
    state.signum = signal.SIGTERM  # received meanwhile, its KeyboardInterrupt dropped
    return {'fits': True}

  monkeypatch.setattr(interruptible, 'call', plan_then_signal)
  output, stream = tmp_path / 'plan.json', io.StringIO()
  with pytest.raises(KeyboardInterrupt, match='^SIGTERM$'):
    mode.run(ml_collections.ConfigDict(), 'v5e:2x4', str(output), stream=stream,
             compilation_cache='')
  assert stream.getvalue() == '' and not output.exists()
