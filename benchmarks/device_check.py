"""The accelerator proof in one command: every stage of issue 36 on whatever device is present.

  python3 benchmarks/device_check.py --out $OUT/device_check.jsonl          # a GPU, < 9 min
  python3 benchmarks/device_check.py --smoke --out /tmp/smoke.jsonl         # CPU, tiny sizes

A lent GPU comes rarely, for minutes, with nothing reachable: the check must work the first
time and say from its output alone what broke. So each stage runs in a child process of its
own with a time box (a crash, an out-of-memory or a hang loses that stage only, and the GPU
memory of one stage is not held by the next); every record is appended to `--out` as soon as
it exists (a stage that is killed keeps what it wrote), a stage that fails or runs over gets
a record saying so with the end of its stderr, and the end is a table (also written beside
`--out` as `device_check.txt`). The children's output goes to `device_check.log` there.

Stages, in order (the table's goals in brackets):
  environment       device, memory, driver and CUDA, library versions, XLA flags
  numerics          base in float32 on the device against the host CPU backend in the same
                    process (loss, gradients, logits; default and 'highest' matmul precision);
                    bfloat16 against float32 [bounded, and not equal]
  attention_forms   every form of Eq. 1 (einsum, heads-first, few-query, XLA fused, cuDNN) and
                    the model with attention_impl='cudnn' against the einsum reference
  embedded_default  `python main.py --workdir=DIR` on the device: wall time, dev and test BLEU
                    [test BLEU 30.3 within 1.0]
  embedded_decode   its model decodes the bundled test set on the device and on the CPU
                    backend [identical, or BLEU within 0.2]; sentences/s
  train_base, train_big
                    bfloat16 at 25,000 target tokens a step through the project's train step
                    and the token store's batches (a synthetic corpus with WMT-like lengths),
                    packed and bucketed: step time, real target tokens/s, MFU, peak device
                    memory, the time the device waits for batches [< 2%], the PyTorch peer
                    (eager, torch.compile) on the same batch shape [ours >= 1.0x the best;
                    MFU >= 40% for big]
  compile           seconds of every program a base run compiles (train, dev eval, decode)
  decode_speed      beam 4 at base size, 128 sentences, ours against the peer's beam search

`--smoke` runs every stage at tiny sizes on any backend in under a minute (CI runs it
in-process, `--in-process`), so the record format, the stages and the table never rot.
"""

import argparse
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from typing import Any, Callable, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks import harness  # noqa: E402  (no jax: the parent process never starts it)


@dataclasses.dataclass(frozen=True)
class Stage:
  """One stage: `function` is 'module:name', called with a `Context`, returning a record."""
  name: str
  function: str
  box_s: float        # its time box on an accelerator
  smoke_box_s: float  # and with --smoke
  needs: str = ''     # a stage whose success it needs
  # Stages with the PyTorch peer in the same process: JAX takes its memory as it needs it, up
  # to 60% of the device, instead of 75% up front, so the peer's allocator has the rest.
  shares_device: bool = False
  # Stages that run main.py in children start no backend themselves: a process holding the
  # device (JAX takes 75% of a GPU's memory when it starts) would starve the child's.
  starts_jax: bool = True


# The user-facing proof first (the embedded default), then speed; a stage that outruns the
# budget is skipped and named, and `--stages` reruns it alone.
STAGES = (
    Stage('environment', 'benchmarks.device_numerics:environment', 20, 30),
    Stage('numerics', 'benchmarks.device_numerics:numerics', 45, 60),
    Stage('embedded_default', 'benchmarks.device_e2e:embedded_default', 180, 120,
          starts_jax=False),
    Stage('embedded_decode', 'benchmarks.device_e2e:embedded_decode', 45, 60,
          needs='embedded_default', starts_jax=False),
    Stage('attention_forms', 'benchmarks.device_numerics:attention_forms', 30, 30),
    Stage('train_base', 'benchmarks.device_train:train_base', 110, 60, shares_device=True),
    Stage('train_big', 'benchmarks.device_train:train_big', 120, 60, shares_device=True),
    Stage('compile', 'benchmarks.device_train:compile_times', 40, 40),
    Stage('decode_speed', 'benchmarks.device_train:decode_speed', 35, 30, shares_device=True),
)
BUDGET_S = 530  # the whole check on one H100: under 9 minutes
SMOKE_BUDGET_S = 300


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

  def left(self) -> float:
    return self.deadline - harness.now()


