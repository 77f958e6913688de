"""Long native work that Ctrl-C and SIGTERM can stop within a second.

Python runs a signal handler only in the main thread, between bytecodes, and only once that
thread holds the GIL: while native code runs in the main thread (an XLA compile of wmt_base
for a TPU slice takes minutes, and does not return early), or in any thread without letting
the GIL go, Ctrl-C or SIGTERM waits for it (issue 43 item 3.7: more than 7 minutes). `call`
runs the work in a child process instead (multiprocessing's 'spawn': a fresh interpreter,
nothing of this process's threads or locks), while this process only waits on a pipe, with
nothing native of its own under way: its handler runs at once, whatever the child's native
code does with the child's GIL. A KeyboardInterrupt (Ctrl-C, or SIGTERM turned into one by
`cli.raise_on_sigterm`) kills the child (SIGKILL: its compile stops there) and comes out of
`call`; what the child wrote is whole or absent as long as it writes atomically (temp file +
rename, `paths.write_atomic`). The child ignores SIGINT (Ctrl-C reaches a terminal's whole
process group: the parent alone answers it) and, on Linux, is killed with its parent.
"""

import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import traceback
from typing import Any, Callable, TypeVar

T = TypeVar('T')

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class _ChildTraceback(Exception):
  """The child's traceback, as the `__cause__` of the exception it raised."""

  def __str__(self):
    return self.args[0]


class ChildDied(RuntimeError):
  """The child ended without an answer (killed, out of memory, a crash in native code)."""


def _die_with_parent() -> None:
  """SIGKILL this process when its parent ends (a SIGKILLed parent leaves no compile
  running for minutes); the kernel does it, with no Python to run. Linux only."""
  if not sys.platform.startswith('linux'):
    return
  import ctypes  # pylint: disable=import-outside-toplevel
  try:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  except (OSError, AttributeError):
    return


def _child(conn, parent: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent answers Ctrl-C, and kills us
  _die_with_parent()
  if os.getppid() != parent:  # the parent ended before prctl
    os._exit(1)  # pylint: disable=protected-access
  try:
    answer = ('value', fn(*args, **kwargs))
  except BaseException as e:  # pylint: disable=broad-except  (raised in the parent)
    answer = ('error', e, traceback.format_exc())
  try:
    data = pickle.dumps(answer)
  except Exception:  # pylint: disable=broad-except  (an answer pickle cannot carry)
    data = pickle.dumps(('error', ChildDied(f'{fn.__name__} in a child process: '
                                            'its answer cannot be pickled'),
                         traceback.format_exc()))
  conn.send_bytes(data)
  conn.close()


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
  """`fn(*args, **kwargs)` in a child process: its result, or its exception raised here.

  `fn`, its arguments, its result and its exception must pickle (`fn` by name: a function of
  a module the child can import; the child starts with this process's sys.path and
  environment, none of its other state, e.g. `jax.config`). A KeyboardInterrupt meanwhile
  kills the child and is raised at once. Off the main thread (no signal reaches it) `fn`
  runs in place.

  Raises:
    ChildDied: the child ended without an answer.
  """
  if threading.current_thread() is not threading.main_thread():
    return fn(*args, **kwargs)
  context = multiprocessing.get_context('spawn')
  receive, send = context.Pipe(duplex=False)
  child = context.Process(target=_child, args=(send, os.getpid(), fn, args, kwargs),
                          name=f'interruptible {fn.__name__}', daemon=True)
  try:
    child.start()
    send.close()  # ours: the pipe's end comes when the child's copy closes
    # Waits of 0.5 s: a signal delivered to another thread of this process does not
    # interrupt this one's wait; its handler runs when the wait ends.
    while not multiprocessing.connection.wait([receive, child.sentinel], timeout=0.5):
      pass
    try:
      answer = pickle.loads(receive.recv_bytes())
    except EOFError:
      child.join()
      raise ChildDied(f'{fn.__name__} in a child process ended without an answer '
                      f'(exit status {child.exitcode})') from None
    child.join()
  except BaseException:
    if child.pid is not None and child.exitcode is None:
      child.kill()  # SIGKILL: a native call cannot hold it off
      child.join()
    raise
  finally:
    receive.close()
  if answer[0] == 'error':
    error = answer[1]
    error.__cause__ = _ChildTraceback(answer[2])
    raise error
  return answer[1]
