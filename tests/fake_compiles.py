"""Fake compiles for the tests of Ctrl-C and SIGTERM during `--mode=plan` (tests/plan/
test_plan_interrupt.py, tests/runtime/test_interruptible.py): like XLA's, a native call that
neither returns early nor lets Python run a signal handler until it is done (glibc's
pthread_mutex_timedlock on a mutex already held goes back to waiting when a signal interrupts
it). Module-level functions, so that the child process of `interruptible.call` can import
them by name."""

import ctypes
import os
import sys
import time


class _Timespec(ctypes.Structure):
  _fields_ = [('tv_sec', ctypes.c_long), ('tv_nsec', ctypes.c_long)]


def native_wait(seconds: float, *, hold_the_gil: bool) -> None:
  """Waits `seconds` in one native call, signals or not. `hold_the_gil`: through ctypes.PyDLL,
  which keeps the GIL during the call (ctypes.CDLL lets it go): no other thread of this
  process runs Python meanwhile, not even the main thread's signal handler."""
  libc = (ctypes.PyDLL if hold_the_gil else ctypes.CDLL)(None)
  mutex = ctypes.create_string_buffer(64)  # zeroed: a default mutex
  libc.pthread_mutex_lock(mutex)
  deadline = _Timespec(int(time.time() + seconds), 0)
  libc.pthread_mutex_timedlock(mutex, ctypes.byref(deadline))


def compile_for_minutes(*args, hold_the_gil: bool = False, **kwargs):
  """In place of `report.make_plan`: says 'compiling PID' on stderr, then waits 60 s in
  native code."""
  del args, kwargs
  sys.stderr.write(f'compiling {os.getpid()}\n')
  sys.stderr.flush()
  native_wait(60, hold_the_gil=hold_the_gil)
  raise AssertionError('the fake compile returned')


def compile_for_minutes_holding_the_gil(*args, **kwargs):
  compile_for_minutes(*args, hold_the_gil=True, **kwargs)


def write_pid_then_wait(path: str, hold_the_gil: bool) -> None:
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    f.write(str(os.getpid()))
  os.rename(path + '.tmp', path)
  native_wait(60, hold_the_gil=hold_the_gil)
  raise AssertionError('the fake compile returned')


def die(status: int) -> None:
  os._exit(status)  # pylint: disable=protected-access


class Unpicklable(Exception):

  def __reduce__(self):
    raise TypeError('not pickled')


def raise_unpicklable() -> None:
  raise Unpicklable('x')


def ctrl_c_during_a_call(pid_file: str, hold_the_gil: bool) -> dict:
  """In a process of its own (tests/runtime/test_interruptible.py runs it as a script): a
  thread sends this process SIGINT once `interruptible.call`'s child is inside the fake
  compile. What came out of the call, after how long, the child's pid and this process's."""
  import signal
  import threading
  from t2t_jax.runtime import interruptible
  signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal

  def interrupt():
    deadline = time.monotonic() + 60
    while not os.path.exists(pid_file) and time.monotonic() < deadline:
      time.sleep(0.05)
    time.sleep(0.3)  # inside the native call
    os.kill(os.getpid(), signal.SIGINT)

  threading.Thread(target=interrupt, daemon=True).start()
  start = time.monotonic()
  try:
    interruptible.call(write_pid_then_wait, pid_file, hold_the_gil)
    raised = None
  except BaseException as e:  # pylint: disable=broad-except  (reported to the test)
    raised = type(e).__name__
  seconds = time.monotonic() - start
  with open(pid_file, encoding='utf-8') as f:
    pid = int(f.read())
  return {'raised': raised, 'seconds': seconds, 'pid': pid, 'caller': os.getpid()}


if __name__ == '__main__':
  import json
  print(json.dumps(ctrl_c_during_a_call(sys.argv[1], sys.argv[2] == 'hold')))
