"""The accelerator proof: the stages of issue 36 and 42 on whatever device is present, as two
commands of about 4.5 minutes each, the most valuable first.

  python3 benchmarks/device/check.py --part 1 --out $OUT/device_check.jsonl   # the headline
  python3 benchmarks/device/check.py --part 2 --out $OUT/device_check.jsonl   # the rest
  python3 benchmarks/device/check.py --part 4,3 --budget 565 --out ...        # with time left
  python3 benchmarks/device/check.py --part sweep --out $OUT/device_check.jsonl  # ~9 minutes
  python3 benchmarks/device/check.py --part compile_peer --out $OUT/...        # 7.5 minutes
  python3 benchmarks/device/check.py --smoke --out /tmp/smoke.jsonl           # CPU, tiny sizes

A lent GPU comes rarely, for minutes, with nothing reachable: the check must work the first
time, say from its output alone what broke, and keep every number the moment it exists:

  * each stage runs in a child process of its own (its own process group, killed with its
    parent: a parent-death signal, and the group is killed when the parent stops) with a
    time box, its output in `device_check.log` beside `--out`; a crash, an out-of-memory or
    a hang loses that stage only;
  * a stage appends a record after each measurement (`ctx.emit`), and after every record the
    table (`device_check.txt` beside `--out`) is rewritten: whatever stops the run (a box,
    the device tool's 600 s limit, Ctrl-C, SIGTERM), what was measured is on disk;
  * Ctrl-C or SIGTERM stops the running stage's processes, writes the table and ends in one
    line (exit 130 / 143).

Part 1 (the headline): environment, numerics, base and big bf16 training against the PyTorch
peer with MFU and the wait fraction. Part 2: the embedded default end to end, its decode on
the device and the CPU, every form of Eq. 1. Part 3: compile times, beam decoding against
the peer, the bucketed layout. Part 4: the embedded default with Adam, Adafactor and the
switch MoE side by side. Boxes are the H200's measured times; a part's add up to its budget.
Parts `sweep` and `compile_peer` (issue 55; the stage table and their budgets are
`stages.py`'s): settings that could move the big model's MFU, one stage each, and the
torch.compile'd peer against ours at base and big.

`--smoke` runs every stage at tiny sizes on any backend (CI runs it in-process). A bad argument
(an unknown `--part`, `--part` with `--stages`, `--budget` under 5 s, an `--out` or `--scratch`
that cannot be written) stops it in one line before any stage; exit status 1 when no stage
measured anything.
"""

import argparse
import dataclasses
import importlib
import json
import os
import signal
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.device import children  # noqa: E402  (no jax in the parent)
from benchmarks.device.stages import (  # noqa: E402,F401  (the table; Stage for tests)
    MIN_STAGE_S, PART_BUDGET_S, PART_BUDGETS, PARTS, SMOKE_BUDGET_S, STAGES, Part, Stage)
from benchmarks.shared import harness, scripts  # noqa: E402  (no jax in the parent)


@dataclasses.dataclass
class Context:
  """What a stage gets: `smoke` (tiny sizes), `deadline` (harness.now() by which it should
  have written its record: loops stop adding work past it), `scratch` (a folder the stages
  share: the embedded default's workdir lives there), `out` (the records file) and
  `emit(record)` (appends a record of this stage at once; the returned record is the last)."""
  smoke: bool
  deadline: float
  scratch: str
  out: str
  emit: Callable[[Dict[str, Any]], Dict[str, Any]]
  stage: str = ''
  run: str = ''

  def left(self) -> float:
    return self.deadline - harness.now()

  def records(self) -> List[Dict[str, Any]]:
    """This run's records so far (a later stage reads an earlier one's, e.g. the GEMM peak)."""
    return read_records(self.out, self.run)


def table_path(out: str) -> str:
  return os.path.join(os.path.dirname(os.path.abspath(out)), 'device_check.txt')


