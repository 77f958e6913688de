"""The fourth "hostile new user" tour (issue 43): new tries on the newest surfaces, none of the
earlier tours' (damage_tour.py, damage_tries.py, damage_new_tries.py). Model variants
(--config.model) and their pinned factory file, grouped-query attention (num_kv_heads), the
export and its self-check, `export_stablehlo_model`, `check_incremental`, NNX `generate`,
the data fingerprints and relative corpus paths, --mode=plan and its cache, JAX_PLATFORMS,
benchmarks/device/check.py, the vocabulary's record and empty splits.

  python tours/damage_fourth_tries.py [--scratch=DIR] [--out=FILE.jsonl] [--only=NAME,...]

It trains two small runs (common.SMALL, 20 steps: the paper's model, and
examples/variants.py:gqa from a copy of that file) and every try uses copies of them.
A command's outcome is classified as `common.checked` does; a library call runs in one
child process for them all and is classified by what it raises:
  one-line error  the exception the function documents (ValueError, TypeError, ExportError,
                  ...), its message naming the argument the try damaged;
  misleading      that exception, but its message does not name the argument;
  traceback       any other exception (KeyError, IndexError, a flax or jax error from inside);
  ok / wrong      no exception, and the result is / is not what it should be.
Each record carries `verdict`: OK (the outcome the try expects), MISLEADING, TRACEBACK, WRONG
(accepted and silently not what the user asked; or refused though valid) or HANG.

Imports only the tours' helpers (common.py), and nothing imports it: no import cycle.

Known open finding (benchmarks/results/damage_fourth_tour.jsonl): Ctrl-C 12 s into
`--mode=plan --topology=v5e:2x2` (batch search compiling) does not stop the plan within 120 s:
the main thread stays in interruptible.call's Event.wait while the worker compiles.
"""

import argparse
import collections
import glob
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import harness  # noqa: E402
from tours.common import (SMALL, Tour, checked, classify, corpus, finish,  # noqa: E402
                          main_py, start, wait_for)

VERDICTS = ('OK', 'MISLEADING', 'TRACEBACK', 'WRONG', 'HANG')
STEPS = ['--config.num_train_steps=20']


def verdict(outcome, expected):
  accepted = expected if isinstance(expected, tuple) else (expected,)
  if outcome in accepted:
    return 'OK'
  if outcome in ('traceback', 'hang'):
    return outcome.upper()
  if outcome in ('misleading', 'other failure'):
    return 'MISLEADING'
  if outcome == 'one-line error':  # refused though the try is valid
    return 'WRONG'
  return 'WRONG'  # ok / warned / wrong / interrupted where an error or another outcome was due


class FourthTour(Tour):
  """Tour with a verdict per record and a filter on try names (--only)."""

  def __init__(self, trained, scratch, out, only=None):
    super().__init__(trained, scratch, out)
    self.only = only
    self.verdicts = collections.Counter()
    self.non_ok = []

  def wanted(self, name):
    return not self.only or any(o in name for o in self.only)

  def record(self, name, outcome, result=None, seconds=None, expected=None):
    v = verdict(outcome, expected)
    self.verdicts[v] += 1
    first = ''
    if result is not None:
      lines = [l for l in (result.stderr or '').splitlines() if l.strip()]
      errors = [l for l in lines if l.startswith('error:') or 'Error' in l]
      first = (errors or lines or [(result.stdout or '').strip()])[-1 if not errors else 0][:300]
    if v != 'OK':
      self.non_ok.append({'try': name, 'verdict': v, 'first_line': first})
    line = {'try': name, 'outcome': outcome, 'expected': expected, 'verdict': v,
            'seconds': seconds, 'first_line': first,
            'rc': result.returncode if result is not None else None, 'tour': self.tour}
    if result is not None and v != 'OK':
      line['stderr_last_lines'] = (result.stderr or '').strip().splitlines()[-8:]
    print(json.dumps(line), flush=True)
    with open(self.out, 'a', encoding='utf-8') as f:
      f.write(json.dumps(line) + '\n')

  def run(self, name, args, expected, damaged=None, expect_output=None, stdin=None,
          check=None, env=None, cwd=None, says=None):
    if not self.wanted(name):
      return None
    command = [sys.executable, os.path.join(ROOT, 'main.py'), *args]
    result, seconds = harness.time_call(
        subprocess.run, command, capture_output=True, text=True, input=stdin,
        cwd=cwd or ROOT, timeout=900, env=dict(os.environ, **(env or {})))
    if check:
      outcome = check(result)
    elif says:
      outcome = checked(result, says=says)
    else:
      outcome = classify(result, damaged, expect_output)
    self.record(name, outcome, result, round(seconds, 1), expected)
    return result

  def copy_of(self, trained):
    self.n += 1
    path = os.path.join(self.scratch, f'w{self.n}')
    shutil.copytree(trained, path)
    return path


