"""Device check stages (benchmarks/device/check.py): the embedded default end to end.

embedded_default: `python main.py --workdir=DIR` exactly as a user types it (on the device the
check runs on), timed from the command's start to its exit, compilations included; dev BLEU
from `metrics.jsonl`, test BLEU from `eval_test_<step>.json`. With --smoke: a 20-step tiny
model without the final test evaluation.

embedded_decode: that model decodes the bundled test set (--smoke: its first 16 sentences)
with `--mode=decode` on the device and with the CPU backend (`JAX_PLATFORMS=cpu`): the number
of differing lines and the BLEU of each against the references. The goal: identical, or BLEU
within 0.2 (GPU sums are not bitwise the CPU's). Also sentences/s of each whole command.
"""

import glob
import gzip
import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from benchmarks.device import children
from benchmarks.device.check import ROOT, Context, goal
from benchmarks.shared import harness

BUNDLED = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es')
REFERENCE_TEST_BLEU = 30.28  # README: the embedded default on the 2-core CPU
SMOKE_FLAGS = ('--config.num_train_steps=20', '--config.vocab_size=300',
               '--config.vocab_sample_sentences=3000', '--config.d_model=32',
               '--config.d_ff=64', '--config.num_heads=2', '--config.num_layers=1',
               '--config.max_len=64', '--config.max_length=32', '--config.bucket_lengths=(16,32)',
               '--config.tokens_per_batch=512',
               '--config.checkpoint_every_steps=10', '--config.eval_every_steps=10',
               '--config.eval_bleu_sentences=8', '--config.log_every_steps=10',
               '--config.final_eval_split=')
SMOKE_SENTENCES = 16
DECODE_SENTENCES = 300  # of the test split, decoded on the device and the CPU backend
# configs/quickstart.py decodes 4 sentences a batch, the fastest on a 2-core CPU, where a
# beam-search step is mostly fixed costs; an accelerator wants wide batches (default.py's 64).
ACCELERATOR_FLAGS = ('--config.decode_batch_sentences=64',)


def _workdir(ctx: Context) -> str:
  return os.path.join(ctx.scratch, 'embedded_default')


def _main_py(args: List[str], timeout: float, log: str, env: Optional[Dict[str, str]] = None,
             poll: Optional[Callable[[], None]] = None) -> Dict[str, Any]:
  """Runs `python main.py ARGS` (killed with this process: `die_with_parent`), its output in
  `log`, calling `poll()` every few seconds while it runs. (exit code, seconds)."""
  start = harness.now()
  deadline = start + max(timeout, 1)
  with open(log, 'w', encoding='utf-8') as out:
    child = _start_main_py(args, out, env)
    code: Any = None
    while code is None:
      try:
        code = child.wait(timeout=min(5.0, max(0.1, deadline - harness.now())))
      except subprocess.TimeoutExpired:
        if harness.now() >= deadline:
          child.kill()
          child.wait()
          code = 'timeout'
      if poll is not None:
        poll()
  return {'exit_code': code, 'seconds': harness.now() - start, 'compiles': _compiles(log)}


def _start_main_py(args: List[str], out: Any, env: Optional[Dict[str, str]] = None
                   ) -> subprocess.Popen:
  """`python main.py ARGS` started (dies with this process), its output into the file `out`."""
  command = children.launcher([sys.executable, os.path.join(ROOT, 'main.py'), *args])
  return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                          env=children.launcher_env(
                              dict(os.environ, JAX_LOG_COMPILES='1', **(env or {}))))


_COMPILED = re.compile(r'Finished XLA compilation of (\S+) in ([0-9.eE+-]+) sec')


def _compiles(log: str) -> Dict[str, Any]:
  """The XLA compilations main.py logged (JAX_LOG_COMPILES): how many, their seconds, and
  the programs over 0.5 s (the step, eval and decode programs; the rest are tiny helpers)."""
  with open(log, encoding='utf-8', errors='replace') as f:
    found = [(m.group(1), float(m.group(2))) for m in _COMPILED.finditer(f.read())]
  large = [(name, round(s, 2)) for name, s in found if s > 0.5]
  return {'count': len(found), 'seconds': sum(s for _, s in found), 'over_half_s': len(large),
          'large': large}


