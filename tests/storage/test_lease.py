"""The heartbeat lease of remote workdirs, on the offline GCS emulator (short intervals)."""

import json
import logging
import os
import socket
import time

import pytest
from etils import epath

from t2t_jax.storage import lease as lease_lib
from t2t_jax.storage import workdir as workdir_lib

FAST = dict(heartbeat_s=0.2, stale_s=1.0, settle_s=0.05)


def _foreign(path, heartbeat, pid=4242, host='other-host'):
  record = {'host': host, 'pid': pid, 'token': 'foreign', 'started': '2026-01-01T00:00:00',
            'heartbeat': heartbeat}
  epath.Path(path).write_text(json.dumps(record))


def _wait_for(condition, timeout=5.0):
  deadline = time.monotonic() + timeout
  while not condition():
    assert time.monotonic() < deadline, 'condition not met in time'
    time.sleep(0.05)


def test_acquire_writes_owner_and_release_deletes(gcs_dir):
  path = f'{gcs_dir}/.lease'
  lease = lease_lib.Lease(path, **FAST).acquire()
  record = json.loads(epath.Path(path).read_text())
  assert (record['host'], record['pid']) == (socket.gethostname(), os.getpid())
  assert time.time() - record['heartbeat'] < 5
  lease.release()
  assert not epath.Path(path).exists()


def test_live_lease_is_refused_naming_its_owner(gcs_dir):
  path = f'{gcs_dir}/.lease'
  _foreign(path, heartbeat=time.time())
  with pytest.raises(lease_lib.LeaseError, match=r'in use by another live run \(pid 4242 on '
                     r'other-host since 2026-01-01T00:00:00, last heartbeat \d s ago'):
    lease_lib.Lease(path, **FAST).acquire()
  assert json.loads(epath.Path(path).read_text())['token'] == 'foreign'  # untouched


def test_stale_lease_is_taken_over_with_a_warning(gcs_dir, caplog):
  path = f'{gcs_dir}/.lease'
  _foreign(path, heartbeat=time.time() - 30)
  with caplog.at_level(logging.WARNING):
    lease = lease_lib.Lease(path, **FAST).acquire()
  try:
    assert 'taking over the stale lease' in caplog.text
    assert 'pid 4242 on other-host' in caplog.text
    assert json.loads(epath.Path(path).read_text())['pid'] == os.getpid()
  finally:
    lease.release()
  assert not epath.Path(path).exists()


def test_heartbeat_keeps_the_lease_fresh(gcs_dir):
  # A fake wall clock that only the test moves: how long the heartbeat thread takes to run
  # (a loaded machine) changes no age the leases compute.
  path, now = f'{gcs_dir}/.lease', [1000.0]
  lease = lease_lib.Lease(path, **FAST, clock=lambda: now[0]).acquire()
  try:
    for _ in range(3):  # the first run lives on, many stale_s later
      now[0] += 10 * FAST['stale_s']
      _wait_for(lambda: json.loads(epath.Path(path).read_text())['heartbeat'] == now[0],
                timeout=120)
      # A second run is refused however long the first has been running.
      with pytest.raises(lease_lib.LeaseError, match=r'in use by another live run \(pid '
                         rf'{os.getpid()} .*, last heartbeat 0 s ago'):
        lease_lib.Lease(path, **FAST, clock=lambda: now[0]).acquire()
  finally:
    lease.release()


def test_a_lease_taken_by_another_run_is_lost_and_left_alone(gcs_dir):
  path = f'{gcs_dir}/.lease'
  lease = lease_lib.Lease(path, **FAST).acquire()
  _foreign(path, heartbeat=time.time())  # another run took over (we looked stale to it)
  _wait_for(lease.lost.is_set)
  lease.release()
  assert json.loads(epath.Path(path).read_text())['token'] == 'foreign'  # not deleted


def test_read_back_refuses_when_another_run_wrote_meanwhile(gcs_dir, monkeypatch):
  path = f'{gcs_dir}/.lease'
  _foreign(path, heartbeat=time.time() - 30)
  # Another run takes over the same stale lease while this one waits to read it back.
  monkeypatch.setattr(lease_lib.Lease, '_settle', lambda _: _foreign(path, time.time(), pid=7))
  with pytest.raises(lease_lib.LeaseError, match=r'took the lease .* at the same moment '
                     r'\(pid 7 on other-host'):
    lease_lib.Lease(path, **FAST).acquire()


def test_stale_must_exceed_two_heartbeats():
  with pytest.raises(ValueError, match='stale_s'):
    lease_lib.Lease('gs://bucket/x', heartbeat_s=1.0, stale_s=2.0)


def test_workdir_lock_on_a_remote_workdir(gcs_dir):
  workdir = workdir_lib.check_writable(gcs_dir + '/run/')
  assert workdir == gcs_dir + '/run'
  with workdir_lib.WorkdirLock(workdir, **FAST) as lock:
    assert lock.path == f'{workdir}/{workdir_lib.LEASE_NAME}'
    with pytest.raises(workdir_lib.WorkdirError,
                       match=rf'^{workdir}: in use by another live run \(pid {os.getpid()}'):
      workdir_lib.WorkdirLock(workdir, **FAST).acquire()
  assert not epath.Path(lock.path).exists()
  workdir_lib.WorkdirLock(workdir, **FAST).acquire().release()  # free again


def test_a_workdir_in_a_missing_bucket_is_refused_not_created(gcs):
  with pytest.raises(workdir_lib.WorkdirError, match='^workdir gs://no-such-bucket/run is not '
                     'writable'):
    workdir_lib.check_writable('gs://no-such-bucket/run')
  assert not epath.Path('gs://no-such-bucket').exists()
