"""t2t_jax.runtime.interruptible: work in a child process, a signal acted on at once."""

import json
import operator
import os
import subprocess
import sys
import threading

import pytest

import fake_compiles
from t2t_jax.runtime import interruptible


def test_the_result_and_the_exception_of_the_work_come_back():
  assert interruptible.call(operator.add, 1, 2) == 3
  assert interruptible.call(sorted, [3, 1, 2], reverse=True) == [3, 2, 1]
  with pytest.raises(ValueError, match='invalid literal') as raised:
    interruptible.call(int, 'bad')
  assert 'invalid literal' in str(raised.value.__cause__)  # the child's traceback


def test_a_child_that_dies_or_whose_answer_cannot_be_pickled_is_one_error():
  with pytest.raises(interruptible.ChildDied, match='exit status 3'):
    interruptible.call(fake_compiles.die, 3)
  with pytest.raises(interruptible.ChildDied, match='cannot be pickled'):
    interruptible.call(fake_compiles.raise_unpicklable)


def test_off_the_main_thread_the_work_runs_in_place():
  pids = []
  thread = threading.Thread(target=lambda: pids.append(interruptible.call(os.getpid)))
  thread.start()
  thread.join(60)
  assert pids == [os.getpid()]


@pytest.mark.skipif(not sys.platform.startswith('linux'),
                    reason='the fake compile is glibc pthread_mutex_timedlock')
@pytest.mark.parametrize('hold_the_gil', [False, True], ids=['releasing', 'holding the GIL'])
def test_ctrl_c_comes_out_at_once_and_kills_the_work(tmp_path, hold_the_gil):
  # In a process of its own: a SIGINT sent to this pytest-xdist worker could reach the worker
  # after the test that sent it (at a gc callback, say), and end the worker.
  pid_file = str(tmp_path / 'pid')
  result = subprocess.run([sys.executable, fake_compiles.__file__, pid_file,
                           'hold' if hold_the_gil else 'release'],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
  assert result.returncode == 0, result.stderr[-3000:]
  outcome = json.loads(result.stdout)
  assert outcome['raised'] == 'KeyboardInterrupt', outcome
  assert outcome['seconds'] < 30  # not the 60 s of the native call
  assert outcome['pid'] != outcome['caller']  # the work ran in a child
  with pytest.raises(ProcessLookupError):  # killed and reaped
    os.kill(outcome['pid'], 0)
