"""The fourth damage tour's tries of what serves and measures a trained run (tours/
variants_and_tools_tries.py runs them): `--mode=export` and its self-check, an absent or unknown
JAX_PLATFORMS, `--mode=plan` for TPU topologies, and the device check
(benchmarks/device/check.py) given bad arguments or stopped."""

import glob
import os
import signal
import subprocess
import sys
import time

from benchmarks.shared import harness
from tours.common import ROOT, SMALL, checked, finish, start, wait_for


def export_tries(t, source):
  scratch = t.scratch
  w = t.copy()
  afile = os.path.join(scratch, 'plain-file')
  open(afile, 'w').write('x\n')
  for name, args, says, expected in (
      ('--output= (empty)', ['--format=stablehlo', '--output='], ['--output'], 'one-line error'),
      ('--quantization=int3', ['--format=ctranslate2', '--quantization=int3',
                               f'--output={scratch}/q3'], ['int3'], 'one-line error'),
      ('--quantization=int8 with stablehlo', ['--format=stablehlo', '--quantization=int8',
                                              f'--output={scratch}/q8'], ['quantization'],
       'one-line error'),
      ('--output inside a regular file', ['--format=ctranslate2',
                                          f'--output={afile}/ct2'], ['plain-file'],
       'one-line error'),
      ('--checkpoint=10 (an older step)', ['--format=ctranslate2', '--checkpoint=10',
                                           f'--output={scratch}/ct2-10'], None, 'ok'),
      ('--checkpoint=abc', ['--format=ctranslate2', '--checkpoint=abc',
                            f'--output={scratch}/ct2-abc'], ['abc'], 'one-line error'),
      ('--format=ctranslate2 --quantization=int8 (self-check through float32)', [
          '--format=ctranslate2', '--quantization=int8', f'--output={scratch}/ct2-int8'], None,
       'ok')):
    t.run(f'fourth: export {name}', ['--mode=export', f'--workdir={w}', *args], expected,
          says=says)
  # A checkpoint whose recorded model is damaged (its variant spec), export.
  w2 = t.copy_of(t.variant)
  for path in glob.glob(os.path.join(w2, 'checkpoints', '*', 'config', '*')):
    if os.path.isfile(path):
      text = open(path, encoding='utf-8', errors='replace').read()
      if 'myvariants.py' in text:
        open(path, 'w', encoding='utf-8').write(text.replace(':gqa', ':no_such_factory'))
  t.run('fourth: checkpoint config names a factory that is gone, export', [
      '--mode=export', '--format=stablehlo', f'--workdir={w2}',
      f'--output={scratch}/gone-hlo'], 'one-line error', says=['no_such_factory'])


def platform_tries(t, source):
  w = t.copy()
  for value in ('cuda', 'bogus', 'tpu'):
    t.run(f'fourth: JAX_PLATFORMS={value}, decode', ['--mode=decode', f'--workdir={w}',
          f'--input={source}'], 'one-line error', env={'JAX_PLATFORMS': value},
          says=['JAX_PLATFORMS'])
  t.run('fourth: JAX_PLATFORMS=cuda, info', ['--mode=info', *SMALL], ('ok', 'one-line error'),
        env={'JAX_PLATFORMS': 'cuda'}, check=lambda r: checked(r, says=['JAX_PLATFORMS']))


