"""Is a change "unchanged"? Train the embedded default at two git revisions, back to back on
this machine, and compare their numbers exactly.

Bitwise reproducibility holds on one machine, with the same software and the same thread
count: XLA's CPU matmuls split their sums by thread count and by the instruction set, so another
machine, a different core count or an accelerator moves dev BLEU by up to ~1.2 and test BLEU
by up to ~0.4 (docs/modes.md, "Reproducibility"). A number quoted from another machine is
therefore no baseline: this script makes both runs here, one after the other.

Each revision is checked out with `git worktree add --detach` into a temporary folder and run
there as `python main.py --workdir=...` (its own main.py and t2t_jax, this machine's Python
and packages); the worktrees and the workdirs are removed at the end however the script ends,
Ctrl-C and SIGTERM included (`--keep` keeps them). `--repo` compares another clone's revisions.

  python benchmarks/studies/same_machine.py HEAD~1 HEAD            # full run, ~10 min each, 2 cores
  python benchmarks/studies/same_machine.py main HEAD --steps 400  # a quick check: 400 steps each
  python benchmarks/studies/same_machine.py A B --dry-run          # print the commands, run nothing
  python benchmarks/studies/same_machine.py A B -- --config.seed=1 # more main.py flags after --

Prints the dev BLEU of every evaluation (the config's `eval_every_steps`; with `--steps N`,
four evaluations over the N steps) and the final test BLEU (average of the last checkpoints)
of both revisions side by side, and whether they are identical. Exit status: 0 identical,
1 different, 2 a run failed or an argument was refused (in one line, before anything is made),
130 / 143 stopped by Ctrl-C / SIGTERM.
"""

import argparse
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import scripts  # noqa: E402  (stdlib only, as this script)


def step_overrides(steps: Optional[int]) -> List[str]:
  """main.py flags for a shorter run of the embedded default: `steps` (>= 1) steps, four dev
  evaluations, checkpoints often enough to average the last 3 (the full run: 1300 / 400);
  None: none, the config's own run."""
  if steps is None:
    return []
  if steps < 1:
    raise ValueError(f'steps={steps}: expected at least 1 (None: the config\'s own)')
  return [f'--config.num_train_steps={steps}',
          f'--config.eval_every_steps={max(1, steps // 4)}',
          f'--config.checkpoint_every_steps={max(1, steps // 13)}',
          f'--config.warmup_steps={max(1, steps * 2000 // 5200)}']


def main_command(python: str, worktree: str, workdir: str, extra: Sequence[str]) -> List[str]:
  # --config=... must come before its overrides (config_flags reads it first).
  configs = [a for a in extra if a.startswith('--config=')]
  rest = [a for a in extra if not a.startswith('--config=')]
  return [python, os.path.join(worktree, 'main.py'), *configs, f'--workdir={workdir}', *rest]


def read_run(workdir: str) -> Dict[str, object]:
  """Dev BLEU by step (metrics.jsonl's `eval_dev/bleu`), the last training loss, and the test
  BLEU of the newest `eval_test_<step>.json` (None where the run wrote none)."""
  dev: Dict[int, float] = {}
  loss = None
  path = os.path.join(workdir, 'metrics.jsonl')
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      for line in f:
        if not line.strip():
          continue
        record = json.loads(line)
        if 'eval_dev/bleu' in record:
          dev[int(record['step'])] = record['eval_dev/bleu']
        if 'loss' in record:
          loss = (int(record['step']), record['loss'])
  test = None
  evals = glob.glob(os.path.join(workdir, 'eval_test_*.json'))
  if evals:
    newest = max(evals, key=lambda p: int(os.path.basename(p)[len('eval_test_'):].split('.')[0]))
    with open(newest, encoding='utf-8') as f:
      test = json.load(f).get('bleu')
  return {'dev_bleu': dev, 'test_bleu': test, 'last_loss': loss}


def compare(a: Dict[str, object], b: Dict[str, object], names: Sequence[str]) -> bool:
  """Prints the two runs side by side; True when every number is the same float."""
  width = max(12, *(len(n) for n in names))
  print(f'{"":>16}  {names[0]:>{width}}  {names[1]:>{width}}  same')
  same = True
  rows = []
  for step in sorted(set(a['dev_bleu']) | set(b['dev_bleu'])):
    rows.append((f'dev BLEU @{step}', a['dev_bleu'].get(step), b['dev_bleu'].get(step)))
  rows.append(('test BLEU', a['test_bleu'], b['test_bleu']))
  if a['last_loss'] or b['last_loss']:
    rows.append(('last train loss', a['last_loss'], b['last_loss']))
  for label, x, y in rows:
    equal = x == y and x is not None
    same &= equal
    show = lambda v: '-' if v is None else (f'{v[1]!r} @{v[0]}' if isinstance(v, tuple) else repr(v))
    print(f'{label:>16}  {show(x):>{width}}  {show(y):>{width}}  {"yes" if equal else "NO"}')
  return same


