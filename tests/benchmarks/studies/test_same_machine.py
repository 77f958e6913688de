"""benchmarks/studies/same_machine.py: two revisions trained back to back, their numbers
compared."""

import json
import os
import subprocess
import sys

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
  assert same_machine.step_overrides(0) == []
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


@pytest.mark.slow
def test_head_against_itself_is_identical(corpus, tmp_path):
  """A tiny model at HEAD twice: two git worktrees, two main.py runs, the same floats."""
  tiny = [f for f in TINY if not f.startswith(('--config.eval_every_steps=',
                                               '--config.checkpoint_every_steps='))]
  flags = [f'--config.local_corpus_dir={corpus}', *tiny, '--config.eval_bleu_sentences=4',
           '--config.final_eval_split=test', '--config.average_last=2',
           '--config.decode_batch_sentences=8']
  result = subprocess.run([sys.executable, SCRIPT, 'HEAD', 'HEAD', '--steps', '20',
                           f'--root={tmp_path}', '--', *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]
  lines = result.stdout.splitlines()
  assert lines[-1] == 'identical', lines
  assert sum(line.strip().startswith('dev BLEU @') for line in lines) == 4, lines
  assert any(line.strip().startswith('test BLEU') and line.endswith('yes') for line in lines)
  assert not os.path.exists(tmp_path / 'src0') and not os.path.exists(tmp_path / 'run1')
  worktrees = subprocess.run(['git', '-C', ROOT, 'worktree', 'list'], capture_output=True,
                             text=True).stdout
  assert str(tmp_path) not in worktrees
