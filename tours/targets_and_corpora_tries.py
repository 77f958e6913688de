"""The tries of issue 37 of our own for `files_tour.py` (besides the issue's 14 faults, in
files_and_signals_tries.py): other modes against read-only and full targets, damaged corpus files,
damaged vocabulary records and checkpoint items, signals during decode, export, attention and
eval, concurrent decodes. Outcome classes as files_and_signals_tries.py describes them."""

import glob
import gzip
import os
import shutil
import signal
import time

from benchmarks.shared import harness
from tours.common import (SMALL, checked, classify, corpus, damage_file, fill, finish, main_py,
                          mounted, start, train_args, wait_for)


def interrupted(result, hung, left=()):
  if hung:
    return 'hang'
  if 'Traceback (most recent call last)' in result.stderr:
    return 'traceback'
  if result.returncode == 0:
    return 'ok (finished first)'
  return 'wrong' if any(os.path.exists(p) for p in left) else 'interrupted'


def new_tries(t, source):
  """Tries of the same kinds, not in the issue."""
  scratch = t.scratch
  # Full workdirs: each mode that writes into the workdir, nothing already written lost.
  size_mb = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(t.trained)
                for n in names) // (1 << 20) + 8
  for mode, extra in (('eval', ['--config.eval_bleu_sentences=8']), ('average', []),
                      ('plot', [])):
    with mounted('full', size_mb=size_mb) as full:
      if full is None:
        t.record(f'{mode} into a full workdir', 'skipped (cannot mount)')
        continue
      w = os.path.join(full, 'run')
      shutil.copytree(t.trained, w)
      before = sorted(os.listdir(os.path.join(w, 'checkpoints')))
      fill(full)
      t.run(f'new: {mode} into a full workdir', [f'--mode={mode}', f'--workdir={w}', *extra],
            'one-line error', check=lambda r, w=w, before=before: 'wrong' if sorted(
                os.listdir(os.path.join(w, 'checkpoints'))) != before or os.path.exists(
                    os.path.join(w, 'averaged')) else classify(r))
  # Damaged corpus files of other kinds.
  def bad_corpus(name, damage, says=None, expected='one-line error'):
    folder = corpus(os.path.join(scratch, f'corpus-n{t.n}-{len(os.listdir(scratch))}'))
    damage(folder)
    t.run(name, train_args(os.path.join(scratch, f'fresh-n{t.n}-{len(os.listdir(scratch))}'),
                           folder), expected, check=lambda r: checked(r, says=says))

  def tsv(folder, missing_tab):
    for split in ('train', 'dev', 'test'):
      pairs = zip(*(open(os.path.join(folder, f'{split}.{l}'), encoding='utf-8').read()
                    .splitlines() for l in ('en', 'es')))
      lines = [f'{a}\t{b}' for a, b in pairs]
      if missing_tab and split == 'train':
        lines[41] = lines[41].replace('\t', ' ')
      open(os.path.join(folder, f'{split}.tsv'), 'w', encoding='utf-8').write(
          '\n'.join(lines) + '\n')
      for l in ('en', 'es'):
        os.remove(os.path.join(folder, f'{split}.{l}'))

  def replace(name, data):
    def damage(folder):
      os.remove(os.path.join(folder, name.replace('.gz', '')))
      open(os.path.join(folder, name), 'wb').write(data)
    return damage

  bad_corpus('new: train.tsv with a missing tab (line 42)', lambda f: tsv(f, True), [':42'])
  bad_corpus('new: empty train.en and train.es', lambda f: [open(os.path.join(
      f, f'train.{l}'), 'w').close() for l in ('en', 'es')])
  bad_corpus('new: train.es.gz is gzip of binary junk', replace(
      'train.es.gz', gzip.compress(bytes(range(256)) * 400)), ['UTF-8'])
  bad_corpus('new: train.es.gz is a gzip header then junk', replace(
      'train.es.gz', b'\x1f\x8b\x08\x00' + bytes(range(256)) * 40), ['gzip'])
  bad_corpus('new: train.en one line longer than train.es', lambda f: open(
      os.path.join(f, 'train.en'), 'a').write('one more line\n'), ['lines', 'line'])
  def latin1_line(folder):
    lines = open(os.path.join(folder, 'train.es'), 'rb').read().split(b'\n')
    lines[99] = 'café'.encode('latin-1')
    open(os.path.join(folder, 'train.es'), 'wb').write(b'\n'.join(lines))

  bad_corpus('new: invalid UTF-8 in train.es (line 100)', latin1_line, [':100', 'UTF-8'])
  bad_corpus('new: both train.en and train.en.gz', lambda f: open(
      os.path.join(f, 'train.en.gz'), 'wb').write(gzip.compress(open(
          os.path.join(f, 'train.en'), 'rb').read())), ['Both'])
  bad_corpus('new: the corpus folder is missing', lambda f: shutil.rmtree(f), ['does not exist'])
  # The vocabulary's record and the checkpoints' vocabulary item.
  w = t.copy()
  damage_file(os.path.join(w, 'vocab', 'spm.meta.json'), 'garbled')
  t.run('new: vocab/spm.meta.json garbled, decode', ['--mode=decode', f'--workdir={w}',
        f'--input={source}'], 'ok')
  t.run('new: vocab/spm.meta.json garbled, train resumes', ['--mode=train', f'--workdir={w}',
        *SMALL, '--config.num_train_steps=30'], 'warned', damaged='spm.meta.json')
  w = t.copy()
  for item in glob.glob(os.path.join(w, 'checkpoints', '*', 'vocabulary', 'metadata')):
    damage_file(item, 'garbled')
  t.run("new: every checkpoint's vocabulary item garbled, decode", ['--mode=decode',
        f'--workdir={w}', f'--input={source}'], 'one-line error')
  w = t.copy()
  shutil.copy(os.path.join(t.other, 'vocab', 'spm.model'), os.path.join(w, 'vocab'))
  t.run("new: vocab/spm.model replaced by another run's (same size), decode", [
      '--mode=decode', f'--workdir={w}', f'--input={source}'], 'one-line error',
      check=lambda r: checked(r, says=['spm.model']))
  # Bad flags.
  w = t.copy()
  folder = os.path.join(scratch, 'a-folder')
  os.makedirs(folder)
  for name, args in (
      ('--checkpoint=999 (no such step), decode', ['--mode=decode', f'--input={source}',
                                                  '--checkpoint=999']),
      ('--input is a folder, decode', ['--mode=decode', f'--input={folder}']),
      ('--input is a folder, attention', ['--mode=attention', f'--input={folder}',
                                          f'--output={scratch}/att-x']),
      ('--targets with another line count, attention', [
          '--mode=attention', f'--input={source}', f'--targets={scratch}/a-file',
          f'--output={scratch}/att-y']),
      ('--output is an existing non-empty folder, export', [
          '--mode=export', '--format=stablehlo', f'--output={scratch}'.rstrip('/')]),
      ('--config.vocab_size=500 on a trained workdir, train', [
          '--mode=train', *SMALL, '--config.vocab_size=500', '--config.num_train_steps=30'])):
    t.run(f'new: {name}', [*args, f'--workdir={w}'], 'one-line error')
  t.run('new: --workdir is a regular file, decode', ['--mode=decode',
        f'--workdir={scratch}/a-file', f'--input={source}'], 'one-line error')
  w = t.copy()
  with open(os.path.join(w, 'metrics.jsonl'), 'r+') as f:
    lines = f.readlines()
    f.seek(0)
    f.writelines(['{"step": 5, "loss": ]\n'] + lines)
  t.run('new: metrics.jsonl with a garbled first line, plot', ['--mode=plot', f'--workdir={w}'],
        'one-line error', check=lambda r: checked(r, says=['metrics.jsonl:1']))
  signal_tries(t, source)
  concurrent_decodes(t, source)


