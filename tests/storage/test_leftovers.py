"""Folders a killed process leaves behind are removed by the next run of the same kind."""

import glob
import os
import subprocess
import sys
import tempfile

from t2t_jax.storage import leftovers


def _dead_pid():
  child = subprocess.Popen([sys.executable, '-c', 'pass'])
  child.wait()
  return child.pid  # reaped: no process has it (until the pid is reused, ages from now)


def test_folders_of_dead_processes_are_removed_live_ones_kept(tmp_path):
  dead = tmp_path / f'.out.{_dead_pid()}-abc.tmp'
  live = tmp_path / f'.out.{os.getppid()}-def.tmp'
  other = tmp_path / f'.other.{_dead_pid()}-x.tmp'
  for folder in (dead, live, other):
    folder.mkdir()
    (folder / 'file').write_text('partial')
  made = leftovers.owned_temp_dir('.out.', str(tmp_path), '.tmp')
  assert os.path.basename(made).startswith(f'.out.{os.getpid()}-') and made.endswith('.tmp')
  assert sorted(os.listdir(tmp_path)) == sorted([live.name, other.name, os.path.basename(made)])


def test_idle_folders_are_removed_busy_ones_kept(tmp_path):
  idle, busy = tmp_path / 'incomplete.A', tmp_path / 'incomplete.B'
  for folder in (idle, busy):
    (folder / 'sub').mkdir(parents=True)
    (folder / 'sub' / 'shard').write_text('x')
  old = 1_000_000_000  # 2001
  for path in (idle, idle / 'sub', idle / 'sub' / 'shard', busy, busy / 'sub'):
    os.utime(path, (old, old))  # busy's shard was written just now
  assert leftovers.remove_idle(str(tmp_path), 'incomplete.') == [str(idle)]
  assert os.listdir(tmp_path) == ['incomplete.B']


def test_a_local_builder_leaks_no_temp_folder(tmp_path):
  from t2t_jax.data import corpora
  pattern = os.path.join(tempfile.gettempdir(), 'tmp*tfds')
  before = set(glob.glob(pattern))
  for _ in range(3):  # made before preparation, as waiting processes do every second
    corpora.LocalParallelCorpus(config=corpora.LocalCorpusConfig(name='c', version='1.0.0'),
                                data_dir=str(tmp_path))
  assert set(glob.glob(pattern)) == before
