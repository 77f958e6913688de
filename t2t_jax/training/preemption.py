"""Stopping cleanly when told: SIGTERM/SIGINT finish the step, checkpoint, exit 0.

One process: the first signal only sets a flag, which the training loop reads after every
step; it then writes a checkpoint and returns. A second signal exits at once.

Several processes (`jax.distributed`): every process must stop at the same step, because a
checkpoint is a collective. `jax.distributed.initialize` starts JAX's preemption sync
manager, whose C++ handler catches SIGTERM on any process and tells the coordination
service; the service picks a step every process has not reached yet, and
`multihost_utils.reached_preemption_sync_point(step)` becomes True at that step on every
process. Between notices the call returns at once, without any host synchronisation, so
the loop can ask after every step. SIGTERM is therefore left to JAX (a Python handler
would replace the C++ one); SIGINT (Ctrl-C) gets a Python handler that turns it into the
same SIGTERM notice, and a second SIGINT exits at once. If the preemption service is off
(`jax_enable_preemption_service=False`), the flags are OR-ed across processes with an
all-gather after every step instead, which works but waits for each step to finish.
"""

import os
import signal
import sys
import time
from typing import Dict, Optional

import jax
import numpy as np
from absl import logging


def _exit_now(name: str, signum: int) -> None:
  sys.stderr.write(f'\n{name} again: exiting now without a checkpoint\n')
  sys.stderr.flush()
  os._exit(128 + signum)


class PreemptionHandler:
  """Signal handling for the training loop; `stop_requested(step)` says whether to stop.

  Use as a context manager around the loop. Attributes: `signal_name` and `received_at`
  (`time.monotonic()`) of the first signal this process received itself (None when the
  stop was requested by another process).
  """

  def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
    self.signals = tuple(signals)
    self.signal_name: Optional[str] = None
    self.received_at: Optional[float] = None
    self._requested = False
    self._previous: Dict[int, object] = {}
    self._sync_point = None  # None: undecided; True: JAX's preemption service; False: gather

  def install(self) -> 'PreemptionHandler':
    multi = jax.process_count() > 1
    for sig in self.signals:
      if multi and sig == signal.SIGTERM and self._use_sync_point():
        continue  # JAX's own handler notifies the coordination service
      self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def uninstall(self) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous.clear()

  def _use_sync_point(self) -> bool:
    if self._sync_point is None:
      from jax.experimental import multihost_utils
      try:
        multihost_utils.reached_preemption_sync_point(0)
        self._sync_point = True
      except RuntimeError:  # the preemption service is off
        logging.warning('JAX preemption service is off: a stop request is shared by an '
                        'all-gather after every step')
        self._sync_point = False
    return self._sync_point

  def _handle(self, signum, frame) -> None:
    del frame
    name = signal.Signals(signum).name
    if self._requested:
      _exit_now(name, signum)
    self._requested, self.signal_name = True, name
    self.received_at = time.monotonic()
    logging.warning('%s received: finishing the current step and writing a checkpoint '
                    '(send it again to exit at once)', name)
    if jax.process_count() > 1 and self._use_sync_point():
      os.kill(os.getpid(), signal.SIGTERM)  # the notice JAX's preemption service acts on

  def stop_requested(self, step: int) -> bool:
    """True, on every process at the same `step`, once any process was told to stop."""
    if jax.process_count() == 1:
      return self._requested
    from jax.experimental import multihost_utils
    if self._use_sync_point():
      return bool(multihost_utils.reached_preemption_sync_point(step))
    flags = multihost_utils.process_allgather(np.array([self._requested], np.int32))
    return bool(np.any(flags))

  def __enter__(self) -> 'PreemptionHandler':
    return self.install()

  def __exit__(self, *exc) -> None:
    self.uninstall()