def _parse(argv: Optional[Sequence[str]]):
  """(args, main.py flags, the two revisions' commits), or exits in one line naming what
  cannot be honoured: nothing is made before every argument has been checked."""
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('revisions', nargs=2, metavar='REV', help='two git revisions (A, then B)')
  parser.add_argument('--steps', type=scripts.positive_int, default=None,
                      help='train N >= 1 steps instead of the config\'s (a quick check)')
  parser.add_argument('--repo', default=ROOT, help='the git repository whose revisions are '
                      'compared (default: this checkout)')
  parser.add_argument('--root', default='', help='folder for the worktrees and workdirs '
                      '(default: a new temporary folder)')
  parser.add_argument('--keep', action='store_true', help='keep the worktrees and workdirs')
  parser.add_argument('--python', default=sys.executable, help='the Python that runs main.py')
  parser.add_argument('--dry-run', action='store_true', help='print the commands, run nothing')
  args, extra = parser.parse_known_args(argv)
  extra = [a for a in extra if a != '--']
  unknown = [a for a in extra if not a.startswith('--config')]
  if unknown:
    parser.error(f'only --config flags are passed to main.py, not {unknown}')
  if subprocess.run(['git', '-C', args.repo, 'rev-parse', '--git-dir'], capture_output=True,
                    check=False).returncode:
    parser.error(f'--repo={args.repo}: not a git repository')
  args.repo = os.path.abspath(args.repo)
  if not shutil.which(args.python):
    parser.error(f'--python={args.python}: no such executable')
  if args.root:
    problem = scripts.unwritable(args.root, folder=True)
    if problem:
      parser.error(f'--root={args.root}: {problem}')
    args.root = os.path.abspath(args.root)
    for name in ('src0', 'src1', 'run0', 'run1'):
      if os.path.lexists(os.path.join(args.root, name)):
        parser.error(f'--root={args.root}: {name} exists in it; give a new or empty folder')
  shas = []
  for rev in args.revisions:
    result = subprocess.run(['git', '-C', args.repo, 'rev-parse', '--verify', f'{rev}^{{commit}}'],
                            capture_output=True, text=True, check=False)
    if result.returncode:
      parser.error(f'{rev!r} is not a git revision of {args.repo}')
    shas.append(result.stdout.strip())
  return args, step_overrides(args.steps) + extra, shas


def run(argv: Optional[Sequence[str]] = None) -> int:
  """Both runs and their comparison; the exit status (see the module's docstring; 130 / 143:
  stopped by Ctrl-C / SIGTERM, with the worktrees and what the runs wrote removed)."""
  args, flags, shas = _parse(argv)
  threads = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  print(f'{threads} CPU(s) available to both runs; XLA_FLAGS={os.environ.get("XLA_FLAGS", "")!r}')
  if args.dry_run:
    root = args.root or os.path.join(tempfile.gettempdir(), 't2t_same_machine_XXXXXX')
    for i, (rev, sha) in enumerate(zip(args.revisions, shas)):
      worktree = os.path.join(root, f'src{i}')
      print(f'# {rev} ({sha[:12]})')
      print(' '.join(['git', '-C', args.repo, 'worktree', 'add', '--detach', worktree, sha]))
      train = main_command(args.python, worktree, os.path.join(root, f'run{i}'), flags)
      print(f'(cd {worktree} && ' + ' '.join(train) + ')')
    return 0
  try:
    with scripts.stops_raise():
      return _both(args, flags, shas)
  except scripts.Stopped as stop:
    print(f'same_machine: stopped by {stop}; ' + ('kept what it made' if args.keep else
          'the worktrees and workdirs it made were removed'), file=sys.stderr)
    return stop.exit_code


def _both(args: argparse.Namespace, flags: Sequence[str], shas: Sequence[str]) -> int:
  """Both runs in worktrees under `args.root` (or a new temporary folder); whatever ends
  them, the worktrees, the workdirs and a folder this made are removed, unless `--keep`."""
  made = not args.root or not os.path.exists(args.root)
  root = args.root
  env = dict(os.environ)
  env.pop('PYTHONPATH', None)
  try:
    with scripts.deferred_stops():
      root = args.root or tempfile.mkdtemp(prefix='t2t_same_machine_')
      os.makedirs(root, exist_ok=True)
    results = []
    with contextlib.ExitStack() as worktrees:
      for i, (rev, sha) in enumerate(zip(args.revisions, shas)):
        worktree, workdir = os.path.join(root, f'src{i}'), os.path.join(root, f'run{i}')
        try:
          worktrees.enter_context(scripts.git_worktree(args.repo, worktree, sha, args.keep))
        except scripts.WorktreeError as e:
          print(f'error: {e}', file=sys.stderr)
          return 2
        train = main_command(args.python, worktree, workdir, flags)
        print(f'{rev} ({sha[:12]}): {" ".join(train)}', flush=True)
        where = subprocess.run([args.python, '-c', 'import os, t2t_jax\n'
                                'print(os.path.realpath(t2t_jax.__file__))'],
                               cwd=worktree, env=dict(env, PYTHONPATH=worktree),
                               capture_output=True, text=True, check=False)
        if not where.stdout.startswith(os.path.realpath(worktree) + os.sep):
          print(f'error: {args.python} imports t2t_jax from '
                f'{where.stdout.strip() or where.stderr}, not from {worktree}', file=sys.stderr)
          return 2
        result = subprocess.run(train, cwd=worktree, env=dict(env, PYTHONPATH=worktree),
                                capture_output=True, text=True, check=False)
        if result.returncode:
          print(f'error: {rev} failed (exit {result.returncode}):\n{result.stderr[-3000:]}',
                file=sys.stderr)
          return 2
        results.append(read_run(workdir))
    same = compare(results[0], results[1], args.revisions)
    print('identical' if same else 'DIFFERENT')
    return 0 if same else 1
  finally:
    with scripts.deferred_stops():
      if args.keep:
        print(f'kept: {root}')
      elif made:
        shutil.rmtree(root, ignore_errors=True)
      else:
        for i in range(2):
          shutil.rmtree(os.path.join(root, f'run{i}'), ignore_errors=True)


if __name__ == '__main__':
  sys.exit(run())
