"""t2t_jax.runtime.interruptible: work in a child process, a signal acted on at once."""

import operator
import os
import signal
import sys
import threading
import time

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
  pid_file = str(tmp_path / 'pid')

  def interrupt():
    deadline = time.monotonic() + 60
    while not os.path.exists(pid_file) and time.monotonic() < deadline:
      time.sleep(0.05)
    time.sleep(0.3)  # inside the native call
    os.kill(os.getpid(), signal.SIGINT)

  threading.Thread(target=interrupt, daemon=True).start()
  start = time.monotonic()
  with pytest.raises(KeyboardInterrupt):
    interruptible.call(fake_compiles.write_pid_then_wait, pid_file, hold_the_gil)
  assert time.monotonic() - start < 30  # not the 60 s of the native call
  with open(pid_file, encoding='utf-8') as f:
    pid = int(f.read())
  assert pid != os.getpid()
  with pytest.raises(ProcessLookupError):  # killed and reaped
    os.kill(pid, 0)