# --------------------------------------------------------------------------------------------
# Commands.

def variant_tries(t, source):
  """--config.model: bad specs on a fresh workdir (refused before any work, naming the spec),
  and the pinned factory file of a trained variant run."""
  scratch = t.scratch
  bad = os.path.join(scratch, 'bad_variants.py')
  with open(bad, 'w', encoding='utf-8') as f:
    f.write('import t2t_jax\n\n'
            'def returns_none(cfg):\n  return None\n\n'
            'def wrong_arity():\n  return None\n\n'
            'def raises(cfg):\n  raise RuntimeError("factory exploded")\n\n'
            'NOT_CALLABLE = 3\n')
  syntax = os.path.join(scratch, 'syntax_error.py')
  open(syntax, 'w').write('def gqa(cfg)\n  return cfg\n')
  broken_import = os.path.join(scratch, 'broken_import.py')
  open(broken_import, 'w').write('import no_such_package_xyz\n\ndef f(cfg):\n  return cfg\n')
  fresh = lambda: os.path.join(scratch, f'fresh-{len(os.listdir(scratch))}')  # noqa: E731
  for name, spec, says in (
      ('factory name missing from examples/variants.py', 'examples/variants.py:nosuch',
       ['nosuch']),
      ('no such factory file', 'examples/nosuch_file.py:gqa', ['nosuch_file']),
      ('spec without :factory', 'examples/variants.py', ['examples/variants.py']),
      ('no such module', 't2t_jax.no_such_module:f', ['no_such_module']),
      ('factory is a helper with other arguments (rotate)', 'examples/variants.py:rotate',
       ['rotate']),
      ('factory is a linen module class (RelativeBias)', 'examples/variants.py:RelativeBias',
       ['RelativeBias']),
      ('factory file with a syntax error', f'{syntax}:gqa', ['syntax_error.py']),
      ('factory file importing a missing package', f'{broken_import}:f',
       ['no_such_package_xyz']),
      ('factory returns None', f'{bad}:returns_none', ['returns_none']),
      ('factory takes no argument', f'{bad}:wrong_arity', ['wrong_arity']),
      ('factory raises', f'{bad}:raises', ['raises', 'factory exploded']),
      ('factory is not callable', f'{bad}:NOT_CALLABLE', ['NOT_CALLABLE'])):
    t.run(f'fourth: --config.model={name}, train', ['--mode=train', f'--workdir={fresh()}',
          *SMALL, *STEPS, f'--config.model={spec}'], 'one-line error', says=says)
  t.run('fourth: --config.model=examples/variants.py:t5_bias, info', [
      '--mode=info', *SMALL, '--config.model=examples/variants.py:t5_bias'], 'ok')
  # The trained gqa variant, whose factory file is a copy in the scratch folder.
  w = t.copy_of(t.variant)
  factory = os.path.join(scratch, 'myvariants.py')
  t.run('fourth: decode a variant run (factory file in place)', [
      '--mode=decode', f'--workdir={w}', f'--input={source}'], 'ok')
  original = open(factory, encoding='utf-8').read()
  open(factory, 'w', encoding='utf-8').write(original.replace(
      'cfg.replace(num_kv_heads=2)', 'cfg.replace(num_kv_heads=1)'))
  t.run('fourth: factory file edited (gqa -> multi-query) after training, decode', [
      '--mode=decode', f'--workdir={w}', f'--input={source}'], ('one-line error', 'warned'),
      says=['myvariants.py', 'factory', 'gqa'], check=lambda r: 'warned' if r.returncode == 0 and
      'myvariants.py' in r.stderr else checked(r, says=['myvariants.py', 'gqa']))
  open(factory, 'w', encoding='utf-8').write(original + '\n# a comment only\n')
  t.run('fourth: factory file gains a comment only, decode', [
      '--mode=decode', f'--workdir={w}', f'--input={source}'], ('ok', 'warned'),
      check=lambda r: 'warned' if r.returncode == 0 and 'myvariants.py' in r.stderr
      else classify(r))
  os.rename(factory, factory + '.moved')
  t.run('fourth: factory file gone, decode', ['--mode=decode', f'--workdir={w}',
        f'--input={source}'], 'one-line error', says=['myvariants.py'])
  t.run('fourth: factory file gone, train resumes', ['--mode=train', f'--workdir={w}', *SMALL,
        '--config.num_train_steps=30'], 'one-line error', says=['myvariants.py'])
  os.rename(factory + '.moved', factory)
  open(factory, 'w', encoding='utf-8').write(original)
  t.run('fourth: --config.model= (paper model) on the variant run, train resumes', [
      '--mode=train', f'--workdir={w}', *SMALL, '--config.num_train_steps=30',
      '--config.model='], 'one-line error', says=['model'])
  t.run('fourth: --config.model=examples/variants.py:rotary on the paper run, decode', [
      '--mode=decode', f'--workdir={t.copy()}', f'--input={source}',
      '--config.model=examples/variants.py:rotary'], ('one-line error', 'warned'),
      check=lambda r: 'warned' if r.returncode == 0 and 'model' in r.stderr and 'W' in
      r.stderr else checked(r, says=['model']))


