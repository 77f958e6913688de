"""benchmarks/studies/same_machine.py: two revisions trained back to back, their numbers
compared."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.studies import same_machine
from conftest import ROOT, TINY

SCRIPT = os.path.join(ROOT, 'benchmarks', 'studies', 'same_machine.py')


def _workdir(path, dev, test, loss=2.5):
  os.makedirs(path)
  with open(os.path.join(path, 'metrics.jsonl'), 'w', encoding='utf-8') as f:
    for step, bleu in dev.items():
      f.write(json.dumps({'step': step, 'loss': loss}) + '\n')
      f.write(json.dumps({'step': step, 'eval_dev/loss': 3.0, 'eval_dev/bleu': bleu}) + '\n')
  if test is not None:
    with open(os.path.join(path, f'eval_test_{max(dev)}.json'), 'w', encoding='utf-8') as f:
      json.dump({'bleu': test, 'loss': 3.0}, f)


def test_reads_and_compares_runs_exactly(tmp_path, capsys):
  _workdir(tmp_path / 'a', {1300: 13.46, 2600: 22.51}, 30.28)
  _workdir(tmp_path / 'b', {1300: 13.46, 2600: 22.51}, 30.28)
  _workdir(tmp_path / 'c', {1300: 13.83, 2600: 22.51}, 30.36)
  a, b, c = (same_machine.read_run(str(tmp_path / n)) for n in 'abc')
  assert a == {'dev_bleu': {1300: 13.46, 2600: 22.51}, 'test_bleu': 30.28,
               'last_loss': (2600, 2.5)}
  assert same_machine.compare(a, b, ['old', 'new'])
  assert not same_machine.compare(a, c, ['old', 'new'])
  out = capsys.readouterr().out.splitlines()
  assert any('dev BLEU @1300' in line and '13.83' in line and line.endswith('NO') for line in out)
  assert any('test BLEU' in line and line.endswith('yes') for line in out)
  assert not same_machine.compare(same_machine.read_run(str(tmp_path / 'missing')),
                                  same_machine.read_run(str(tmp_path / 'missing')), ['x', 'y'])


def test_quick_check_overrides_and_dry_run():
  assert same_machine.step_overrides(None) == []
  with pytest.raises(ValueError, match='steps=0'):  # 0 steps is not "the config's own run"
    same_machine.step_overrides(0)
  assert same_machine.step_overrides(5200) == [
      '--config.num_train_steps=5200', '--config.eval_every_steps=1300',
      '--config.checkpoint_every_steps=400', '--config.warmup_steps=2000']
  result = subprocess.run([sys.executable, SCRIPT, 'HEAD', 'HEAD', '--steps', '40', '--dry-run',
                           '--', '--config=configs/quickstart.py', '--config.seed=1'],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  adds = [line for line in lines if ' worktree add --detach ' in line]
  trains = [line for line in lines if 'main.py' in line]
  assert len(adds) == 2 and len(trains) == 2, lines
  for train in trains:  # --config first, then the workdir and the overrides
    args = train.rstrip(')').split()
    assert args[args.index(next(a for a in args if a.endswith('main.py'))) + 1] == \
        '--config=configs/quickstart.py', train
    assert '--config.num_train_steps=40' in args and args[-1] == '--config.seed=1'
  bad = subprocess.run([sys.executable, SCRIPT, 'no-such-revision', 'HEAD', '--dry-run'],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
  assert bad.returncode == 2 and "'no-such-revision' is not a git revision" in bad.stderr
  assert 'Traceback' not in bad.stderr


def _git(repo, *args):
  return subprocess.run(['git', '-C', str(repo), *args], check=True, capture_output=True,
                        text=True).stdout


# A repository whose main.py says it started, then trains "forever": the script is stopped
# while a run is in progress, as a user stops a 10-minute run.
_FAKE_MAIN = """import os, time
with open(os.environ['FAKE_MAIN_PID'], 'w') as f:
  f.write(str(os.getpid()))
