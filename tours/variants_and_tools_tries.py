"""The fourth "hostile new user" tour (issue 43): new tries on the newest surfaces, none of the
earlier tours' (files_tour.py, files_and_signals_tries.py, targets_and_corpora_tries.py). Model variants
(--config.model) and their pinned factory file, grouped-query attention (num_kv_heads), the
export and its self-check, `export_stablehlo_model`, `check_incremental`, NNX `generate`,
the data fingerprints and relative corpus paths, --mode=plan and its cache, JAX_PLATFORMS,
benchmarks/device/check.py, the vocabulary's record and empty splits.

  python tours/variants_and_tools_tries.py [--scratch=DIR] [--out=FILE.jsonl] [--only=NAME,...]

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

Its export, platform, plan and device-check tries are in export_and_plan_tries.py, its library
calls in library_calls_tries.py; they import only common.py; nothing imports this runner.
"""

import argparse
import collections
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import harness  # noqa: E402
from tours.common import SMALL, Tour, checked, classify, corpus, main_py  # noqa: E402
from tours.library_calls_tries import library_tries  # noqa: E402
from tours.export_and_plan_tries import (device_check_tries, export_tries,  # noqa: E402
                                       plan_tries, platform_tries)

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
  # A one-line error where the try is valid (refused), or ok / warned / wrong / interrupted
  # where an error or another outcome was due.
  return 'WRONG'


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
                                                    'variants_and_tools_tour.jsonl'))
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