def gqa_tries(t, source):
  scratch = t.scratch
  fresh = lambda: os.path.join(scratch, f'fresh-{len(os.listdir(scratch))}')  # noqa: E731
  for value, says in (('3', ['num_kv_heads']), ('-1', ['num_kv_heads']),
                      ('8', ['num_kv_heads'])):
    t.run(f'fourth: --config.num_kv_heads={value} with num_heads=4, train', [
        '--mode=train', f'--workdir={fresh()}', *SMALL, *STEPS,
        f'--config.num_kv_heads={value}'], 'one-line error', says=says)
  t.run('fourth: --config.num_kv_heads=2.5, info', ['--mode=info', *SMALL,
        '--config.num_kv_heads=2.5'], 'one-line error', says=['num_kv_heads'])
  t.run('fourth: --config.num_kv_heads=2 on the paper run, train resumes', [
      '--mode=train', f'--workdir={t.copy()}', *SMALL, '--config.num_train_steps=30',
      '--config.num_kv_heads=2'], 'one-line error', says=['num_kv_heads'])
  t.run('fourth: --config.num_kv_heads=1 on the paper run, decode', [
      '--mode=decode', f'--workdir={t.copy()}', f'--input={source}',
      '--config.num_kv_heads=1'], ('one-line error', 'warned'),
      check=lambda r: 'warned' if r.returncode == 0 and 'num_kv_heads' in r.stderr else
      checked(r, says=['num_kv_heads']))
  t.run('fourth: --config.num_kv_heads=4 (= num_heads, the paper), info', [
      '--mode=info', *SMALL, '--config.num_kv_heads=4'], 'ok')
  w = t.copy_of(t.variant)
  out = os.path.join(scratch, 'gqa-ct2')
  t.run('fourth: export --format=ctranslate2 of the gqa variant (self-check)', [
      '--mode=export', '--format=ctranslate2', f'--workdir={w}', f'--output={out}'],
      ('ok', 'one-line error'), check=lambda r: checked(r, says=['num_heads_kv', 'variant',
                                                                 'ctranslate2', 'CTranslate2']))


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