def plan_tries(t, source):
  scratch = t.scratch
  existing = os.path.join(scratch, 'plan-exists.json')
  open(existing, 'w').write('{}\n')
  for name, args, says in (
      ('no --topology', [], ['--topology']),
      ('--topology=v5e:3x3 (no such slice)', ['--topology=v5e:3x3'], ['v5e:3x3']),
      ('--topology=nonsense', ['--topology=nonsense'], ['nonsense']),
      ('--output is an existing file', ['--topology=v5e:2x2', f'--output={existing}'],
       ['plan-exists.json'])):
    t.run(f'fourth: plan {name}', ['--mode=plan', *SMALL, *args], 'one-line error', says=says)
  if not t.wanted('fourth: plan Ctrl-C'):
    return
  cache = os.path.join(scratch, 'plan-cache')
  target = os.path.join(scratch, 'plan-int.json')
  began = harness.timed().start()
  process = start('--mode=plan', *SMALL, '--topology=v5e:2x2', f'--output={target}',
                  f'--compilation_cache={cache}')
  wait_for(lambda: began.seconds > 12 or process.poll() is not None, timeout=60, poll=0.1)
  if process.poll() is None:
    os.killpg(process.pid, signal.SIGINT)
  result, hung = finish(process, timeout=120)
  outcome = ('hang' if hung else 'traceback' if 'Traceback (most recent call last)' in
             result.stderr else 'ok' if result.returncode == 0 and os.path.exists(target) else
             'wrong' if os.path.exists(target) or glob.glob(target + '*') else
             'interrupted' if result.returncode != 0 else 'wrong')
  t.record('fourth: plan Ctrl-C during compilation (nothing partial)', outcome, result,
           round(began.seconds, 1), ('interrupted', 'ok'))
  plan_dir = os.path.join(cache, 'plan')
  if os.path.isdir(plan_dir):
    for name in os.listdir(plan_dir):
      p = os.path.join(plan_dir, name)
      if os.path.isfile(p):
        open(p, 'w').write('{"garbled": ')
  t.run('fourth: plan with garbled plan-cache records', [
      '--mode=plan', *SMALL, '--topology=v5e:2x2', '--search_batch=false',
      '--plan_all_shapes=false', f'--output={scratch}/plan-2.json',
      f'--compilation_cache={cache}'], ('ok', 'warned'),
      expect_output=lambda r: os.path.exists(f'{scratch}/plan-2.json'))


def device_check_tries(t, source):
  scratch = t.scratch
  script = os.path.join(ROOT, 'benchmarks', 'device', 'check.py')

  def dc(name, args, expected, says=None, env=None):
    if not t.wanted(name):
      return
    result, seconds = harness.time_call(
        subprocess.run, [sys.executable, script, *args], capture_output=True, text=True,
        cwd=ROOT, timeout=300, env=dict(os.environ, **(env or {})))
    if 'Traceback (most recent call last)' in result.stderr:
      outcome = 'traceback'
    elif result.returncode == 0:
      outcome = 'ok'
    else:
      err = [l for l in result.stderr.splitlines() if 'error:' in l]
      outcome = ('one-line error' if len(err) == 1 and (not says or any(
          s in err[0] for s in says)) else 'misleading' if len(err) == 1 else 'other failure')
    t.record(name, outcome, result, round(seconds, 1), expected)

  out = os.path.join(scratch, 'dc', 'dc.jsonl')
  dc('fourth: device_check --part=4', ['--part=4', f'--out={out}'], 'one-line error', ['--part'])
  dc('fourth: device_check --part= (empty)', ['--part=', f'--out={out}'], 'one-line error',
     ['--part'])
  dc('fourth: device_check --stages=nosuch', ['--stages=nosuch', f'--out={out}'],
     'one-line error', ['nosuch'])
  dc('fourth: device_check --out is a folder', [f'--out={scratch}', '--smoke',
                                                '--stages=environment'], 'one-line error',
     ['--out'])
  open(os.path.join(scratch, 'plain-dc'), 'w').write('x')
  dc('fourth: device_check --out under a regular file', [
      f'--out={scratch}/plain-dc/x.jsonl', '--smoke', '--stages=environment'],
     'one-line error', ['--out'])
  dc('fourth: device_check --budget=-5', ['--budget=-5', '--smoke', '--stages=environment',
                                          f'--out={out}'], 'one-line error', ['--budget'])
  if not t.wanted('fourth: device_check Ctrl-C'):
    return
  process = subprocess.Popen([sys.executable, script, '--smoke', f'--out={out}.int'],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
  began = harness.timed().start()
  wait_for(lambda: os.path.exists(out + '.int') or process.poll() is not None, timeout=120)
  time.sleep(1.0)
  if process.poll() is None:
    os.killpg(process.pid, signal.SIGINT)
  try:
    stdout, stderr = process.communicate(timeout=120)
    hung = False
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    stdout, stderr = process.communicate()
    hung = True
  result = subprocess.CompletedProcess([], process.returncode, stdout, stderr)
  kept = os.path.exists(out + '.int') and open(out + '.int').read().strip() != ''
  outcome = ('hang' if hung else 'traceback' if 'Traceback (most recent call last)' in stderr
             else 'ok' if process.returncode == 0 else
             'interrupted' if process.returncode == 130 and kept else 'wrong')
  t.record('fourth: device_check --smoke Ctrl-C after the first record', outcome, result,
           round(began.seconds, 1), ('interrupted', 'ok'))