time.sleep(120)
"""


def _fake_repo(path):
  (path / 't2t_jax').mkdir(parents=True)
  (path / 't2t_jax' / '__init__.py').write_text('')
  (path / 'main.py').write_text(_FAKE_MAIN)
  (path / 'weights.bin').write_bytes(os.urandom(1 << 20))  # a checkout that is worth removing
  _git(path, 'init', '-q')
  _git(path, 'add', '-A')
  _git(path, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'fake')
  return path


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize('own_root', [False, True])
def test_a_stop_leaves_no_worktree_no_folder_and_no_run(tmp_path, signum, own_root):
  repo = _fake_repo(tmp_path / 'repo')
  temp, pid_file, root = tmp_path / 'temp', tmp_path / 'main.pid', tmp_path / 'mine'
  temp.mkdir()
  root.mkdir()
  (root / 'notes.txt').write_text('the user\'s')
  env = dict(os.environ, TMPDIR=str(temp), FAKE_MAIN_PID=str(pid_file))
  process = subprocess.Popen([sys.executable, SCRIPT, 'HEAD', 'HEAD', '--steps', '3',
                              f'--repo={repo}', *([f'--root={root}'] if own_root else [])],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 60
  while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
    assert process.poll() is None, process.communicate()
    time.sleep(0.05)
  assert len(_git(repo, 'worktree', 'list').splitlines()) == 2  # the run is under way
  process.send_signal(signum)
  stdout, stderr = process.communicate(timeout=60)
  assert process.returncode == 128 + signum, stdout + stderr
  assert 'Traceback' not in stderr
  assert stderr.strip().splitlines()[-1] == (
      f'same_machine: stopped by {signal.Signals(signum).name}; the worktrees and workdirs '
      'it made were removed')
  assert len(_git(repo, 'worktree', 'list').splitlines()) == 1  # the repository's own only
  assert not os.listdir(temp)  # no t2t_same_machine_* folder
  assert sorted(os.listdir(root)) == ['notes.txt']  # the user's folder: only what it held
  main_pid = int(pid_file.read_text())
  deadline = time.time() + 10
  while os.path.exists(f'/proc/{main_pid}') and time.time() < deadline:
    with open(f'/proc/{main_pid}/stat', encoding='utf-8') as f:  # a zombie has ended too
      if f.read().split(') ')[1].startswith('Z'):
        break
    time.sleep(0.05)
  else:
    assert not os.path.exists(f'/proc/{main_pid}'), 'main.py outlived the script'


@pytest.mark.parametrize('argv, says', [
    (['--steps', '0'], "argument --steps: expected a whole number of at least 1, not '0'"),
    (['--steps', '-2'], "argument --steps: expected a whole number of at least 1, not '-2'"),
    (['--steps', 'many'], "argument --steps: expected a whole number of at least 1, not 'many'"),
    (['--root={file}'], '--root={file}: is a file; expected a folder'),
    (['--root={file}/sub'], '--root={file}/sub: {file} is a file, not a folder'),
    (['--root={taken}'], '--root={taken}: src0 exists in it; give a new or empty folder'),
    (['--python={tmp}/no-python'], '--python={tmp}/no-python: no such executable'),
    (['--repo={tmp}'], '--repo={tmp}: not a git repository'),
    (['--stpes', '40'], "only --config flags are passed to main.py, not ['--stpes', '40']"),
])
def test_a_bad_argument_is_refused_in_one_line_before_anything_is_made(
    tmp_path, monkeypatch, capsys, argv, says):
  made = tmp_path / 'temp'
  made.mkdir()
  monkeypatch.setattr(same_machine.tempfile, 'tempdir', str(made))
  afile = tmp_path / 'notes.txt'
  afile.write_text('x')
  (tmp_path / 'taken' / 'src0').mkdir(parents=True)
  fill = lambda a: a.format(tmp=tmp_path, file=afile, taken=tmp_path / 'taken')  # noqa: E731
  with pytest.raises(SystemExit) as exit_:
    same_machine.run(['HEAD', 'HEAD', *map(fill, argv)])
  err = capsys.readouterr().err
  assert exit_.value.code == 2 and 'Traceback' not in err
  assert err.strip().splitlines()[-1].endswith(f'error: {fill(says)}'), err
  assert not os.listdir(made) and sorted(os.listdir(tmp_path)) == ['notes.txt', 'taken', 'temp']


@pytest.mark.slow
def test_head_against_itself_is_identical(corpus, tmp_path):
  """A tiny model at HEAD twice: two git worktrees (of a clone, never this checkout's), two
  main.py runs, the same floats."""
  clone = tmp_path / 'clone'
  subprocess.run(['git', 'clone', '-q', '--shared', '--no-checkout', ROOT, str(clone)],
                 check=True, capture_output=True)
  tiny = [f for f in TINY if not f.startswith(('--config.eval_every_steps=',
                                               '--config.checkpoint_every_steps='))]
  flags = [f'--config.local_corpus_dir={corpus}', *tiny, '--config.eval_bleu_sentences=4',
           '--config.final_eval_split=test', '--config.average_last=2',
           '--config.decode_batch_sentences=8']
  result = subprocess.run([sys.executable, SCRIPT, 'HEAD', 'HEAD', '--steps', '20',
                           f'--root={tmp_path / "runs"}', f'--repo={clone}', '--', *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]
  lines = result.stdout.splitlines()
  assert lines[-1] == 'identical', lines
  assert sum(line.strip().startswith('dev BLEU @') for line in lines) == 4, lines
  assert any(line.strip().startswith('test BLEU') and line.endswith('yes') for line in lines)
  assert not os.path.exists(tmp_path / 'runs')  # made by the script, removed by it
  assert len(_git(clone, 'worktree', 'list').splitlines()) == 1