def _emitter(out: Optional[str], run: str, stage: str) -> Callable[[Dict[str, Any]], Dict[str, Any]]:
  emit = harness.Emitter(out)
  return lambda record: emit({'name': 'device_check', 'run': run, 'stage': stage, **record})


def _call(stage: Stage, ctx: Context) -> Dict[str, Any]:
  module, name = stage.function.split(':')
  return getattr(importlib.import_module(module), name)(ctx)


def run_child(args: argparse.Namespace) -> int:
  """`--stage NAME`: one stage in this process (the parent's child, or --in-process)."""
  stage = next(s for s in STAGES if s.name == args.stage)
  emit = _emitter(args.out, args.run, stage.name)
  ctx = Context(smoke=args.smoke, deadline=args.deadline, scratch=args.scratch, out=args.out,
                emit=emit, stage=stage.name)
  start = harness.now()
  try:
    if stage.starts_jax:
      harness.start_jax()
    record = _call(stage, ctx)
  except Exception as e:  # pylint: disable=broad-except  (recorded: the next stage goes on)
    emit({'status': 'error', 'seconds': harness.now() - start,
          'error': f'{type(e).__name__}: {e}'.splitlines()[0][:500],
          'traceback': traceback.format_exc()[-3000:]})
    return 1
  emit({'status': record.pop('status', 'ok'), 'seconds': harness.now() - start,
        'pid': os.getpid(), **record})
  return 0


def _stage_status(out: str, run: str, stage: str) -> Optional[str]:
  """The status of the last record `stage` wrote in this run (None: none)."""
  status = None
  for record in read_records(out, run):
    if record.get('stage') == stage and 'status' in record:
      status = record['status']
  return status


def _spawn(stage: Stage, args: argparse.Namespace, deadline: float, log) -> Optional[str]:
  """Runs `stage` in a child; returns a problem ('timeout after ...', 'exit code ...') or None."""
  command = [sys.executable, os.path.abspath(__file__), '--stage', stage.name, '--run', args.run,
             '--out', args.out, '--scratch', args.scratch, '--deadline', str(deadline)]
  command += ['--smoke'] if args.smoke else []
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [ROOT] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
  if stage.shares_device:
    env.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
    env.setdefault('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.6')
  log.write(f'\n===== {stage.name} ({harness.timestamp()}) =====\n')
  log.flush()
  # A few seconds past the deadline for the stage to write what it has.
  timeout = max(5.0, deadline - harness.now() + 15)
  child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
  try:
    code = child.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(child.pid, 9)
    child.wait()
    return f'timeout after {timeout:.0f} s (killed)'
  return None if code == 0 else f'exit code {code}'


def _log_tail(path: str, stage: str, chars: int = 2500) -> str:
  with open(path, encoding='utf-8', errors='replace') as f:
    text = f.read()
  return text[text.rfind(f'===== {stage} '):][-chars:]


def run_all(args: argparse.Namespace) -> List[Dict[str, Any]]:
  """Every selected stage in turn within the budget; returns this run's records."""
  wanted = [s for s in STAGES if not args.stages or s.name in args.stages.split(',')]
  budget_end = harness.now() + args.budget
  log_path = os.path.join(os.path.dirname(os.path.abspath(args.out)), 'device_check.log')
  ok = set()
  with open(log_path, 'a', encoding='utf-8') as log:
    for stage in wanted:
      box = stage.smoke_box_s if args.smoke else stage.box_s
      deadline = min(harness.now() + box, budget_end)
      emit = _emitter(args.out, args.run, stage.name)
      if stage.needs and stage.needs not in ok:
        emit({'status': 'skipped', 'seconds': 0.0, 'why': f'needs {stage.needs}'})
        continue
      if deadline - harness.now() < 5:
        emit({'status': 'skipped', 'seconds': 0.0, 'why': 'the budget is spent'})
        continue
      start = harness.now()
      if args.in_process:
        child_args = argparse.Namespace(**dict(vars(args), stage=stage.name, deadline=deadline))
        problem = None if run_child(child_args) == 0 else 'failed'
      else:
        problem = _spawn(stage, args, deadline, log)
      status = _stage_status(args.out, args.run, stage.name)
      if problem and status in (None, 'partial'):
        emit({'status': 'timeout' if problem.startswith('timeout') else 'error',
              'seconds': harness.now() - start, 'error': problem,
              'log_tail': '' if args.in_process else _log_tail(log_path, stage.name)})
      elif status == 'ok':
        ok.add(stage.name)
  return read_records(args.out, args.run)


