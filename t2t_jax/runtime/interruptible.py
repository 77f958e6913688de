"""Long native work that Ctrl-C and SIGTERM can stop within a second.

Python runs a signal handler only in the main thread, between bytecodes: while the main
thread is inside one native call (an XLA compile of wmt_base for a TPU slice takes minutes,
and does not return early), Ctrl-C or SIGTERM waits for it (issue 43 item 3.7: more than 7
minutes). `call` runs the work in a worker thread instead, and the main thread waits on it in
a join that signals interrupt, so the handler runs at once and its KeyboardInterrupt comes
out of `call`. The worker cannot be stopped: it is left running (a daemon) and marked
abandoned; what it would still write through `writing()` is skipped; a write under way is
waited for first, so no file is left half-written. The process should then end with
`os._exit` (`cli.exit_interrupted` does when `abandoned()`), since a normal exit would run
jax's exit handlers beside a compile still running.
"""

import contextlib
import threading
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar('T')

_lock = threading.Lock()  # held by a worker's write and by the abandoning of a worker
_abandoned = set()  # the idents of the workers a KeyboardInterrupt left, while they run


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
  """`fn(*args, **kwargs)` in a worker thread; its result or its exception.

  A KeyboardInterrupt in the main thread meanwhile (Ctrl-C, or SIGTERM turned into one by
  `cli.raise_on_sigterm`) is raised at once, the worker left running (`abandoned()`). Off the
  main thread (no signal reaches it) `fn` runs in place.
  """
  if threading.current_thread() is not threading.main_thread():
    return fn(*args, **kwargs)
  outcome, done = {}, threading.Event()

  def work():
    try:
      outcome['value'] = fn(*args, **kwargs)
    except BaseException as e:  # pylint: disable=broad-except  (raised in the caller)
      outcome['error'] = e
    finally:  # done: nothing left running (and its ident may be another thread's next)
      with _lock:
        _abandoned.discard(threading.get_ident())
      done.set()

  worker = threading.Thread(target=work, name=f'interruptible {fn.__name__}', daemon=True)
  worker.start()
  try:
    # Not `worker.join()`: interrupted, Python 3.11's join marks a running thread stopped
    # (its bpo-45274 fix); an Event's wait is interrupted cleanly, its handler run at once.
    while not done.wait(0.5):
      pass
  except KeyboardInterrupt:
    with _lock:  # a write under way finishes first; none starts after
      _abandoned.add(worker.ident)
    raise
  if 'error' in outcome:
    raise outcome['error']
  return outcome['value']


@contextlib.contextmanager
def writing() -> Iterator[bool]:
  """Around a write a worker of `call` may make: yields whether to write (False once the
  main thread has abandoned this worker), and delays the abandoning until the write is
  done."""
  with _lock:
    yield threading.get_ident() not in _abandoned


def abandoned() -> bool:
  """Whether a worker of `call` that a KeyboardInterrupt left is still running."""
  with _lock:
    return bool(_abandoned)