def signal_tries(t, source):
  """Signals during decode, export, attention and eval: nothing partial left (a killed
  export's hidden temporary folder is the next export's to remove: it reruns to the name)."""
  scratch = t.scratch
  long_input = os.path.join(scratch, 'corpus', 'train.en')
  w = t.copy()
  def temp_of(target):
    return glob.glob(os.path.join(scratch, f'.{os.path.basename(target)}.*.tmp'))

  for sig, mode, args, item in (
      (signal.SIGINT, 'decode', [f'--input={long_input}'], 'out.txt'),
      (signal.SIGTERM, 'decode', [f'--input={long_input}'], 'out.txt'),
      (signal.SIGTERM, 'export', ['--format=stablehlo'], 'export'),
      (signal.SIGINT, 'export', ['--format=ctranslate2'], 'ct2'),
      (signal.SIGINT, 'attention', [f'--input={source}'], 'att'),
      (signal.SIGTERM, 'eval', ['--config.eval_bleu_sentences=200'], None)):
    target = os.path.join(scratch, f'sig-{t.n}-{sig.name}-{mode}-{item}')
    out = [f'--output={target}'] if item else []
    began = harness.timed().start()
    process = start(f'--mode={mode}', f'--workdir={w}', *args, *out)
    # During the work: once decode has claimed its --output, once export writes its
    # temporary folder, else a few seconds in (the checkpoint loaded, compiling).
    during = {'decode': lambda target=target: os.path.exists(target),
              'export': lambda target=target: bool(temp_of(target))}.get(
                  mode, lambda began=began: began.seconds > 4.0)
    wait_for(lambda: during() or process.poll() is not None, timeout=120, poll=0.01)
    time.sleep(0.3 if mode == 'decode' else 0.0)
    if process.poll() is None:
      os.killpg(process.pid, sig)
    result, hung = finish(process, timeout=120)
    evals = glob.glob(os.path.join(w, 'eval_*.json'))
    t.record(f'new: {signal.Signals(sig).name} during {mode}{" " + args[0] if args else ""}',
             interrupted(result, hung, [target, *temp_of(target)] if item else evals), result,
             round(began.seconds, 1), 'interrupted')
    if mode == 'export' and not os.path.exists(target):
      t.run(f'new: export rerun to the same --output after {sig.name}', [
          f'--mode={mode}', f'--workdir={w}', *args, *out], 'ok', expect_output=lambda r,
          target=target: os.path.isdir(target) and not temp_of(target))


def concurrent_decodes(t, source):
  """Two decodes to the same --output at once: one writes it, the other is refused; the
  file is whole."""
  scratch = t.scratch
  w = t.copy()
  reference, _ = main_py('--mode=decode', f'--workdir={w}', f'--input={source}')
  target = os.path.join(scratch, 'both.txt')
  began = harness.timed().start()
  runs = [start('--mode=decode', f'--workdir={w}', f'--input={source}', f'--output={target}')
          for _ in range(2)]
  results = [finish(p)[0] for p in runs]
  kinds = sorted(classify(r) for r in results)
  whole = os.path.exists(target) and open(target, encoding='utf-8').read() == reference.stdout
  outcome = ('traceback' if 'traceback' in kinds else
             'ok' if whole and kinds == ['ok', 'one-line error'] else 'wrong')
  t.record('new: two decodes to the same --output at once', outcome,
           max(results, key=lambda r: r.returncode), round(began.seconds, 1),
           'ok')