def pin_tries(t, source):
  """Data fingerprints and relative corpus paths."""
  scratch = t.scratch
  rel_root = os.path.join(scratch, 'relroot')
  os.makedirs(rel_root)
  corpus(os.path.join(rel_root, 'rc'), n_train=3000, n_dev=50)
  w = os.path.join(scratch, 'relrun')
  result = t.run('fourth: train with a relative --config.local_corpus_dir=rc', [
      '--mode=train', f'--workdir={w}', *SMALL, *STEPS, '--config.local_corpus_dir=rc'],
      'ok', cwd=rel_root)
  if result is None or result.returncode != 0:
    return
  t.run('fourth: relative corpus, train resumed from another folder', [
      '--mode=train', f'--workdir={w}', *SMALL, '--config.num_train_steps=30',
      '--config.local_corpus_dir=rc'], 'one-line error', says=['rc'])
  t.run('fourth: relative corpus, eval from another folder', [
      '--mode=eval', f'--workdir={w}', '--config.eval_bleu_sentences=8'],
      ('ok', 'one-line error', 'warned'), check=lambda r: checked(r, says=['rc']))
  w2 = os.path.join(scratch, 'relrun2')
  shutil.copytree(w, w2)
  edit = os.path.join(rel_root, 'rc', 'dev.es')
  lines = open(edit, encoding='utf-8').read().split('\n')
  lines[3] = lines[3].upper()
  open(edit, 'w', encoding='utf-8').write('\n'.join(lines))
  t.run('fourth: dev.es edited after training, train resumes (only warns)', [
      '--mode=train', f'--workdir={w2}', *SMALL, '--config.num_train_steps=30',
      '--config.local_corpus_dir=rc'], 'warned', damaged='dev', cwd=rel_root)
  w3 = os.path.join(scratch, 'relrun3')
  shutil.copytree(w, w3)
  train_en = os.path.join(rel_root, 'rc', 'train.en')
  later = harness.now() + 100  # a newer mtime, same bytes
  os.utime(train_en, (later, later))
  t.run('fourth: train.en touched (same bytes), train resumes', [
      '--mode=train', f'--workdir={w3}', *SMALL, '--config.num_train_steps=30',
      '--config.local_corpus_dir=rc'], 'ok', cwd=rel_root)
  data = open(train_en, 'rb').read()
  os.remove(train_en)
  open(train_en + '.gz', 'wb').write(gzip.compress(data))
  t.run('fourth: train.en gzipped (same text), train resumes', [
      '--mode=train', f'--workdir={w3}', *SMALL, '--config.num_train_steps=40',
      '--config.local_corpus_dir=rc'], ('ok', 'one-line error'), cwd=rel_root,
      check=lambda r: checked(r, says=['train.en']))


def vocab_and_split_tries(t, source):
  scratch = t.scratch
  w = t.copy()
  os.remove(os.path.join(w, 'vocab', 'spm.meta.json'))
  t.run('fourth: vocab/spm.meta.json deleted, train resumes', ['--mode=train',
        f'--workdir={w}', *SMALL, '--config.num_train_steps=30'], ('ok', 'warned'),
        damaged='spm.meta.json')
  w = t.copy()
  meta = os.path.join(w, 'vocab', 'spm.meta.json')
  record = json.load(open(meta, encoding='utf-8'))
  record['vocab_size'] = 999
  json.dump(record, open(meta, 'w', encoding='utf-8'))
  t.run('fourth: vocab/spm.meta.json vocab_size edited, decode', ['--mode=decode',
        f'--workdir={w}', f'--input={source}'], ('ok', 'warned'), damaged='spm.meta.json')
  w = t.copy()
  os.remove(os.path.join(w, 'vocab', 'spm.vocab')) if os.path.exists(
      os.path.join(w, 'vocab', 'spm.vocab')) else None
  t.run('fourth: vocab/spm.vocab deleted, decode', ['--mode=decode', f'--workdir={w}',
        f'--input={source}'], ('ok', 'warned'))
  # Empty splits and inputs.
  for split, extra, says in (
      ('dev', ['--config.eval_every_steps=10'], ['dev']),
      ('test', ['--config.final_eval_split=test'], ['test'])):
    folder = corpus(os.path.join(scratch, f'empty-{split}'), n_dev=20)
    for lang in ('en', 'es'):
      open(os.path.join(folder, f'{split}.{lang}'), 'w').close()
    t.run(f'fourth: empty {split}.en and {split}.es, train', [
        '--mode=train', f'--workdir={scratch}/empty-{split}-run', *SMALL, *STEPS,
        f'--config.local_corpus_dir={folder}', *extra], 'one-line error', says=says)
  empty = os.path.join(scratch, 'empty.txt')
  open(empty, 'w').close()
  blanks = os.path.join(scratch, 'blanks.txt')
  open(blanks, 'w').write('\n\n\n')
  w = t.copy()
  t.run('fourth: decode an empty --input', ['--mode=decode', f'--workdir={w}',
        f'--input={empty}'], 'ok', expect_output=lambda r: r.stdout == '')
  t.run('fourth: decode an --input of three blank lines', ['--mode=decode', f'--workdir={w}',
        f'--input={blanks}'], 'ok', expect_output=lambda r: r.stdout.count('\n') == 3)
  t.run('fourth: attention of an empty --input', ['--mode=attention', f'--workdir={w}',
        f'--input={empty}', f'--output={scratch}/att-empty'], 'one-line error',
        says=['empty', 'no sentence', 'input'])
  t.run('fourth: eval --split=test with final_eval_split= on the bundled corpus', [
      '--mode=eval', f'--workdir={w}', '--split=test', '--config.eval_bleu_sentences=8'], 'ok')


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


