"""t2t_jax.runtime.interruptible: work in a worker thread, a signal acted on at once."""

import os
import signal
import threading

import pytest

from t2t_jax.runtime import interruptible


def test_the_result_and_the_exception_of_the_work_come_back():
  assert interruptible.call(lambda a, b=0: a + b, 1, b=2) == 3
  with pytest.raises(ValueError, match='bad'):
    interruptible.call(lambda: (_ for _ in ()).throw(ValueError('bad')))
  assert not interruptible.abandoned()


def test_ctrl_c_comes_out_at_once_and_the_abandoned_work_writes_nothing():
  started, release, finished, wrote = (threading.Event(), threading.Event(),
                                        threading.Event(), [])

  def work():
    started.set()
    release.wait(60)  # a long compile
    with interruptible.writing() as allowed:
      wrote.append(allowed)
    finished.set()
    return 'late'

  def interrupt():
    started.wait(60)
    os.kill(os.getpid(), signal.SIGINT)

  threading.Thread(target=interrupt).start()
  with pytest.raises(KeyboardInterrupt):
    interruptible.call(work)
  assert interruptible.abandoned() and not wrote
  (worker,) = [t for t in threading.enumerate() if t.name == 'interruptible work']
  assert worker.is_alive()
  release.set()
  assert finished.wait(60)
  worker.join(60)
  assert wrote == [False]  # what it reported after the interrupt is not written
  assert not interruptible.abandoned()  # nothing left running: a normal exit is fine
  with interruptible.writing() as allowed:  # other threads write as before
    assert allowed
