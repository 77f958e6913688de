"""Two more data recipes on the bundled corpus (issue 62, 4), each arm the embedded default
(`python main.py`, 5200 steps unless `--steps`), test BLEU and chrF with sacreBLEU's paired
bootstrap against the recipe's baseline, one JSON line appended to `--out` per result
(back-translation is benchmarks/studies/back_translation.py, whose helpers these use).

upsample  a small in-domain corpus beside a large out-of-domain one: the New Testament is the
          domain (its chapters 5, 10, 15, ... are dev and test, 3000 of its other verses the
          small training set), the Old Testament the out-of-domain corpus:
            indomain    the 3000 in-domain pairs alone (the baseline);
            concat      --config.corpora=ot,nt (plain concatenation: NT is 11% of an epoch);
            upsample_4  --config.corpora=ot,nt:x4 (fairseq's --upsample-primary 4).
distill   sequence-level knowledge distillation (Kim & Rush 2016): a teacher twice the
          embedded default's width trained on the bundled corpus translates every training
          source with beam 4; a student (the embedded default) trains on those translations
          (`student_distilled`) against the same student on the references
          (`student_reference`, the baseline).

  python -m benchmarks.studies.data_recipes upsample --root /tmp/up \\
      --out benchmarks/results/data_recipes.jsonl [--steps N] [-- main.py flags]
  python -m benchmarks.studies.data_recipes distill --root /tmp/kd --out ... [--corpus DIR]
Needs the corpus's `.ref` files for `upsample`: `--corpus` (default ../shared/corpora/bible_en_es).
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.studies.back_translation import (  # noqa: E402
    bundled_lines, main_py, p_against, record, train_arm)

NT_FIRST = 'Matt'
SMALL = 3000  # in-domain training pairs


def _write(folder, split, rows):
  """`rows` [(en, es)] as folder/split.en and split.es."""
  os.makedirs(folder, exist_ok=True)
  for k, lang in enumerate(('en', 'es')):
    with open(os.path.join(folder, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
      f.write(''.join(pair[k] + '\n' for pair in rows))


def split_domains(corpus, root):
  """(nt folder: SMALL train pairs with NT dev/test, ot folder: train only) under `root`."""
  nt, ot = os.path.join(root, 'nt'), os.path.join(root, 'ot')
  if os.path.exists(os.path.join(ot, 'train.es')):
    return nt, ot
  read = lambda name: open(os.path.join(corpus, name), encoding='utf-8').read().splitlines()  # noqa: E731
  refs = [r.split('\t')[0] for r in read('train.ref')]
  pairs = list(zip(read('train.en'), read('train.es')))
  first_nt = next(i for i, r in enumerate(refs) if r.startswith(NT_FIRST + '.'))
  held = [int(r.split('.')[1]) % 5 == 0 for r in refs]
  nt_train = [p for i, p in enumerate(pairs) if i >= first_nt and not held[i]][:SMALL]
  nt_held = [p for i, p in enumerate(pairs) if i >= first_nt and held[i]]
  _write(nt, 'train', nt_train)
  _write(nt, 'dev', nt_held[0::2])
  _write(nt, 'test', nt_held[1::2])
  _write(ot, 'train', pairs[:first_nt])
  return nt, ot


def upsample(args):
  nt, ot = split_domains(args.corpus, args.root)
  arms = {'indomain': [f'--config.local_corpus_dir={nt}'],
          'concat': [f'--config.corpora={nt},{ot}'],
          'upsample_4': [f'--config.corpora={nt}:x4,{ot}']}
  for arm in args.only.split(',') if args.only else arms:
    final, result, dev, seconds = train_arm(args.root, arm, args.steps, *arms[arm], *args.extra)
    record(args.out, name='upsample', arm=arm, flags=arms[arm], test_bleu=result.get('bleu'),
           test_chrf=result.get('chrf'), dev_bleu=dev, seconds=seconds,
           p_vs_indomain=None if arm == 'indomain' else
           p_against(os.path.join(args.root, 'indomain'), final),
           p_vs_concat=p_against(os.path.join(args.root, 'concat'), final)
           if arm == 'upsample_4' else None)


def distill(args):
  teacher = os.path.join(args.root, 'teacher')
  arms = ['teacher', 'student_reference', 'student_distilled']
  for arm in args.only.split(',') if args.only else arms:
    flags = []
    if arm == 'teacher':
      flags = ['--config.d_model=256', '--config.d_ff=1024']
    elif arm == 'student_distilled':
      flags = [f'--config.local_corpus_dir={_distilled(args.root, teacher, args.lines)}',
               f'--config.vocab_from={os.path.join(args.root, "student_reference")}']
    final, result, dev, seconds = train_arm(args.root, arm, args.steps, *flags, *args.extra)
    record(args.out, name='distill', arm=arm, flags=flags, test_bleu=result.get('bleu'),
           test_chrf=result.get('chrf'), dev_bleu=dev, seconds=seconds,
           p_vs_reference=None if arm != 'student_distilled' else
           p_against(os.path.join(args.root, 'student_reference'), final))


def _distilled(root, teacher, lines=0):
  """A corpus folder: the bundled training sources (the first `lines`; 0: all), the teacher's
  beam-4 translations as targets, the bundled dev and test."""
  folder = os.path.join(root, 'distilled')
  if os.path.exists(os.path.join(folder, 'train.es')):
    return folder
  os.makedirs(folder, exist_ok=True)
  sources = os.path.join(folder, 'train.en')
  with open(sources, 'w', encoding='utf-8') as f:
    f.write(''.join(line + '\n' for line in bundled_lines('train', 'en')[:lines or None]))
  main_py('--mode=decode', f'--workdir={teacher}', f'--input={sources}',
          f'--output={os.path.join(folder, "train.es.partial")}')
  for split in ('dev', 'test'):
    _write(folder, split, list(zip(bundled_lines(split, 'en'), bundled_lines(split, 'es'))))
  os.replace(os.path.join(folder, 'train.es.partial'), os.path.join(folder, 'train.es'))
  return folder


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('recipe', choices=('upsample', 'distill'))
  parser.add_argument('--root', required=True)
  parser.add_argument('--out', required=True)
  parser.add_argument('--only', default='')
  parser.add_argument('--steps', type=int, default=0, help='0: the embedded default\'s 5200')
  parser.add_argument('--lines', type=int, default=0, help='distill: sources (0: all 29,528)')
  parser.add_argument('--corpus', default=os.path.join(ROOT, '..', 'shared', 'corpora',
                                                       'bible_en_es'))
  args, extra = parser.parse_known_args()  # after '--': more main.py flags for every training
  args.extra = [a for a in extra if a != '--']
  os.makedirs(args.root, exist_ok=True)
  {'upsample': upsample, 'distill': distill}[args.recipe](args)


if __name__ == '__main__':
  main()