# --------------------------------------------------------------------------------------------
# Library calls, all in one child process (one jax start-up).

LIBRARY_SETUP = '''
import json, os, sys, traceback
import numpy as np
import jax, jax.numpy as jnp
import t2t_jax
from t2t_jax.export.common import ExportError
from t2t_jax.data.tokenizer import TokenizerError
cfg = t2t_jax.TransformerConfig(vocab_size=400, d_model=32, d_ff=64, num_heads=4,
                                num_layers=1, max_len=64)
model = t2t_jax.Transformer(cfg)
params = t2t_jax.init_params(model, jax.random.PRNGKey(0))
ids = jnp.array([[23, 57, 9, 1, 0, 0], [5, 6, 7, 8, 9, 1]], jnp.int32)
SPM = sys.argv[1]
SCRATCH = sys.argv[2]
DOCUMENTED = (ValueError, TypeError, FileExistsError, ExportError, TokenizerError)
'''

LIBRARY_RUN = '''
for name, code, says in TRIES:
  try:
    value = eval(code) if '\\n' not in code and not code.startswith(('from ', 'import ')) else exec(code)
    out = {'name': name, 'raised': None, 'value': repr(value)[:300]}
  except Exception as e:  # what the user would see
    kind = ('documented' if isinstance(e, DOCUMENTED) and type(e).__module__.startswith(
        ('builtins', 't2t_jax')) else 'other')
    out = {'name': name, 'raised': f'{type(e).__name__}: {e}'.splitlines()[0][:300],
           'kind': kind, 'names': any(s in str(e) for s in says)}
  print('TRY ' + json.dumps(out), flush=True)
'''

