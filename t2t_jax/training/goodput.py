"""Goodput: the fraction of a training run's wall time spent in train steps, and where the
rest went (MLPerf-style reports and maxtext's goodput lead with it).

The wall time since the run started (`train._Run`'s start: configuration, data, vocabulary,
model and restore included) is split into
  startup     from the start to the loop's first step, less the compiles in it;
  compile     JAX's tracing, lowering and XLA compiles (`jax.monitoring`'s compile events,
              wherever they happen: the train step's shapes, evaluation's, decoding's);
  input       waiting for the next batch (`next` on the train iterator);
  eval        periodic dev evaluation (loss, BLEU decoding), less its compiles;
  checkpoint  saving: the host's part of an asynchronous save, waits for one to finish;
  steps       the rest: dispatching and running the updates, and the metrics line's read of
              the device (the loop's one regular sync). `goodput` is its fraction.
Phases do not nest (a compile inside a phase is taken out of it), so the fractions add to 1.
"""

import contextlib
import threading
import time
import weakref
from typing import Dict, Iterator

import jax

PHASES = ('startup', 'compile', 'input', 'eval', 'checkpoint')
COMPILE_EVENTS = frozenset((
    '/jax/core/compile/jaxpr_trace_duration',
    '/jax/core/compile/jaxpr_to_mlir_module_duration',
    '/jax/core/compile/backend_compile_duration'))

# The accounts listening (weakly: a run that failed before `close` drops out with it); one
# listener for them all, registered once.
_active: 'weakref.WeakSet[Goodput]' = weakref.WeakSet()
_lock = threading.Lock()


def _on_event(event: str, seconds: float, **kwargs) -> None:
  del kwargs
  if event in COMPILE_EVENTS:
    with _lock:
      for account in list(_active):
        account.seconds['compile'] += seconds


_registered = False


def _listen(account: 'Goodput') -> None:
  global _registered
  with _lock:
    if not _registered:
      jax.monitoring.register_event_duration_secs_listener(_on_event)
      _registered = True
    _active.add(account)


class Goodput:
  """The split of one run's wall time (see the module doc); `close` stops counting."""

  def __init__(self, start: float):
    """`start`: `time.monotonic()` when the run started."""
    self.start = start
    self.seconds: Dict[str, float] = dict.fromkeys(PHASES, 0.0)
    self._started = False
    _listen(self)

  @contextlib.contextmanager
  def phase(self, name: str) -> Iterator[None]:
    """Counts the wall time inside as `name`, less the compiles in it."""
    began, compiled = time.monotonic(), self.seconds['compile']
    try:
      yield
    finally:
      # max: compiles on other threads at once (decode_threads) can exceed the wall time
      self.seconds[name] += max(0.0, time.monotonic() - began
                                - (self.seconds['compile'] - compiled))

  def first_step(self) -> None:
    """Marks the loop's start: the time before it is start-up."""
    if not self._started:
      self._started = True
      self.seconds['startup'] = time.monotonic() - self.start - self.seconds['compile']

  def timed(self, iterator):
    """`iterator` whose `next` counts as input."""
    return _TimedInput(iterator, self)

  def split(self) -> Dict[str, float]:
    """{'goodput': fraction in steps, 'badput/<phase>': fraction of each phase} of the
    wall time since the start."""
    wall = max(time.monotonic() - self.start, 1e-9)
    out = {f'badput/{name}': self.seconds[name] / wall for name in PHASES}
    out['goodput'] = max(0.0, 1.0 - sum(out.values()))
    return out

  def close(self) -> None:
    with _lock:
      _active.discard(self)


class _TimedInput:

  def __init__(self, iterator, account: Goodput):
    self.iterator, self.account = iterator, account

  def __iter__(self):
    return self

  def __next__(self):
    with self.account.phase('input'):
      return next(self.iterator)


def format_split(split: Dict[str, float], wall_s: float) -> str:
  """One line: 'goodput 91.2% of 612 s in train steps; startup 1.5%, compile 4.1%, ...'."""
  rest = ', '.join(f'{name} {split[f"badput/{name}"]:.1%}' for name in PHASES)
  return f'goodput {split["goodput"]:.1%} of {wall_s:.0f} s in train steps; {rest}'