def _emitter(out: str, run: str, stage: str, smoke: bool
             ) -> Callable[[Dict[str, Any]], Dict[str, Any]]:
  """Appends a record of `stage`, then rewrites the run's table beside `out`."""
  emit = harness.Emitter(out)

  def write(record: Dict[str, Any]) -> Dict[str, Any]:
    written = emit({'name': 'device_check', 'run': run, 'stage': stage, **record})
    write_table(out, run, smoke)
    return written
  return write


def write_table(out: str, run: str, smoke: bool) -> None:
  """The run's table so far, replacing the file at once (a reader never sees half of it)."""
  path = table_path(out)
  text = f'device check {run}{" (smoke)" if smoke else ""}\n{table(read_records(out, run))}\n'
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(path + '.tmp', path)


def _stages(args: argparse.Namespace) -> Tuple[Stage, ...]:
  if args.stage_table:  # tests: another table of stages, in the parent and its children
    module, name = args.stage_table.split(':')
    return getattr(importlib.import_module(module), name)
  return STAGES


def run_child(args: argparse.Namespace) -> int:
  """`--stage NAME`: one stage in this process (the parent's child, or --in-process)."""
  stage = next(s for s in _stages(args) if s.name == args.stage)
  emit = _emitter(args.out, args.run, stage.name, args.smoke)
  ctx = Context(smoke=args.smoke, deadline=args.deadline, scratch=args.scratch, out=args.out,
                emit=emit, stage=stage.name, run=args.run)
  start = harness.now()
  try:
    if stage.starts_jax:
      harness.start_jax()
    module, name = stage.function.split(':')
    record = getattr(importlib.import_module(module), name)(ctx)
  except Exception as e:  # pylint: disable=broad-except  (recorded: the next stage goes on)
    import traceback  # pylint: disable=import-outside-toplevel
    emit({'status': 'error', 'seconds': harness.now() - start,
          'error': f'{type(e).__name__}: {e}'.splitlines()[0][:500],
          'traceback': traceback.format_exc()[-3000:]})
    return 1
  emit({'status': record.pop('status', 'ok'), 'seconds': harness.now() - start,
        'pid': os.getpid(), **record})
  return 0


def _final_status(out: str, run: str, stage: str) -> Optional[str]:
  """The status of the last record `stage` wrote in this run (None: none)."""
  status = None
  for record in read_records(out, run):
    if record.get('stage') == stage and 'status' in record:
      status = record['status']
  return status


def run_all(args: argparse.Namespace, wanted: List[Stage]) -> None:
  """Every stage of `wanted` in turn within the budget; a stop signal ends the running
  stage's processes, records it and re-raises `scripts.Stopped`."""
  budget_end = harness.now() + args.budget
  log_path = os.path.join(os.path.dirname(args.out), 'device_check.log')
  with open(log_path, 'a', encoding='utf-8') as log:
    for stage in wanted:
      box = stage.smoke_box_s if args.smoke else stage.box_s
      deadline = harness.now() + box if stage.final else min(harness.now() + box, budget_end)
      emit = _emitter(args.out, args.run, stage.name, args.smoke)
      if stage is not wanted[0] and deadline - harness.now() < MIN_STAGE_S:
        emit({'status': 'skipped', 'seconds': 0.0, 'why': 'the budget is spent'})
        continue
      start = harness.now()
      try:
        if args.in_process:
          child_args = argparse.Namespace(**dict(vars(args), stage=stage.name,
                                                 deadline=deadline))
          problem = None if run_child(child_args) == 0 else 'failed'
        else:
          problem = children.run_stage(_child_command(stage, args, deadline),
                                       _child_env(stage), deadline, log)
      except scripts.Stopped as stop:
        emit({'status': 'stopped', 'seconds': harness.now() - start,
              'error': f'{stop} during the stage: its processes were stopped'})
        raise
      status = _final_status(args.out, args.run, stage.name)
      if problem and status in (None, 'partial'):
        emit({'status': 'timeout' if problem.startswith('timeout') else 'error',
              'seconds': harness.now() - start, 'error': problem,
              'log_tail': '' if args.in_process else
              children.log_tail(log_path, stage.name)})