# (name, code, says: words the message must hold, expected 'error' or a check of the value)
LIBRARY_TRIES = [
    ('export_stablehlo_model platforms=("metal",)',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x1", platforms=("metal",))',
     ['metal'], 'error'),
    ('export_stablehlo_model platforms="cpu" (a string)',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x2", platforms="cpu")',
     ['platforms'], 'error'),
    ('export_stablehlo_model params wrapped as {"params": params}',
     't2t_jax.export_stablehlo_model(model, {"params": params}, SPM, SCRATCH + "/x3")',
     ['params'], 'error'),
    ('export_stablehlo_model tokenizer path does not exist',
     't2t_jax.export_stablehlo_model(model, params, SCRATCH + "/nope.model", SCRATCH + "/x4")',
     ['nope.model', 'tokenizer'], 'error'),
    ('export_stablehlo_model tokenizer of another vocab size (cfg vocab 300)',
     't2t_jax.export_stablehlo_model(t2t_jax.Transformer(cfg.replace(vocab_size=300)), '
     't2t_jax.init_params(t2t_jax.Transformer(cfg.replace(vocab_size=300)), '
     'jax.random.PRNGKey(0)), SPM, SCRATCH + "/x5")', ['vocab', '300', '400'], 'error'),
    ('export_stablehlo_model beam_size=0',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x6", beam_size=0)',
     ['beam_size'], 'error'),
    ('export_stablehlo_model bucket_lengths=()',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x7", bucket_lengths=())',
     ['bucket_lengths'], 'error'),
    ('export_stablehlo_model bucket_lengths=(16, 128) beyond max_len=64',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x8", '
     'bucket_lengths=(16, 128))', ['bucket_lengths', 'max_len'], 'error'),
    ('export_stablehlo_model alpha=nan',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x9", alpha=float("nan"))',
     ['alpha'], 'error'),
    ('export_stablehlo_model output is an existing file',
     't2t_jax.export_stablehlo_model(model, params, SPM, SPM)', ['spm.model', 'output'], 'error'),
    ('export_stablehlo_model params of bfloat16 (a cast tree)',
     't2t_jax.export_stablehlo_model(model, jax.tree.map(lambda x: x.astype(jnp.bfloat16), '
     'params), SPM, SCRATCH + "/x10")', [], 'ok'),
    ('check_incremental targets of floats',
     't2t_jax.check_incremental(model, params, ids, ids.astype(jnp.float32))', ['targets'],
     'error'),
    ('check_incremental 1-D inputs',
     't2t_jax.check_incremental(model, params, ids[0], ids)', ['inputs'], 'error'),
    ('check_incremental ids beyond the vocabulary',
     't2t_jax.check_incremental(model, params, ids, ids + 400)', ['targets', 'vocab'], 'error'),
    ('check_incremental max_decode_len=100 beyond max_len=64',
     't2t_jax.check_incremental(model, params, ids, ids, max_decode_len=100)',
     ['max_decode_len'], 'error'),
    ('check_incremental max_decode_len=0',
     't2t_jax.check_incremental(model, params, ids, ids, max_decode_len=0)',
     ['max_decode_len'], 'error'),
    ('check_incremental targets longer than max_len',
     't2t_jax.check_incremental(model, params, ids, jnp.ones((2, 80), jnp.int32))',
     ['targets', 'max_len'], 'error'),
    ('check_incremental params of another model (d_model 64)',
     't2t_jax.check_incremental(model, t2t_jax.init_params(t2t_jax.Transformer('
     'cfg.replace(d_model=64)), jax.random.PRNGKey(0)), ids, ids)', ['params'], 'error'),
    ('check_incremental atol=-1',
     't2t_jax.check_incremental(model, params, ids, ids, atol=-1.0)', ['atol'], 'error'),
    ('check_incremental on the gqa variant (ok)',
     't2t_jax.check_incremental(t2t_jax.Transformer(cfg.replace(num_kv_heads=2)), '
     't2t_jax.init_params(t2t_jax.Transformer(cfg.replace(num_kv_heads=2)), '
     'jax.random.PRNGKey(0)), ids, ids)', [], 'ok'),
    ('TransformerConfig num_kv_heads=3 with num_heads=4',
     't2t_jax.TransformerConfig(vocab_size=400, d_model=32, d_ff=64, num_heads=4, '
     'num_kv_heads=3)', ['num_kv_heads'], 'error'),
    ('NNX generate inputs of floats',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids.astype(jnp.float32))', ['inputs'],
     'error'),
    ('NNX generate 1-D inputs',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids[0])', ['inputs'], 'error'),
    ('NNX generate beam_size=True',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids, beam_size=True)', ['beam_size'],
     'error'),
    ('NNX generate alpha=nan',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids, alpha=float("nan"))', ['alpha'],
     'error'),
    ('NNX generate alpha="0.6" (a string)',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids, alpha="0.6")', ['alpha'], 'error'),
    ('NNX generate inputs longer than max_len',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(jnp.ones((1, 80), jnp.int32))',
     ['max_len'], 'error'),
    ('to_nnx with a bad model argument (a string)',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'to_nnx("base", nnx.Rngs(params=0))', ['model'], 'error'),
    ('to_nnx with rngs=None',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'to_nnx(cfg, None)', ['rngs'], 'error'),
]