def read_records(path: str, run: str) -> List[Dict[str, Any]]:
  """The records of run `run` in the JSON-lines file `path`."""
  if not os.path.exists(path):
    return []
  with open(path, encoding='utf-8') as f:
    records = [json.loads(line) for line in f if line.strip()]
  return [r for r in records if r.get('run') == run and r.get('name') == 'device_check']


def table(records: List[Dict[str, Any]]) -> str:
  """The end-of-run table: one line per stage record (status, seconds, headline numbers),
  then every goal with met / MISSED."""
  lines = [f'{"stage":<18} {"status":<8} {"seconds":>7}  numbers', '-' * 100]
  goals = []
  for r in records:
    if 'status' not in r:
      continue
    numbers = '; '.join(f'{k} {_fmt(v)}' for k, v in r.get('summary', {}).items())
    if r['status'] not in ('ok', 'partial'):
      numbers = (r.get('error') or r.get('why') or '') + (f'; {numbers}' if numbers else '')
    label = r['stage'] + (f'/{r["part"]}' if r.get('part') else '')
    lines.append(f'{label:<18} {r["status"]:<8} {r.get("seconds", 0):>7.1f}  {numbers}')
    goals += [(label, g) for g in r.get('goals', [])]
  if goals:
    lines += ['', 'goals:']
    lines += [f'  {"met   " if g["met"] else "MISSED"} {label}: {g["goal"]} (measured {_fmt(g["value"])})'
              for label, g in goals]
  return '\n'.join(lines)


def _fmt(value: Any) -> str:
  if isinstance(value, float):
    return f'{value:.3g}' if abs(value) < 1e4 else f'{value:,.0f}'
  return str(value)


def goal(text: str, value: Any, met: bool) -> Dict[str, Any]:
  """One goal of a record: what it asks, the measured value, and whether it was met."""
  return {'goal': text, 'value': value, 'met': bool(met)}


def _parse(argv: Optional[List[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', default=os.path.join(ROOT, 'benchmarks', 'results',
                                                    'device_check.jsonl'),
                      help='JSON-lines file the records are appended to')
  parser.add_argument('--smoke', action='store_true', help='tiny sizes, any backend, < 1 min')
  parser.add_argument('--stages', default='', help='comma list of stage names (default: all)')
  parser.add_argument('--budget', type=float, default=None,
                      help=f'seconds for the whole check (default {BUDGET_S}, smoke '
                           f'{SMOKE_BUDGET_S})')
  parser.add_argument('--in-process', action='store_true',
                      help='run the stages in this process (no isolation; CI smoke)')
  parser.add_argument('--scratch', default=None, help='folder the stages share (default: temp)')
  parser.add_argument('--stage', help=argparse.SUPPRESS)
  parser.add_argument('--run', default=None, help=argparse.SUPPRESS)
  parser.add_argument('--deadline', type=float, default=0.0, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  unknown = set(filter(None, args.stages.split(','))) - {s.name for s in STAGES}
  if unknown:
    parser.error(f'unknown stage(s) {sorted(unknown)}; known: {[s.name for s in STAGES]}')
  if args.budget is None:
    args.budget = SMOKE_BUDGET_S if args.smoke else BUDGET_S
  args.run = args.run or harness.timestamp(compact=True)
  args.out = os.path.abspath(args.out)
  return args


def main(argv: Optional[List[str]] = None) -> int:
  args = _parse(argv)
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  if args.stage:
    return run_child(args)
  with tempfile.TemporaryDirectory(prefix='device_check_') as scratch:
    args.scratch = args.scratch or scratch
    records = run_all(args)
  text = table(records)
  print(text, flush=True)
  with open(os.path.join(os.path.dirname(args.out), 'device_check.txt'), 'a',
            encoding='utf-8') as f:
    f.write(f'device check {args.run}{" (smoke)" if args.smoke else ""}\n{text}\n\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
