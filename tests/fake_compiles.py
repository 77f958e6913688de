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
