"""benchmarks/shared/scripts.py: the argument types that refuse what a script cannot honour,
the output checks made before any work, stop signals turned into an exception, and git
worktrees that are gone however their block ends (a tiny repository of the test's own)."""

import argparse
import os
import signal
import subprocess
import threading

import pytest

from benchmarks.shared import harness, scripts


def test_at_least_refuses_what_cannot_be_honoured():
  assert scripts.positive_int('3') == 3 and scripts.at_least(0)('0') == 0
  for text in ('0', '-1', 'x', '2.5', ''):
    with pytest.raises(argparse.ArgumentTypeError, match='at least 1'):
      scripts.positive_int(text)


def test_unwritable_names_why_and_creates_nothing(tmp_path):
  afile = tmp_path / 'a_file'
  afile.write_text('x')
  (tmp_path / 'folder').mkdir()
  assert scripts.unwritable(str(tmp_path / 'new' / 'deeper' / 'out.jsonl')) is None
  assert scripts.unwritable(str(tmp_path / 'new' / 'scratch'), folder=True) is None
  assert scripts.unwritable(str(afile)) is None  # appended to
  assert scripts.unwritable(str(tmp_path / 'folder'), folder=True) is None
  assert scripts.unwritable(str(tmp_path / 'folder')) == \
      'is a folder; expected the path of a file'
  assert scripts.unwritable(str(afile), folder=True) == 'is a file; expected a folder'
  assert scripts.unwritable(str(afile / 'x.jsonl')) == f'{afile} is a file, not a folder'
  assert sorted(os.listdir(tmp_path)) == ['a_file', 'folder']


def test_out_of_every_benchmark_is_checked_when_parsed(tmp_path, capsys):
  parser = harness.add_out_argument(argparse.ArgumentParser(prog='bench'))
  assert parser.parse_args(['--out', str(tmp_path / 'r.jsonl')]).out == str(tmp_path / 'r.jsonl')
  with pytest.raises(SystemExit):
    parser.parse_args(['--out', str(tmp_path)])
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      f'bench: error: argument --out: {tmp_path}: is a folder; expected the path of a file')


@pytest.mark.parametrize('threads', [0, 1])
def test_a_stop_signal_raises_and_a_deferred_block_finishes_first(threads):
  # With another thread alive (jax starts many), the signal may reach that thread instead.
  done = threading.Event()
  others = [threading.Thread(target=done.wait) for _ in range(threads)]
  for thread in others:
    thread.start()
  previous = signal.getsignal(signal.SIGTERM)
  steps = []
  try:
    with pytest.raises(scripts.Stopped) as stop:
      with scripts.stops_raise():
        with scripts.deferred_stops():
          os.kill(os.getpid(), signal.SIGTERM)
          steps.append('the block went on')
        steps.append('not reached')
  finally:
    done.set()
  assert steps == ['the block went on']
  assert str(stop.value) == 'SIGTERM' and stop.value.exit_code == 143
  assert signal.getsignal(signal.SIGTERM) is previous


def _repo(path):
  path.mkdir()
  run = lambda *a: subprocess.run(['git', '-C', str(path), *a], check=True,  # noqa: E731
                                  capture_output=True, text=True).stdout
  (path / 'file.txt').write_text('hello\n')
  run('init', '-q')
  run('add', '-A')
  run('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'one')
  return run


def test_a_worktree_is_removed_however_its_block_ends(tmp_path):
  git = _repo(tmp_path / 'repo')
  repo, tree = str(tmp_path / 'repo'), tmp_path / 'tree'
  with scripts.git_worktree(repo, str(tree), 'HEAD') as path:
    assert (tree / 'file.txt').read_text() == 'hello\n' and path == str(tree)
    assert len(git('worktree', 'list').splitlines()) == 2
  assert not tree.exists() and len(git('worktree', 'list').splitlines()) == 1
  with pytest.raises(scripts.Stopped):
    with scripts.git_worktree(repo, str(tree), 'HEAD'):
      raise scripts.Stopped(signal.SIGINT)
  assert not tree.exists() and len(git('worktree', 'list').splitlines()) == 1
  with scripts.git_worktree(repo, str(tree), 'HEAD', keep=True):
    pass
  assert (tree / 'file.txt').exists() and len(git('worktree', 'list').splitlines()) == 2
  with pytest.raises(scripts.WorktreeError, match='exists'):  # never over a folder it found
    with scripts.git_worktree(repo, str(tree), 'HEAD'):
      pass
  assert (tree / 'file.txt').exists()
  scripts.remove_worktree(repo, str(tree))
  assert not tree.exists() and len(git('worktree', 'list').splitlines()) == 1
  with pytest.raises(scripts.WorktreeError, match='no-such-commit'):
    with scripts.git_worktree(repo, str(tree), 'no-such-commit'):
      pass
  assert not tree.exists() and len(git('worktree', 'list').splitlines()) == 1
