"""When to write a training checkpoint: one decision, the same on every process.

A checkpoint is a collective: if one process enters the save of step N while another runs
step N+1, both wait for each other forever. So every decision must come out the same on
every process:

* every N steps (`checkpoint_every_steps`), the last step and a stop request
  (`preemption.py`): functions of the step alone, identical everywhere;
* every T minutes (`checkpoint_every_minutes`, the paper's §5.2 policy): measured on
  process 0's clock only, since that process's last save (or the start of the run), and
  checked only at decision steps (multiples of `check_every`, the logging interval, where
  the loop waits for the device anyway); process 0 broadcasts its answer, so the other
  processes' clocks (which may run at another pace, or be slowed) never matter.

A time-based save therefore comes at the first decision step after T minutes.
"""

import time
from typing import Callable, Optional

import jax
import numpy as np


def _broadcast_from_process_0(flag: bool) -> bool:
  from jax.experimental import multihost_utils
  return bool(multihost_utils.broadcast_one_to_all(np.int32(flag)))


class SavePolicy:
  """The save decision of the training loop.

  Args:
    every_steps: save when the step is a multiple of this (0: off).
    every_minutes: save at the first decision step at least this many minutes after the last
      save or the start (0: off).
    check_every: decision steps for the time policy are multiples of this.
    clock: seconds, monotonic (tests pass a fake one).
    broadcast: shares process 0's answer with every process (tests pass a fake one).
  """

  def __init__(self, every_steps: int = 0, every_minutes: float = 0.0, check_every: int = 1,
               clock: Callable[[], float] = time.monotonic,
               broadcast: Optional[Callable[[bool], bool]] = None):
    self.every_steps, self.every_minutes = every_steps, every_minutes
    self.check_every = max(int(check_every), 1)
    self._clock = clock
    self._broadcast = broadcast
    self._last_save = clock()

  def should_save(self, step: int, *, final: bool = False) -> bool:
    """Whether to checkpoint after `step`; `final` (the last step or a stop) always saves.

    Call it at every step on every process: at decision steps of the time policy it is a
    collective when several processes run.
    """
    if final or (self.every_steps and step % self.every_steps == 0):
      return True
    if not self.every_minutes or step % self.check_every:
      return False
    due = (jax.process_index() == 0
           and self._clock() - self._last_save >= 60.0 * self.every_minutes)
    if jax.process_count() > 1:
      due = (self._broadcast or _broadcast_from_process_0)(due)
    return due

  def saved(self) -> None:
    """Restarts the time interval (call after each save)."""
    self._last_save = self._clock()