def _child_command(stage: Stage, args: argparse.Namespace, deadline: float) -> List[str]:
  command = [sys.executable, os.path.abspath(__file__), '--stage', stage.name, '--run',
             args.run, '--out', args.out, '--scratch', args.scratch, '--deadline', str(deadline)]
  command += ['--smoke'] if args.smoke else []
  command += ['--stage-table', args.stage_table] if args.stage_table else []
  return command


def _child_env(stage: Stage) -> Dict[str, str]:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [ROOT] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
  if stage.xla_flags:
    env['XLA_FLAGS'] = f'{env.get("XLA_FLAGS", "")} {stage.xla_flags}'.strip()
  if stage.shares_device:
    env.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
    env.setdefault('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.6')
  return env


def read_records(path: str, run: str) -> List[Dict[str, Any]]:
  """The records of run `run` in the JSON-lines file `path` (a line cut short by a kill is
  left out)."""
  if not os.path.exists(path):
    return []
  records = []
  with open(path, encoding='utf-8') as f:
    for line in f:
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return [r for r in records if r.get('run') == run and r.get('name') == 'device_check']


def table(records: List[Dict[str, Any]]) -> str:
  """One line per stage record (status, seconds, headline numbers), then every goal with
  met / MISSED."""
  lines = [f'{"stage":<26} {"status":<8} {"seconds":>7}  numbers', '-' * 100]
  goals: Dict[str, List[Tuple[str, Dict[str, Any]]]] = {}
  for r in records:
    if 'status' not in r:
      continue
    numbers = '; '.join(f'{k} {_fmt(v)}' for k, v in r.get('summary', {}).items())
    if r['status'] not in ('ok', 'partial'):
      numbers = (r.get('error') or r.get('why') or '') + (f'; {numbers}' if numbers else '')
    label = r['stage'] + (f'/{r["part"]}' if r.get('part') else '')
    lines.append(f'{label:<26} {r["status"]:<8} {r.get("seconds", 0):>7.1f}  {numbers}')
    if r['status'] != 'partial' and 'goals' in r:  # the stage's own list replaces its parts'
      goals[r['stage']] = []
    goals.setdefault(r['stage'], []).extend((label, g) for g in r.get('goals', []))
  goals_list = [item for items in goals.values() for item in items]
  if goals_list:
    lines += ['', 'goals:']
    lines += [f'  {"met   " if g["met"] else "MISSED"} {label}: {g["goal"]} '
              f'(measured {_fmt(g["value"])})' for label, g in goals_list]
  return '\n'.join(lines)


def _fmt(value: Any) -> str:
  if isinstance(value, float):
    return f'{value:.3g}' if abs(value) < 1e4 else f'{value:,.0f}'
  return str(value)


def goal(text: str, value: Any, met: bool) -> Dict[str, Any]:
  """One goal of a record: what it asks, the measured value, and whether it was met."""
  return {'goal': text, 'value': value, 'met': bool(met)}


def _parts(text: str) -> Set[Part]:
  """The parts a `--part` value names (numbers and names of `PARTS`); empty if any is not
  one."""
  named = {str(p): p for p in PARTS}
  parts = [p.strip() for p in text.split(',') if p.strip()]
  return {named[p] for p in parts} if parts and all(p in named for p in parts) else set()