def _tail(path: str, chars: int = 1500) -> str:
  """The end of a main.py log without JAX_LOG_COMPILES' lines (long, and never the cause)."""
  with open(path, encoding='utf-8', errors='replace') as f:
    lines = [line for line in f if not line.startswith(('Compiling ', 'Finished '))]
  return ''.join(lines)[-chars:]


def embedded_default(ctx: Context) -> Dict[str, Any]:
  """Each dev BLEU is recorded as main.py writes it; then the test BLEU and the compiles."""
  workdir = _workdir(ctx)
  log = os.path.join(ctx.scratch, 'embedded_default.log')
  flags = list(SMOKE_FLAGS) if ctx.smoke else list(ACCELERATOR_FLAGS)
  metrics = os.path.join(workdir, 'metrics.jsonl')
  seen: List[List[float]] = []
  start = harness.now()

  def poll():
    for step, bleu in _dev_bleu(metrics)[len(seen):]:
      seen.append([step, bleu])
      ctx.emit({'part': f'dev_bleu@{step}', 'status': 'partial', 'step': step, 'dev_bleu': bleu,
                'seconds': harness.now() - start, 'summary': {'dev_bleu': bleu}})

  run = _main_py([f'--workdir={workdir}', *flags], ctx.left() - 5, log, poll=poll)
  record: Dict[str, Any] = {'command': 'python main.py --workdir=DIR ' + ' '.join(flags),
                            'wall_s': run['seconds'], 'exit_code': run['exit_code'],
                            'compiles': run['compiles']}
  if run['exit_code'] != 0:
    return dict(record, status='error', error=f'main.py exit {run["exit_code"]}',
                log_tail=_tail(log))
  record['dev_bleu'] = _dev_bleu(metrics)
  finals = sorted(glob.glob(os.path.join(workdir, 'eval_test_*.json')))
  record['goals'] = []
  if finals:
    with open(finals[-1], encoding='utf-8') as f:
      result = json.load(f)
    record['test'] = {k: result.get(k) for k in ('bleu', 'tokenized_bleu', 'perplexity', 'step')}
    bleu = result.get('bleu')
    record['goals'].append(goal(f'test BLEU {REFERENCE_TEST_BLEU} within 1.0', bleu,
                                bleu is not None and abs(bleu - REFERENCE_TEST_BLEU) <= 1.0))
  plots = glob.glob(os.path.join(workdir, 'plots', 'learning_curves_step.png'))
  if plots and not ctx.smoke:  # one of the check's few result files
    with open(plots[0], 'rb') as src, open(os.path.join(os.path.dirname(ctx.out),
                                                        'embedded_default_curves.png'), 'wb') as dst:
      dst.write(src.read())
  record['summary'] = {'wall_s': run['seconds'],
                       'dev_bleu': record['dev_bleu'][-1][1] if record['dev_bleu'] else None,
                       'test_bleu': record.get('test', {}).get('bleu'),
                       'programs_over_0.5s': run['compiles']['over_half_s'],
                       'compile_s': run['compiles']['seconds']}
  return record


def _dev_bleu(path: str) -> List[List[float]]:
  """[[step, dev BLEU]] from metrics.jsonl."""
  out = []
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      for line in f:
        m = json.loads(line)
        bleu = m.get('eval_dev/bleu')
        if bleu is not None:
          out.append([m.get('step'), bleu])
  return out


def _test_set(ctx: Context) -> Dict[str, List[str]]:
  sides = {}
  for lang in ('en', 'es'):
    with gzip.open(os.path.join(BUNDLED, f'test.{lang}.gz'), 'rt', encoding='utf-8') as f:
      sides[lang] = [line.rstrip('\n') for line in f]
    sides[lang] = sides[lang][:SMOKE_SENTENCES if ctx.smoke else DECODE_SENTENCES]
  return sides


