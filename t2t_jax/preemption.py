"""Stopping cleanly when told: SIGTERM/SIGINT finish the step, checkpoint, exit 0.

The first signal only sets a flag; the training loop checks it after every step, writes a
checkpoint and returns. A second signal exits at once. With several processes, every process
must stop at the same step (checkpoints are collective), so the flag is OR-ed across
processes at each check.
"""

import os
import signal
import sys
import time
from typing import Dict

import jax
import numpy as np
from absl import logging


class PreemptionHandler:
  """Installs signal handlers; `stop_requested()` says whether to stop after this step."""

  def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
    self.signals = tuple(signals)
    self.signal_name = None
    self.received_at = None  # time.monotonic() of the first signal
    self._requested = False
    self._previous: Dict[int, object] = {}

  def install(self) -> 'PreemptionHandler':
    for sig in self.signals:
      self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def uninstall(self) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous.clear()

  def _handle(self, signum, frame) -> None:
    name = signal.Signals(signum).name
    if self._requested:
      sys.stderr.write(f'\n{name} again: exiting now without a checkpoint\n')
      sys.stderr.flush()
      os._exit(128 + signum)
    self._requested, self.signal_name = True, name
    self.received_at = time.monotonic()
    logging.warning('%s received: finishing the current step and writing a checkpoint '
                    '(send it again to exit at once)', name)

  def stop_requested(self) -> bool:
    """True on every process if any process was signalled (a collective when multi-process)."""
    if jax.process_count() == 1:
      return self._requested
    from jax.experimental import multihost_utils
    flags = multihost_utils.process_allgather(np.array([self._requested], np.int32))
    return bool(np.any(flags))

  def __enter__(self) -> 'PreemptionHandler':
    return self.install()

  def __exit__(self, *exc) -> None:
    self.uninstall()