def library_tries(t):
  wanted = [x for x in LIBRARY_TRIES if t.wanted('fourth: ' + x[0])]
  if not wanted:
    return
  script = os.path.join(t.scratch, 'library_tries.py')
  with open(script, 'w', encoding='utf-8') as f:
    f.write(LIBRARY_SETUP + '\nTRIES = ' + repr([(n, c, s) for n, c, s, _ in wanted]) + '\n' +
            LIBRARY_RUN)
  spm = os.path.join(t.trained, 'vocab', 'spm.model')
  lib_scratch = os.path.join(t.scratch, 'lib')
  os.makedirs(lib_scratch)
  result, seconds = harness.time_call(
      subprocess.run, [sys.executable, script, spm, lib_scratch], capture_output=True,
      text=True, cwd=ROOT, timeout=1500, env=dict(os.environ, PYTHONPATH=ROOT))
  outs = {}
  for line in result.stdout.splitlines():
    if line.startswith('TRY '):
      o = json.loads(line[4:])
      outs[o['name']] = o
  for name, _, _, expected in wanted:
    o = outs.get(name)
    if o is None:
      fake = subprocess.CompletedProcess([], result.returncode, '', result.stderr[-2000:])
      t.record(f'fourth: {name}', 'traceback', fake, None,
               'one-line error' if expected == 'error' else 'ok')
      continue
    if o['raised'] is None:
      outcome = 'ok' if expected == 'ok' else 'wrong'
    elif o['kind'] != 'documented':
      outcome = 'traceback'
    else:
      outcome = 'one-line error' if o['names'] or expected == 'ok' else 'misleading'
    shown = subprocess.CompletedProcess([], 1 if o['raised'] else 0, o.get('value', ''),
                                        o['raised'] or '')
    t.record(f'fourth: {name}', outcome, shown, None,
             'one-line error' if expected == 'error' else 'ok')
  print(json.dumps({'library_seconds': round(seconds, 1)}), flush=True)


GROUPS = (('variants', variant_tries), ('gqa', gqa_tries), ('export', export_tries),
          ('pins', pin_tries), ('vocab', vocab_and_split_tries), ('platforms', platform_tries),
          ('plan', plan_tries), ('device_check', device_check_tries))


def fourth_tour(t, source, groups=None):
  for name, function in GROUPS:
    if groups is None or name in groups:
      function(t, source)
  if groups is None or 'library' in groups:
    library_tries(t)


def _train(workdir, *extra):
  result, seconds = main_py('--mode=train', f'--workdir={workdir}', *SMALL, *STEPS, *extra)
  if result.returncode != 0:
    sys.exit(f'training {workdir} failed:\n{result.stderr[-3000:]}')
  return seconds


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--scratch', default=None)
  parser.add_argument('--trained', default=None, help='an already trained SMALL run to copy')
  parser.add_argument('--variant', default=None, help='an already trained gqa variant run, '
                      'its factory at SCRATCH/myvariants.py')
  parser.add_argument('--groups', default=None, help='comma list of ' + ', '.join(
      [g for g, _ in GROUPS] + ['library']))
  parser.add_argument('--only', default=None, help='comma list of substrings of try names')
  parser.add_argument('--out', default=os.path.join(ROOT, 'benchmarks', 'results',
                                                    'damage_fourth_tour.jsonl'))
  args = parser.parse_args()
  scratch = args.scratch or tempfile.mkdtemp(prefix='t2t_jax-tour4-')
  os.makedirs(scratch, exist_ok=True)
  factory = os.path.join(scratch, 'myvariants.py')
  shutil.copy(os.path.join(ROOT, 'examples', 'variants.py'), factory)
  trained = args.trained or os.path.join(scratch, 'trained')
  variant = args.variant or os.path.join(scratch, 'variant')
  if not args.trained:
    _train(trained)
  if not args.variant:
    _train(variant, f'--config.model={factory}:gqa')
  t = FourthTour(trained, scratch, args.out,
                 only=[o for o in args.only.split(',') if o] if args.only else None)
  t.variant = variant
  source = os.path.join(scratch, 'input.txt')
  with open(source, 'w', encoding='utf-8') as f:
    f.write('En el principio creó Dios los cielos y la tierra.\nY dijo Dios: Sea la luz.\n')
  try:
    fourth_tour(t, source, args.groups.split(',') if args.groups else None)
  finally:
    if not args.scratch:
      shutil.rmtree(scratch, ignore_errors=True)
  summary = {'counts': dict(t.counts), 'verdicts': {v: t.verdicts[v] for v in VERDICTS},
             'tries': sum(t.verdicts.values()), 'non_ok': t.non_ok, 'tour': t.tour}
  print(json.dumps(summary))
  with open(args.out, 'a', encoding='utf-8') as f:
    f.write(json.dumps({'summary': summary}) + '\n')


if __name__ == '__main__':
  main()