def embedded_decode(ctx: Context) -> Dict[str, Any]:
  """Needs a checkpoint of the embedded default (a run stopped by its box still has some)."""
  import sacrebleu  # pylint: disable=import-outside-toplevel
  if not glob.glob(os.path.join(_workdir(ctx), 'checkpoints', '*')):
    return {'status': 'skipped', 'why': 'the embedded default wrote no checkpoint'}
  sides = _test_set(ctx)
  source = os.path.join(ctx.scratch, 'test.en')
  with open(source, 'w', encoding='utf-8') as f:
    f.write(''.join(line + '\n' for line in sides['en']))
  outputs, runs = {}, {}
  backends = [('device', {}), ('cpu', {'JAX_PLATFORMS': 'cpu'})]
  for name, env in backends:
    output = os.path.join(ctx.scratch, f'decoded_{name}.es')
    log = os.path.join(ctx.scratch, f'decode_{name}.log')
    flags = [] if ctx.smoke or name == 'cpu' else list(ACCELERATOR_FLAGS)
    runs[name] = _main_py(['--mode=decode', f'--workdir={_workdir(ctx)}', f'--input={source}',
                           f'--output={output}', *flags], ctx.left() - 3, log, env)
    if runs[name]['exit_code'] != 0:
      return {'status': 'error', 'error': f'decode on {name}: exit {runs[name]["exit_code"]}',
              'log_tail': _tail(log), 'runs': runs}
    with open(output, encoding='utf-8') as f:
      outputs[name] = [line.rstrip('\n') for line in f]
  n = len(sides['en'])
  bleu = {name: sacrebleu.corpus_bleu(lines, [sides['es']]).score
          for name, lines in outputs.items()}
  differing = sum(a != b for a, b in zip(outputs['device'], outputs['cpu']))
  gap = abs(bleu['device'] - bleu['cpu'])
  record = {'sentences': n, 'bleu': bleu,
            'differing_lines': differing,
            'sentences_per_s': {k: n / v['seconds'] for k, v in runs.items()},
            'command_s': {k: v['seconds'] for k, v in runs.items()},
            'compiles': {k: v['compiles'] for k, v in runs.items()},
            'goals': [goal('device decode identical to CPU, or BLEU within 0.2',
                           f'{differing} lines differ, BLEU gap {gap:.3f}',
                           differing == 0 or gap <= 0.2)]}
  record['summary'] = {'differing': differing, 'bleu_device': bleu['device'],
                       'bleu_cpu': bleu['cpu'],
                       'sent_per_s_device': record['sentences_per_s']['device']}
  return record


# Issue 44's measurements on the embedded default: the paper's Adam, Adafactor and the switch
# MoE of examples/variants.py, trained side by side on one device (each takes a quarter of its
# memory; the steps of a 2M-parameter model leave most of a GPU idle, and their compiles use
# separate CPU cores), so that each variant has its Adam peer in the same run.
VARIANT_RUNS = (('adam', ()),
                ('adafactor', ('--config.optimizer=adafactor',)),
                ('switch_moe', ('--config.model=examples/variants.py:switch_moe',)))


def _aux_losses(path: str) -> Dict[str, List[List[float]]]:
  """{aux_<name>: [[step, value]]} of the train records in metrics.jsonl."""
  out: Dict[str, List[List[float]]] = {}
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      for line in f:
        m = json.loads(line)
        for key, value in m.items():
          if key.split('/')[-1].startswith('aux_') and not key.startswith('eval'):
            out.setdefault(key, []).append([m.get('step'), value])
  return out


def _variant(name: str, workdir: str, code_wall: Tuple[Any, float], log: str
             ) -> Dict[str, Any]:
  """One variant's results from its workdir and log: exit code, seconds, BLEU, compiles."""
  finals = sorted(glob.glob(os.path.join(workdir, 'eval_test_*.json')))
  test = {}
  if finals:
    with open(finals[-1], encoding='utf-8') as f:
      test = {k: v for k, v in json.load(f).items() if k in ('bleu', 'tokenized_bleu', 'step')}
  aux = _aux_losses(os.path.join(workdir, 'metrics.jsonl'))
  return {'extra_flags': list(dict(VARIANT_RUNS)[name]), 'exit_code': code_wall[0],
          'wall_s': code_wall[1], 'dev_bleu': _dev_bleu(os.path.join(workdir, 'metrics.jsonl')),
          'test': test, 'compiles': _compiles(log),
          'aux_first_last': {k: [v[0], v[-1]] for k, v in aux.items()},
          'log_tail': _tail(log, 600) if code_wall[0] != 0 else ''}


