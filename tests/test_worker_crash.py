"""tests/worker_crash.py: a test whose pytest-xdist worker dies runs once more on a fresh
worker; a second crash, or an ordinary failure, fails the run as before."""

import os
import subprocess
import sys

from conftest import ROOT

_CONFTEST = f"""
import sys
sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
import worker_crash

def pytest_configure(config):
  worker_crash.register(config)
"""

# Crashes its worker (SIGSEGV, as XLA's runtime did on CI) while CRASHES_LEFT's file holds a
# positive number, one crash per run of the test.
_TESTS = """
import os
import signal

def test_crashes_while_told_to():
  path = os.path.join(os.path.dirname(__file__), 'CRASHES_LEFT')
  left = int(open(path).read())
  if left > 0:
    open(path, 'w').write(str(left - 1))
    os.kill(os.getpid(), signal.SIGSEGV)

def test_ordinary(request):
  assert os.environ.get('ORDINARY_FAILS') != '1'
"""


def _run(tmp_path, crashes, ordinary_fails=False):
  (tmp_path / 'pytest.ini').write_text('[pytest]\n')
  (tmp_path / 'conftest.py').write_text(_CONFTEST)
  (tmp_path / 'test_crash.py').write_text(_TESTS)
  (tmp_path / 'CRASHES_LEFT').write_text(str(crashes))
  env = dict(os.environ, ORDINARY_FAILS='1' if ordinary_fails else '0')
  return subprocess.run(
      [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-n', '2',
       '-p', 'no:faulthandler', str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
      text=True, timeout=120)


def test_a_crash_reruns_the_test_once_and_says_so(tmp_path):
  run = _run(tmp_path, crashes=1)
  assert run.returncode == 0, run.stdout[-3000:]
  assert '2 passed, 1 rerun' in run.stdout, run.stdout[-3000:]
  assert 'crashed running test_crash.py::test_crashes_while_told_to; it runs again' in run.stdout
  assert (tmp_path / 'CRASHES_LEFT').read_text() == '0'


def test_a_second_crash_of_the_same_test_fails_the_run(tmp_path):
  run = _run(tmp_path, crashes=2)
  assert run.returncode == 1, run.stdout[-3000:]
  assert '1 failed, 1 passed, 1 rerun' in run.stdout, run.stdout[-3000:]
  assert 'crashed running test_crash.py::test_crashes_while_told_to again: a failure' in (
      run.stdout)


def test_an_ordinary_failure_is_not_rerun(tmp_path):
  run = _run(tmp_path, crashes=0, ordinary_fails=True)
  assert run.returncode == 1, run.stdout[-3000:]
  assert '1 failed, 1 passed in' in run.stdout, run.stdout[-3000:]
  assert 'rerun' not in run.stdout and 'crashed' not in run.stdout
