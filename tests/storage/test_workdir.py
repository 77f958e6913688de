"""workdir: the local run lock (flock); the remote lease is in test_lease.py."""

import os

import pytest

from t2t_jax.storage import workdir as workdir_lib


def test_a_second_lock_is_refused_and_a_released_one_is_free(tmp_path):
  workdir = str(tmp_path)
  with workdir_lib.WorkdirLock(workdir) as lock:
    assert lock.path == os.path.join(workdir, workdir_lib.LOCK_NAME)
    assert open(lock.path).read().startswith(f'pid {os.getpid()} on ')
    with pytest.raises(workdir_lib.WorkdirError,
                       match=f'^{workdir} is in use by another live run \\(pid {os.getpid()}'):
      workdir_lib.WorkdirLock(workdir).acquire()
  workdir_lib.WorkdirLock(workdir).acquire().release()


def test_a_folder_where_the_lock_file_goes_is_named_not_a_traceback(tmp_path):
  lock = tmp_path / workdir_lib.LOCK_NAME
  (lock / 'inside').mkdir(parents=True)
  with pytest.raises(workdir_lib.WorkdirError) as e:
    workdir_lib.WorkdirLock(str(tmp_path)).acquire()
  assert str(e.value) == (f"{lock} is a directory; expected the run's lock file (no run "
                          'makes a folder there): remove it')
  assert os.listdir(lock) == ['inside']  # refused, nothing removed


@pytest.mark.skipif(os.geteuid() == 0, reason='root opens any file')
def test_an_unreadable_lock_file_is_named(tmp_path):
  lock = tmp_path / workdir_lib.LOCK_NAME
  lock.write_text('')
  lock.chmod(0o200)
  with pytest.raises(workdir_lib.WorkdirError,
                     match=f"^cannot open the run's lock file {lock}: Permission denied; "):
    workdir_lib.WorkdirLock(str(tmp_path)).acquire()


@pytest.mark.parametrize('create', [True, False])
def test_a_dangling_symlink_or_a_loop_is_named_not_file_exists(tmp_path, create):
  """Issue 43 item 3.13: both said 'workdir ... is not writable: File exists'."""
  dangling, loop = tmp_path / 'dangling', tmp_path / 'loop'
  os.symlink(tmp_path / 'gone', dangling)
  os.symlink(loop, loop)
  with pytest.raises(workdir_lib.WorkdirError) as raised:
    workdir_lib.check_writable(str(dangling), create=create)
  assert str(raised.value) == (
      f'workdir {dangling}: {dangling} is a symbolic link to {tmp_path}/gone, which does not '
      f'exist; create {tmp_path}/gone, point the link at a directory or remove it')
  with pytest.raises(workdir_lib.WorkdirError) as raised:  # a link above the workdir
    workdir_lib.check_writable(str(loop / 'run'), create=create)
  assert str(raised.value) == (
      f'workdir {loop}/run: {loop} is a symbolic link loop ({loop} -> {loop} -> ... never '
      'reaches a file or folder); point it at a directory or remove it')
  assert not (tmp_path / 'gone').exists() and os.path.islink(dangling)  # nothing changed
  os.symlink(tmp_path, tmp_path / 'fine')
  assert workdir_lib.check_writable(str(tmp_path / 'fine' / 'run')) == f'{tmp_path}/fine/run'