def _reusable_default(ctx: Context) -> Optional[Dict[str, Any]]:
  """With --smoke, this run's embedded_default record if it ran (ok) in this scratch: the
  command variant 'adam' runs (the smoke flags either way), so a smoke run of parts 2 and 4
  starts two main.py side by side instead of three (on a 2-core CPU ~20% of the smoke test's
  CPU time). On a device each part is a call of its own: 'adam' runs beside the others."""
  if not ctx.smoke:
    return None
  return next((r for r in reversed(ctx.records()) if r.get('stage') == 'embedded_default'
               and r.get('status') == 'ok' and 'wall_s' in r), None)


def embedded_variants(ctx: Context) -> Dict[str, Any]:
  """Each run's dev BLEU as main.py writes it; then each one's test BLEU, sown losses, seconds."""
  flags = list(SMOKE_FLAGS) if ctx.smoke else list(ACCELERATOR_FLAGS)
  env = {'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.25'}
  runs, seen, logs = {}, {}, {}
  codes: Dict[str, Any] = {}
  reused = _reusable_default(ctx)
  if reused:  # 'adam' is embedded_default's command: its run, not a third one side by side
    runs['adam'] = (_workdir(ctx), None)
    logs['adam'] = open(os.path.join(ctx.scratch, 'embedded_default.log'), encoding='utf-8')  # pylint: disable=consider-using-with
    codes['adam'] = (reused['exit_code'], reused['wall_s'])
  start = harness.now()
  for name, extra in VARIANT_RUNS:
    if name in runs:
      continue
    workdir = os.path.join(ctx.scratch, f'variant_{name}')
    logs[name] = open(os.path.join(ctx.scratch, f'variant_{name}.log'), 'w', encoding='utf-8')  # pylint: disable=consider-using-with
    runs[name] = (workdir, _start_main_py([f'--workdir={workdir}', *flags, *extra],
                                          logs[name], env))
    seen[name] = 0
  while len(codes) < len(runs):
    for name, (workdir, child) in runs.items():
      if name in codes:
        continue
      if child.poll() is not None:
        codes[name] = (child.returncode, harness.now() - start)
      elif ctx.left() < 5:
        child.kill()
        child.wait()
        codes[name] = ('timeout', harness.now() - start)
      bleus = _dev_bleu(os.path.join(workdir, 'metrics.jsonl'))
      for step, bleu in bleus[seen[name]:]:
        ctx.emit({'part': f'{name}@{step}', 'status': 'partial', 'variant': name, 'step': step,
                  'dev_bleu': bleu, 'seconds': harness.now() - start,
                  'summary': {'variant': name, 'dev_bleu': bleu}})
      seen[name] = len(bleus)
    time.sleep(2.0)
  record: Dict[str, Any] = {'variants': {}, 'flags': flags}
  for name, (workdir, _) in runs.items():
    logs[name].close()
    record['variants'][name] = dict(_variant(name, workdir, codes[name], logs[name].name),
                                    reused='embedded_default' if reused and name == 'adam'
                                    else '')
  failed = [n for n, v in record['variants'].items() if v['exit_code'] != 0]
  record['status'] = 'error' if failed else 'ok'
  if failed:
    record['error'] = f'main.py failed for {failed}'
  record['summary'] = {n: {'dev_bleu': v['dev_bleu'][-1][1] if v['dev_bleu'] else None,
                           'test_bleu': v['test'].get('bleu'), 'wall_s': round(v['wall_s'], 1)}
                       for n, v in record['variants'].items()}
  return record
