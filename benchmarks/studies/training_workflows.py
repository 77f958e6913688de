"""The training workflows of docs/training_workflows.md, shown on the bundled corpus
(issue 52): each result is appended to `--out` (JSON lines) the moment it exists.

  ema        the embedded default with --config.ema_decay=0.999: test BLEU of the moving
             average (--checkpoint=ema), of the last checkpoint (the same run without the
             average) and of the averaged last 3 (what the run reports), same run, same machine.
  source     the embedded default on the bundled corpus without Psalms 76-150 (the held-out
             half of one book, by chapter, from the corpus's `train.ref`).
  fine_tune  the source model fine-tuned on the held-out half (chapters whose number is not a
             multiple of 10), dev = the half's chapters 80, 90, ..., 150; against `scratch`,
             the same steps, schedule and vocabulary from a random initialisation; and
             `decoder_only` (--config.trainable='decoder/.*'), whose encoder and embedding are
             checked bitwise equal to the source's.
  overfit    `scratch` again, longer, with keep_best=2, best_metric=loss and
             early_stop_patience=3: it overfits the half and stops.

Usage: python benchmarks/studies/training_workflows.py --root=/tmp/wf \
         --out=benchmarks/results/training_workflows.jsonl [--only=ema,source,...]
Needs the corpus's `.ref` files: `--corpus` (default ../shared/corpora/bible_en_es).
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import harness  # noqa: E402
PARTS = ('source', 'fine_tune', 'overfit', 'ema')
# The fine-tune's schedule: a short warmup to a fixed peak, then linear decay (a fresh
# rsqrt schedule would climb for 2000 steps to the embedded default's peak of 2.4e-3).
TUNE = ['--config.lr_schedule=linear', '--config.learning_rate=5e-4', '--config.warmup_steps=50',
        '--config.num_train_steps=600', '--config.eval_every_steps=150',
        '--config.eval_bleu_sentences=1000', '--config.checkpoint_every_steps=600',
        '--config.final_eval_split=', '--config.log_every_steps=50']


def record(out, **row):
  """`row` with the time, appended to `out` (JSON lines) and printed."""
  row['time'] = harness.timestamp()
  with open(out, 'a', encoding='utf-8') as f:
    f.write(json.dumps(row, sort_keys=True) + '\n')
  print(json.dumps(row, sort_keys=True), flush=True)


def main_py(*args):
  """`python main.py ARGS` from the checkout: (the completed process, seconds); exits on failure."""
  with harness.timed() as clock:
    result = subprocess.run([sys.executable, os.path.join(ROOT, 'main.py'), *args], cwd=ROOT,
                            capture_output=True, text=True)
  if result.returncode:
    raise SystemExit(f'main.py {" ".join(args)} failed:\n{result.stderr[-3000:]}')
  return result, clock.seconds


def _eval(workdir, split, checkpoint=None):
  args = ['--mode=eval', f'--workdir={workdir}', f'--split={split}']
  result, _ = main_py(*args, *([f'--checkpoint={checkpoint}'] if checkpoint else []))
  return json.loads(result.stdout[result.stdout.index('{'):])


def _split_corpus(corpus, root):
  """(source corpus, held-out half corpus) folders under `root`, from `corpus`'s text and
  `.ref` files: Psalms 76-150 leave the training split; of them, chapters 80, 90, ..., 150 are
  the half's dev and test, the others its training split."""
  source, half = os.path.join(root, 'corpus_source'), os.path.join(root, 'corpus_half')
  for folder in (source, half):
    os.makedirs(folder, exist_ok=True)
  read = lambda name: open(os.path.join(corpus, name), encoding='utf-8').read().splitlines()  # noqa: E731
  refs = read('train.ref')
  lines = {lang: read(f'train.{lang}') for lang in ('en', 'es')}
  chapter = [(r.split('\t')[0].split('.')[0], int(r.split('\t')[0].split('.')[1])) for r in refs]
  held = [book == 'Ps' and number >= 76 for book, number in chapter]
  for lang in ('en', 'es'):
    rows = lines[lang]
    def write(folder, split, keep):
      with open(os.path.join(folder, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.write(''.join(r + '\n' for r, k in zip(rows, keep) if k))
    write(source, 'train', [not h for h in held])
    write(half, 'train', [h and n % 10 for h, (_, n) in zip(held, chapter)])
    for split in ('dev', 'test'):
      write(half, split, [h and not n % 10 for h, (_, n) in zip(held, chapter)])
      with open(os.path.join(source, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.write(open(os.path.join(corpus, f'{split}.{lang}'), encoding='utf-8').read())
  counts = {name: sum(1 for _ in open(os.path.join(folder, f'{split}.en'), encoding='utf-8'))
            for name, folder in (('source', source), ('half', half))
            for split in ('train',)}
  counts['half_dev'] = sum(1 for _ in open(os.path.join(half, 'dev.en'), encoding='utf-8'))
  return source, half, counts


def _dev_bleus(workdir):
  rows = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  return {m['step']: round(m['eval_dev/bleu'], 2) for m in rows if 'eval_dev/bleu' in m}


def part_ema(args):
  workdir = os.path.join(args.root, 'ema')
  _, seconds = main_py(f'--workdir={workdir}', '--config.ema_decay=0.999')
  row = {'part': 'ema', 'train_s': round(seconds, 1), 'dev_bleu_curve': _dev_bleus(workdir)}
  for name, checkpoint in (('ema', 'ema'), ('last', '5200'), ('averaged_last_3', None)):
    result = _eval(workdir, 'test', checkpoint)
    row[f'test_bleu_{name}'] = round(result['bleu'], 2)
    row[f'test_loss_{name}'] = round(result['loss'], 4)
  record(args.out, **row)


def part_source(args):
  source, _, counts = _split_corpus(args.corpus, args.root)
  workdir = os.path.join(args.root, 'source')
  _, seconds = main_py(f'--workdir={workdir}', f'--config.local_corpus_dir={source}',
                     '--config.final_eval_split=')
  record(args.out, part='source', train_s=round(seconds, 1), lines=counts,
          dev_bleu_curve=_dev_bleus(workdir))


def part_fine_tune(args):
  _, half, counts = _split_corpus(args.corpus, args.root)
  source = os.path.join(args.root, 'source')
  vocab = os.path.join(source, 'vocab', 'spm.model')
  runs = {'fine_tune': [f'--config.init_from={source}', '--config.keep_best=2',
                        '--config.best_metric=bleu'],
          'decoder_only': [f'--config.init_from={source}', '--config.trainable=decoder/.*'],
          'scratch': [f'--config.vocab_model={vocab}']}
  for name, extra in runs.items():
    workdir = os.path.join(args.root, name)
    _, seconds = main_py(f'--workdir={workdir}', f'--config.local_corpus_dir={half}', *TUNE, *extra)
    row = {'part': name, 'train_s': round(seconds, 1), 'lines': counts,
           'dev_bleu_curve': _dev_bleus(workdir)}
    if name == 'decoder_only':
      row['encoder_and_embedding_bitwise_equal_to_source'] = _frozen_equal(source, workdir)
    record(args.out, **row)


def _frozen_equal(source, workdir):
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference import checkpoint_choice  # pylint: disable=import-outside-toplevel
  a = checkpoint_choice.load_inference_params(source, '5200').params
  b = checkpoint_choice.load_inference_params(workdir, '600').params
  same = lambda x, y: all(np.array_equal(np.asarray(p), np.asarray(q)) for p, q in zip(  # noqa: E731
      jax.tree_util.tree_leaves(x), jax.tree_util.tree_leaves(y)))
  return {name: same(a[name], b[name]) for name in ('encoder', 'shared_embedding', 'decoder')}


def part_overfit(args):
  _, half, counts = _split_corpus(args.corpus, args.root)
  vocab = os.path.join(args.root, 'source', 'vocab', 'spm.model')
  workdir = os.path.join(args.root, 'overfit')
  command = [
      f'--workdir={workdir}', f'--config.local_corpus_dir={half}', f'--config.vocab_model={vocab}',
      '--config.lr_schedule=constant', '--config.learning_rate=1e-3', '--config.warmup_steps=50',
      '--config.num_train_steps=4000', '--config.eval_every_steps=100', '--config.keep_best=2',
      '--config.best_metric=loss', '--config.early_stop_patience=3',
      '--config.checkpoint_every_steps=500', '--config.final_eval_split=',
      '--config.log_every_steps=100']
  result, seconds = main_py(*command)
  rows = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  losses = {m['step']: round(m['eval_dev/loss'], 4) for m in rows if 'eval_dev/loss' in m}
  stop = json.load(open(os.path.join(workdir, 'best', 'early_stop.json')))
  again, _ = main_py(*command)  # the same command again: it does not train further
  record(args.out, part='overfit', train_s=round(seconds, 1), lines=counts, dev_loss=losses,
          early_stop=stop, best=sorted(os.listdir(os.path.join(workdir, 'best'))),
          rerun_says=[l for l in again.stderr.splitlines() if 'early' in l.lower()][-1:])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--root', required=True, help='folder for the runs')
  parser.add_argument('--out', required=True, help='JSON lines file results are appended to')
  parser.add_argument('--corpus', default=os.path.join(ROOT, '..', 'shared', 'corpora',
                                                       'bible_en_es'))
  parser.add_argument('--only', default=','.join(PARTS), help=f'a subset of {PARTS}')
  args = parser.parse_args()
  for part in args.only.split(','):
    if part not in PARTS:
      parser.error(f'--only: {part!r} is not one of {", ".join(PARTS)}')
  for part in args.only.split(','):
    globals()[f'part_{part}'](args)


if __name__ == '__main__':
  main()
