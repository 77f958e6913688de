"""The damage tours of issues 30 and 37, rerun through main.py: bad input, damaged files of a
trained workdir, damaged corpora, read-only and full targets of every mode, signals and
concurrent runs, each classified by what the user sees (issue 37's tries: files_and_signals_tries.py).

  python tours/files_tour.py [--scratch=DIR] [--out=FILE.jsonl]

It first trains a small model on the bundled corpus for 20 steps (`SMALL`, about a minute),
the run every try copies. Every try runs
`python main.py ...` on a fresh copy and is classified as:
  one-line error  exit status 1, exactly one `error:` line, no traceback;
  warned          exit status 0 with a warning line that names the damaged path;
  ok              exit status 0 and the expected output;
  traceback       a Python traceback on stderr (a fault);
  wrong           exit status 0 but the output or the files are not what they should be
                  (or something partial left behind);
  (files_and_signals_tries.py adds interrupted, misleading and hang).
Read-only workdirs and full disks are real: a read-only bind mount and a 4 MiB tmpfs, so the
tour must run as root on Linux (tries that cannot mount are reported as skipped). Writes one
JSON line per try to --out and prints the counts per class.

What the tries share (SMALL, classify, Tour, mounted, ...) is in common.py; this runner imports
the tries (files_and_signals_tries.py, targets_and_corpora_tries.py), never the other way round.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from tours import targets_and_corpora_tries, files_and_signals_tries  # noqa: E402
from tours.common import (SMALL, Tour, corpus, damage_file, fill, latest_step,  # noqa: E402
                          main_py, mounted)

SENTENCES = ['En el principio creó Dios los cielos y la tierra.', 'Y dijo Dios: Sea la luz.']


def tour(t):
  source = os.path.join(t.scratch, 'input.txt')
  with open(source, 'w', encoding='utf-8') as f:
    f.write('\n'.join(SENTENCES) + '\n')
  bom = os.path.join(t.scratch, 'bom.txt')
  with open(bom, 'wb') as f:
    f.write(b'\xef\xbb\xbf' + open(source, 'rb').read())
  w = t.copy()
  plain = t.run('decode', ['--mode=decode', f'--workdir={w}', f'--input={source}'], 'ok')
  t.run('decode a BOM input', ['--mode=decode', f'--workdir={w}', f'--input={bom}'], 'ok',
        expect_output=lambda r: r.stdout == plain.stdout)
  for key, value, mode in (('length_penalty_alpha', 'nan', 'decode'),
                           ('length_penalty_alpha', 'inf', 'decode'),
                           ('checkpoint_every_minutes', 'nan', 'train')):
    t.run(f'--config.{key}={value} ({mode})', [f'--mode={mode}', f'--workdir={w}',
          f'--input={source}', *SMALL, f'--config.{key}={value}'], 'one-line error')
  out = os.path.join(t.scratch, 'twice.txt')
  t.run('decode to a new --output', ['--mode=decode', f'--workdir={w}', f'--input={source}',
        f'--output={out}'], 'ok', expect_output=lambda r: os.path.exists(out))
  t.run('decode to an existing --output', ['--mode=decode', f'--workdir={w}',
        f'--input={source}', f'--output={out}'], 'one-line error')
  # Damaged vocabulary: precious, in every mode that reads it.
  for how in ('truncated', 'garbled', 'missing'):
    for mode in ('decode', 'eval', 'export', 'train'):
      w = t.copy()
      damage_file(os.path.join(w, 'vocab', 'spm.model'), how)
      extra = {'decode': [f'--input={source}'], 'eval': ['--config.eval_bleu_sentences=8'],
               'export': ['--format=stablehlo', f'--output={w}/export'],
               'train': [*SMALL, '--config.num_train_steps=30']}[mode]
      t.run(f'vocab {how}, {mode}', [f'--mode={mode}', f'--workdir={w}', *extra],
            'one-line error')
  # Derived files: rebuilt after one warning.
  for what, how in (('data_cache', 'garbled'), ('data_cache', 'truncated'), ('tfds', 'garbled'),
                    ('tfds', 'truncated'), ('tfds info', 'garbled')):
    w = t.copy()
    if what == 'data_cache':
      target = [os.path.join(w, 'data_cache', n) for n in os.listdir(os.path.join(
          w, 'data_cache')) if n.startswith('tokens-')][0]
    else:
      corpus = os.path.join(w, 'tfds', 'local_parallel_corpus')
      config = os.path.join(corpus, os.listdir(corpus)[0])
      version = os.path.join(config, os.listdir(config)[0])
      target = (os.path.join(version, 'dataset_info.json') if what == 'tfds info' else
                os.path.join(version, [n for n in os.listdir(version) if 'train' in n][0]))
    damage_file(target, how)
    steps = latest_step(w) + 1
    t.run(f'{what} {how}, train', ['--mode=train', f'--workdir={w}', *SMALL,
          f'--config.num_train_steps={steps}'], 'warned',
          damaged=os.path.dirname(target) if what != 'data_cache' else target)
  # Lock file replaced by a folder.
  w = t.copy()
  os.makedirs(os.path.join(w, '.t2t_jax.lock', 'x'))
  t.run('.t2t_jax.lock is a folder, train', ['--mode=train', f'--workdir={w}', *SMALL],
        'one-line error')
  # Read-only workdir: every mode that writes stops before any work.
  w = t.copy()
  with mounted('ro', w) as ro:
    if ro is None:
      t.record('read-only workdir', 'skipped (cannot mount)')
    else:
      for mode in ('eval', 'average', 'plot', 'train'):
        t.run(f'read-only workdir, {mode}', [f'--mode={mode}', f'--workdir={ro}'] + (
            SMALL if mode == 'train' else []), 'one-line error')
  # Full disk: a tmpfs filled to the last byte, then a tmpfs holding the run with room for
  # less than one more checkpoint.
  with mounted('full') as full:
    if full is None:
      t.record('full disk', 'skipped (cannot mount)')
    else:
      w = t.copy()
      fill(full)
      t.run('decode to a full disk', ['--mode=decode', f'--workdir={w}', f'--input={source}',
            f'--output={full}/out.txt'], 'one-line error')
  size_mb = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(t.trained)
                for n in names) // (1 << 20) + 8
  with mounted('full', size_mb=size_mb) as full:
    if full is not None:
      w = os.path.join(full, 'run')
      shutil.copytree(t.trained, w)
      fill(full, keep=64 << 10)  # less than one more checkpoint of SMALL's model
      steps = latest_step(w) + 20
      before = {n for n in os.listdir(os.path.join(w, 'checkpoints')) if n.isdigit()}
      t.run('train into a full disk', ['--mode=train', f'--workdir={w}', *SMALL,
            f'--config.num_train_steps={steps}'], 'one-line error')
      after = {n for n in os.listdir(os.path.join(w, 'checkpoints')) if n.isdigit()}
      os.remove(os.path.join(full, 'filler'))  # room again: the same command resumes
      t.run('full disk: the same command resumes once there is room', [
          '--mode=train', f'--workdir={w}', *SMALL, f'--config.num_train_steps={steps}'], 'ok',
          expect_output=lambda r: before <= after and f'resumed from step {max(map(int, after))}'
          in r.stderr)
  files_and_signals_tries.issue37(t, source)
  targets_and_corpora_tries.new_tries(t, source)


def _signals_only(t):
  source = os.path.join(t.scratch, 'input.txt')
  with open(source, 'w', encoding='utf-8') as f:
    f.write('\n'.join(SENTENCES) + '\n')
  corpus(os.path.join(t.scratch, 'corpus'))
  targets_and_corpora_tries.signal_tries(t, source)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--scratch', default=None)
  parser.add_argument('--only', choices=['signals'], default=None,
                      help='signals: only the tries that signal decode, export, attention, eval')
  parser.add_argument('--out', default=os.path.join(ROOT, 'benchmarks', 'results',
                                                    'files_tour.jsonl'))
  args = parser.parse_args()
  scratch = args.scratch or tempfile.mkdtemp(prefix='t2t_jax-tour-')
  trained = os.path.join(scratch, 'trained')
  result, seconds = main_py('--mode=train', f'--workdir={trained}', *SMALL,
                            '--config.num_train_steps=20')
  if result.returncode != 0:
    sys.exit(f'training the run to copy failed:\n{result.stderr[-3000:]}')
  print(json.dumps({'trained': trained, 'seconds': round(seconds, 1)}), flush=True)
  t = Tour(trained, scratch, args.out)
  try:
    if args.only == 'signals':
      _signals_only(t)
    else:
      tour(t)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  print(json.dumps({'counts': dict(t.counts)}))
  print(json.dumps({'expected -> outcome': {f'{e} -> {o}': n for (e, o), n in
                                            sorted(t.by_expected.items(), key=str)}}))


if __name__ == '__main__':
  main()
