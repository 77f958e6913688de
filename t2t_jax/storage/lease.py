"""An exclusive lease on a workdir that lives on an object store (gs://...), where no `flock`
exists: a small JSON file naming its owner, refreshed by a heartbeat.

The file holds the owner's host, pid, a random token, the start time and the time of its last
heartbeat (Unix seconds, the owner's clock). A daemon thread rewrites it every `heartbeat_s`.
A lease whose heartbeat is older than `stale_s` belongs to a dead run (killed, preempted): it
is taken over with a warning naming the old owner. A fresher one means another live run: the
workdir is refused, naming that run.

Taking the lease: create the file (on gs:// a write-once object, so of two runs creating it
at once one is refused by the store), or overwrite a stale one; then wait `settle_s` and read
it back: the lease is ours only if it still holds our token. Two runs taking over the same
stale lease within `settle_s` of each other can therefore not both go on, unless their writes
reach the store more than `settle_s` apart in the opposite order of their reads; `settle_s`
well above the store's write latency makes that practically impossible. Hosts' clocks are
assumed to agree within a small fraction of `stale_s` (NTP).

If the heartbeat finds the lease taken by another run (it was considered stale: this process
stalled for longer than `stale_s`), it logs an error and stops refreshing; `lost` is then set.
"""

import datetime
import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable, Dict, Optional

from absl import logging
from etils import epath

from t2t_jax.storage import paths


class LeaseError(RuntimeError):
  """The lease is held by another live run, or was lost to one while taking it."""


def describe(record: Dict[str, Any], now: Optional[float] = None) -> str:
  """'pid 12 on host-a since 2026-11-23T10:00:00, last heartbeat 5 s ago'."""
  age = (time.time() if now is None else now) - float(record.get('heartbeat', 0))
  return (f'pid {record.get("pid", "?")} on {record.get("host", "?")} since '
          f'{record.get("started", "?")}, last heartbeat {age:.0f} s ago')


class Lease:
  """Exclusive lease file at `path` (a URI or a local path); see the module doc.

  Args:
    path: the lease file.
    heartbeat_s: how often the owner rewrites the file.
    stale_s: a lease not rewritten for this long is taken over.
    settle_s: how long to wait between writing the lease and reading it back.
    clock: wall-clock seconds (tests pass a fake one).
  """

  def __init__(self, path: str, *, heartbeat_s: float = 30.0, stale_s: float = 180.0,
               settle_s: float = 2.0, clock: Callable[[], float] = time.time):
    if stale_s <= 2 * heartbeat_s:
      raise ValueError(f'stale_s ({stale_s}) must exceed twice heartbeat_s ({heartbeat_s})')
    self.path = path
    self.heartbeat_s, self.stale_s, self.settle_s = heartbeat_s, stale_s, settle_s
    self._clock = clock
    self._record: Optional[Dict[str, Any]] = None
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None
    self.lost = threading.Event()

  def read(self) -> Optional[Dict[str, Any]]:
    """The lease file's record, or None when there is none (or it is not a lease)."""
    try:
      data = paths.read_bytes(self.path)
    except FileNotFoundError:
      return None
    try:
      record = json.loads(data.decode('utf-8'))
    except ValueError:
      return None  # half a record cannot happen (whole-object writes); a foreign file
    return record if isinstance(record, dict) and 'token' in record else None

  def _write(self, *, create: bool) -> None:
    self._record['heartbeat'] = self._clock()
    paths.write_atomic(self.path, json.dumps(self._record).encode('utf-8'), overwrite=not create)

  def acquire(self) -> 'Lease':
    """Takes the lease or raises LeaseError naming the live owner; starts the heartbeat."""
    current = self.read()
    exists = current is not None or epath.Path(self.path).exists()  # read() forgot the cache
    if current is None and exists:  # damaged (a crash cannot leave half a record): not a run
      logging.warning('the lease %s does not hold a lease record; taking it over', self.path)
    if current is not None:
      age = self._clock() - float(current.get('heartbeat', 0))
      if age < self.stale_s:
        raise LeaseError(f'in use by another live run ({describe(current, self._clock())}; '
                         f'lease file {self.path}, stale after {self.stale_s:g} s)')
      logging.warning('taking over the stale lease %s of %s', self.path,
                      describe(current, self._clock()))
    self._record = {
        'host': socket.gethostname(), 'pid': os.getpid(), 'token': uuid.uuid4().hex,
        'started': datetime.datetime.now().isoformat(timespec='seconds')}
    try:
      self._write(create=not exists)
    except FileExistsError:
      raise LeaseError(f'another run created the lease {self.path} at the same moment') from None
    self._settle()
    confirmed = self.read()
    if confirmed is None or confirmed.get('token') != self._record['token']:
      owner = describe(confirmed, self._clock()) if confirmed else 'a run that released it'
      raise LeaseError(f'another run took the lease {self.path} at the same moment ({owner})')
    self._thread = threading.Thread(target=self._heartbeat, name='t2t_jax-lease', daemon=True)
    self._thread.start()
    return self

  def _settle(self) -> None:
    """Gives a run that took the lease at the same moment the time to write it."""
    time.sleep(self.settle_s)

  def _heartbeat(self) -> None:
    while not self._stop.wait(self.heartbeat_s):
      try:
        current = self.read()
        if current is None or current.get('token') != self._record['token']:
          logging.error('lost the lease %s to %s; this run no longer owns its workdir',
                        self.path, describe(current) if current else 'nobody (deleted)')
          self.lost.set()
          return
        self._write(create=False)
      except Exception as e:  # noqa: BLE001 - a store hiccup; the next beat tries again
        logging.warning('lease heartbeat on %s failed: %s', self.path, e)

  def release(self) -> None:
    """Stops the heartbeat and deletes the lease file if it is still ours."""
    if self._thread is None:
      return
    self._stop.set()
    self._thread.join()
    self._thread = None
    current = self.read()
    if current is not None and current.get('token') == self._record['token']:
      epath.Path(self.path).unlink()
      paths.forget(self.path)
