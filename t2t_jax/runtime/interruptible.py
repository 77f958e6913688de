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

`raise_on_signals` is how a command turns SIGTERM and Ctrl-C into that KeyboardInterrupt
without ever losing one (issue 51 c7). Python runs a handler wherever the main thread is,
finalizers included (`__del__`, weakref and gc callbacks such as jax's `_xla_gc_callback`),
and an exception raised there is printed ('Exception ignored in: ...') and dropped: an export
that got SIGTERM ran on, took its name and exited 0. So: the signal is recorded before
anything is raised; a handler that finds itself in a finalizer it knows (`_in_finalizer`)
raises nothing and has the signal delivered again a few milliseconds later, and so does a
KeyboardInterrupt of ours that a finalizer it does not know dropped (Python hands it to
`sys.unraisablehook`), until it lands where it propagates; and wherever a command is about to
make its work final (an export's rename, a plan's output: `raise_if_signalled`) and at its
exit (`cli.raise_on_sigterm`), a recorded signal stops it, even one swallowed where nothing
reported it (an `except BaseException`).
"""

import gc
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import traceback
import weakref
from typing import Any, Callable, Optional, Sequence, Tuple, TypeVar

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


# How long after a signal was held back in a finalizer, or a finalizer dropped our
# KeyboardInterrupt, the signal is delivered again: by then the main thread has most likely
# left the finalizer (else it is held back again).
REDELIVER_S = 0.005
_TAG = '_t2t_jax_signal'  # the attribute marking our KeyboardInterrupts with their signal
_FINALIZE_CODE = weakref.finalize.__call__.__code__


class _Signals:
  """This process's state of `raise_on_signals`."""

  def __init__(self):
    self.signum: Optional[int] = None  # the first signal received
    self.settled = False  # the interrupt was reported: the process is ending
    self.swallowed = False  # our KeyboardInterrupt was dropped, and not raised since
    self.redelivering = False  # a redelivery is scheduled
    self.redelivered = False  # one was sent, its handler has not run yet
    self.held = 0  # times the handler found itself in a finalizer, and raised nothing
    self.dropped = 0  # times a finalizer dropped our KeyboardInterrupt
    self.previous_hook: Optional[Callable[[Any], None]] = None


_state = _Signals()


def interrupt(signum: int) -> KeyboardInterrupt:
  """The KeyboardInterrupt of `signum`: its message names SIGTERM (and any other signal but
  SIGINT, which leaves it empty, as Python's own Ctrl-C does)."""
  error = (KeyboardInterrupt() if signum == signal.SIGINT
           else KeyboardInterrupt(signal.Signals(signum).name))
  setattr(error, _TAG, signum)
  return error


def _handle(signum: int, frame) -> None:
  """The handler of `raise_on_signals`: records `signum`, then raises its KeyboardInterrupt,
  unless the process is already ending with one reported (a second signal then ends it at
  once, status 130, as `cli.exit_interrupted` would), the main thread is inside a
  finalizer or an unraisable hook, where an exception is dropped (`_in_finalizer`: it is
  delivered again shortly), or this is a redelivery of one `raise_if_signalled` has raised
  meanwhile."""
  if _state.signum is None:
    _state.signum = signum
  redelivered, _state.redelivered = _state.redelivered, False
  if _state.settled and not redelivered:  # again while the process ends: end it now
    os._exit(130)  # pylint: disable=protected-access
  if _state.settled or (redelivered and not _state.swallowed):
    return
  if _in_finalizer(frame):
    _state.swallowed = True
    _state.held += 1
    _redeliver_later(signum)
    return
  _state.swallowed = False
  raise interrupt(signum)


def _hook_codes() -> set:
  """The code objects of `sys.unraisablehook` and of the hooks it wraps (found through its
  closure: `storage.workdir` and others chain to the hook they replaced)."""
  codes, todo, seen = set(), [sys.unraisablehook], 0
  while todo and seen < 32:
    hook = todo.pop()
    seen += 1
    code = getattr(hook, '__code__', None)
    if code is None or code in codes:
      continue
    codes.add(code)
    for cell in hook.__closure__ or ():
      try:
        if callable(cell.cell_contents):
          todo.append(cell.cell_contents)
      except ValueError:  # an empty cell
        pass
  return codes


def _in_finalizer(frame) -> bool:
  """Whether `frame` runs inside code whose exceptions Python prints and drops: a gc callback
  (jax's `_xla_gc_callback`), a `__del__`, a `weakref.finalize`, an unraisable hook. Other
  weakref callbacks are not known here: `_unraisable` delivers what they drop again."""
  codes = _hook_codes() | {_FINALIZE_CODE} | {
      getattr(callback, '__code__', None) for callback in gc.callbacks}
  while frame is not None:
    if frame.f_code in codes or frame.f_code.co_name == '__del__':
      return True
    frame = frame.f_back
  return False


def _unraisable(unraisable) -> None:
  """`sys.unraisablehook` of `raise_on_signals`: our KeyboardInterrupt, dropped by a finalizer,
  is delivered again instead of printed; anything else goes to the previous hook."""
  signum = getattr(unraisable.exc_value, _TAG, None)
  if signum is None:
    _state.previous_hook(unraisable)
  elif not _state.settled:
    _state.swallowed = True
    _state.dropped += 1
    _redeliver_later(signum)


def _redeliver_later(signum: int) -> None:
  """Sends `signum` to the main thread again in REDELIVER_S (one at a time): a real signal,
  which also ends a blocking system call there; not once the process is ending or no longer
  has our handler (a default one would kill it)."""
  if _state.redelivering:
    return
  _state.redelivering = True

  def again() -> None:
    _state.redelivering = False
    if (_state.settled or not _state.swallowed  # raised meanwhile by raise_if_signalled
        or signal.getsignal(signum) is not _handle):
      return
    _state.redelivered = True
    if hasattr(signal, 'pthread_kill'):
      signal.pthread_kill(threading.main_thread().ident, signum)
    else:
      import _thread  # pylint: disable=import-outside-toplevel
      _thread.interrupt_main(signum)

  timer = threading.Timer(REDELIVER_S, again)
  timer.daemon = True
  try:
    timer.start()
  except RuntimeError:  # the interpreter is shutting down: the exit check has run
    _state.redelivering = False


def raise_on_signals(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
  """From now on each of `signals` raises `interrupt(signum)` in the main thread (call it
  there), and is never lost (the module docstring): the first is recorded
  (`signal_received`), one held back in or dropped by a finalizer is raised again. SIGINT
  stays ignored where the process started ignoring it, as Python leaves it. Idempotent."""
  if _state.previous_hook is None:  # once: a hook wrapping ours may have come since
    _state.previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable
  for signum in signals:
    if signum == signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
      continue  # started ignoring Ctrl-C (a background job): as Python, leave it so
    signal.signal(signum, _handle)


def signal_received() -> Optional[int]:
  """The first signal `raise_on_signals` has received (None: none)."""
  return _state.signum


def raise_if_signalled() -> None:
  """At a safe point, e.g. before an output takes its final name: raises the KeyboardInterrupt
  of a signal received earlier, even one a finalizer or an `except` swallowed."""
  if _state.signum is not None:
    _state.swallowed = False  # a redelivery still under way raises nothing more
    raise interrupt(_state.signum)


def settle() -> None:
  """The interrupt has been reported and the process is ending: no signal is raised or
  delivered again from now on; another one ends the process at once (status 130)."""
  _state.settled = True


def settled() -> bool:
  """Whether `settle` was called."""
  return _state.settled


def forget_signal() -> None:
  """Forgets the signal received (`signal_received` None again), for a process that handled
  its interrupt and goes on (a test's next round); the handlers stay."""
  _state.signum, _state.settled, _state.swallowed = None, False, False
  _state.held = _state.dropped = 0


def finalizer_counts() -> Tuple[int, int]:
  """(times a signal's handler found itself in a finalizer and held its KeyboardInterrupt
  back, times a finalizer dropped one) since the last `forget_signal`: each was delivered
  again."""
  return _state.held, _state.dropped