def _parse(argv: Optional[List[str]]) -> Tuple[argparse.Namespace, List[Stage]]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', default=None,
                      help='JSON-lines file the records are appended to (default: benchmarks/'
                           'results/device_check.jsonl; --smoke: the temp folder\'s)')
  parser.add_argument('--part', default=None, help='comma list of parts: 1 (the headline), '
                      '2 (the rest), 3 (compiles, decode, the bucketed layout), 4 (issue 44\'s '
                      'variants on the embedded default), sweep (settings for the big model\'s '
                      'MFU), compile_peer (torch.compile\'d peer); default 1,2')
  parser.add_argument('--smoke', action='store_true', help='tiny sizes, any backend')
  parser.add_argument('--stages', default=None,
                      help='comma list of stage names (default: those of --part)')
  parser.add_argument('--budget', type=float, default=None,
                      help=f'seconds for the whole check (default: the parts\' budgets, '
                           f'{PART_BUDGET_S} for parts 1-4; '
                           f'smoke {SMOKE_BUDGET_S})')
  parser.add_argument('--in-process', action='store_true',
                      help='run the stages in this process (no isolation; CI smoke)')
  parser.add_argument('--scratch', default=None, help='folder the stages share (default: temp)')
  for hidden in ('--stage', '--run', '--stage-table'):
    parser.add_argument(hidden, default=None, help=argparse.SUPPRESS)
  parser.add_argument('--deadline', type=float, default=0.0, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  stages = _stages(args)
  # Checked with --stages too (where it is refused): a bad --part never goes unsaid.
  parts = _parts('1,2' if args.part is None else args.part)
  if not parts:
    parser.error(f'--part={args.part!r}: expected a comma list of '
                 f'{", ".join(str(p) for p in PARTS)}')
  wanted = [s for s in stages if s.part in parts]
  if args.stages is not None:
    names = [n for n in args.stages.split(',') if n]
    unknown = sorted(set(names) - {s.name for s in stages})
    if unknown:
      parser.error(f'--stages: unknown stage(s) {unknown}; known: {[s.name for s in stages]}')
    if not names:
      parser.error(f'--stages={args.stages!r} selects no stage; known: {[s.name for s in stages]}')
    if args.part is not None:
      parser.error(f'--part={args.part} with --stages: give one (--stages runs the stages named, '
                   f'of any part)')
    wanted = [s for s in stages if s.name in names]
  elif args.budget is None and not args.smoke:
    args.budget = sum(PART_BUDGETS[p] for p in parts)
  if args.budget is not None and not args.budget >= MIN_STAGE_S:
    parser.error(f'--budget={args.budget:g}: expected at least {MIN_STAGE_S} seconds (the '
                 f'least a stage is started with)')
  if args.budget is None:
    args.budget = SMOKE_BUDGET_S if args.smoke else sum(s.box_s for s in wanted)
  args.run = args.run or harness.timestamp(compact=True)
  if args.out is None:
    args.out = (os.path.join(tempfile.gettempdir(), 'device_check_smoke.jsonl') if args.smoke
                else os.path.join(ROOT, 'benchmarks', 'results', 'device_check.jsonl'))
  args.out = os.path.abspath(args.out)
  if not args.stage:
    for flag, path, folder in (('--out', args.out, False), ('--scratch', args.scratch, True)):
      problem = path and scripts.unwritable(path, folder)
      if problem:
        parser.error(f'{flag}={path}: {problem}')
  return args, wanted


def main(argv: Optional[List[str]] = None) -> int:
  args, wanted = _parse(argv)
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  if args.stage:
    children.die_with_parent()
    return run_child(args)
  code = 0
  try:
    with scripts.stops_raise(), children.scratch_folder(args.scratch) as scratch:
      args.scratch = scratch
      run_all(args, wanted)
  except scripts.Stopped as stop:
    code = stop.exit_code
  write_table(args.out, args.run, args.smoke)
  with open(table_path(args.out), encoding='utf-8') as f:
    print(f.read(), flush=True)
  records = read_records(args.out, args.run)
  if code:
    print(f'device_check: stopped by {signal.Signals(code - 128).name}; the {len(records)} '
          f'records measured so far are in {args.out} and the table in {table_path(args.out)}',
          file=sys.stderr)
  elif not any(r.get('status') in ('ok', 'partial') for r in records):
    print(f'device_check: nothing was measured: every stage failed or was skipped (the table '
          f'above; the children\'s output in {os.path.dirname(args.out)}/device_check.log)',
          file=sys.stderr)
    code = 1
  return code


if __name__ == '__main__':
  sys.exit(main())
