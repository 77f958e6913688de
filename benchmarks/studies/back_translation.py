"""Back-translation on the bundled corpus (issue 62, 4): does Spanish-only text, translated back
into English by a reverse model, help an EN->ES model, and does a tag on its sources help more?

The bundled training split is cut in two by verse: the even verses stay parallel, the odd
verses keep only their Spanish side (the "monolingual" text, 14,764 sentences). Each arm is
the embedded default (`python main.py`, 5200 steps) on:

  base         the parallel half alone;
  reverse      the parallel half, es->en: the back-translating model;
  bt_beam      the parallel half plus the Spanish half with its beam-4 back-translation as
               sources (`--config.corpora=parallel,bt_beam`: plain concatenation);
  bt_beam_tag  the same, the synthetic sources tagged `<bt>` (Caswell et al. 2019);
  bt_sample    the parallel half plus sampled back-translations (`decode_strategy=sample`,
               Edunov et al. 2018), untagged.

Every arm reports test BLEU and chrF (the average of its last 3 checkpoints, as the run's report)
and sacreBLEU's paired bootstrap against `base` on the same test sentences
(`t2t_jax.inference.compare`), one JSON line appended to `--out` as soon as it exists.

  python -m benchmarks.studies.back_translation --root /tmp/bt \\
      --out benchmarks/results/back_translation.jsonl [--only base,reverse,...] [--steps N]
      [--mono N] [-- more main.py flags for every training run]
"""

import argparse
import gzip
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.studies.training_workflows import main_py, record  # noqa: E402,F401

BUNDLED = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es')
ARMS = ('base', 'reverse', 'bt_beam', 'bt_beam_tag', 'bt_sample')


def bundled_lines(split, lang):
  with gzip.open(os.path.join(BUNDLED, f'{split}.{lang}.gz'), 'rt', encoding='utf-8') as f:
    return f.read().splitlines()


def split_corpus(root, mono_lines=0):
  """(parallel folder, the Spanish half's file): even verses parallel (with the bundled dev and
  test), odd verses' Spanish side alone (its first `mono_lines`; 0: all)."""
  parallel, mono = os.path.join(root, 'parallel'), os.path.join(root, 'mono.es')
  if os.path.exists(mono):
    return parallel, mono
  os.makedirs(parallel, exist_ok=True)
  for lang in ('en', 'es'):
    lines = bundled_lines('train', lang)
    with open(os.path.join(parallel, f'train.{lang}'), 'w', encoding='utf-8') as f:
      f.write(''.join(line + '\n' for line in lines[0::2]))
    for split in ('dev', 'test'):
      with open(os.path.join(parallel, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.write(''.join(line + '\n' for line in bundled_lines(split, lang)))
  with open(mono + '.partial', 'w', encoding='utf-8') as f:
    f.write(''.join(line + '\n' for line in bundled_lines('train', 'es')[1::2][:mono_lines or None]))
  os.replace(mono + '.partial', mono)
  return parallel, mono


def back_translate(root, mono, name, *flags):
  """A corpus folder `name` whose train.es is `mono` and train.en its translation by the
  reverse run (`flags`: decoding keys); its seconds."""
  folder = os.path.join(root, name)
  if os.path.exists(os.path.join(folder, 'train.en')):
    return folder, 0.0
  os.makedirs(folder, exist_ok=True)
  _, seconds = main_py('--mode=decode', f'--workdir={os.path.join(root, "reverse")}',
                     f'--input={mono}', f'--output={os.path.join(folder, "train.en.partial")}',
                     *flags)
  with open(mono, encoding='utf-8') as src, \
       open(os.path.join(folder, 'train.es'), 'w', encoding='utf-8') as dst:
    dst.write(src.read())
  os.replace(os.path.join(folder, 'train.en.partial'), os.path.join(folder, 'train.en'))
  return folder, seconds


def train_arm(root, arm, steps, *flags):
  """`main.py` training `root/arm` (`steps`: 0 is the config's): (its final test eval JSON, that
  result, dev BLEU curve, seconds)."""
  workdir = os.path.join(root, arm)
  extra = [f'--config.num_train_steps={steps}'] if steps else []
  _, seconds = main_py(f'--workdir={workdir}', *extra, *flags)
  final = sorted((f for f in os.listdir(workdir) if f.startswith('eval_test_') and
                  f.endswith('.json')), key=lambda f: int(f[len('eval_test_'):-5]))[-1]
  with open(os.path.join(workdir, final), encoding='utf-8') as f:
    result = json.load(f)
  dev = [round(m['eval_dev/bleu'], 2) for m in map(json.loads, open(
      os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8')) if 'eval_dev/bleu' in m]
  return os.path.join(workdir, final), result, dev, seconds


def p_against(baseline_dir, final):
  """sacreBLEU's paired bootstrap p-values (BLEU, chrF) of the eval JSON `final` against the
  test evaluation in `baseline_dir` (None: it has none yet)."""
  from t2t_jax.inference import compare  # pylint: disable=import-outside-toplevel
  base = [os.path.join(baseline_dir, f) for f in os.listdir(baseline_dir)
          if f.startswith('eval_test_') and f.endswith('.json')]
  if not base:
    return None
  baseline, references = compare.read_eval(sorted(base)[-1])
  system, _ = compare.read_eval(final)
  test = compare.paired_bootstrap(baseline, system, references)
  return {m: test[m]['system']['p_value'] for m in ('bleu', 'chrf')}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--root', required=True)
  parser.add_argument('--out', required=True)
  parser.add_argument('--only', default=','.join(ARMS))
  parser.add_argument('--steps', type=int, default=0, help='0: the embedded default\'s 5200')
  parser.add_argument('--mono', type=int, default=0, help='Spanish sentences (0: all 14,764)')
  parser.add_argument('extra', nargs='*', help='more main.py flags for every training run')
  args = parser.parse_args()
  os.makedirs(args.root, exist_ok=True)
  parallel, mono = split_corpus(args.root, args.mono)
  arms = args.only.split(',')
  flags = {
      'base': [f'--config.local_corpus_dir={parallel}'],
      'reverse': [f'--config.local_corpus_dir={parallel}', '--config.source_lang=es',
                  '--config.target_lang=en'],
  }
  for arm in arms:
    if arm.startswith('bt_'):
      kind = 'bt_sample' if arm == 'bt_sample' else 'bt_beam'
      decode = (['--config.decode_strategy=sample', '--config.sample_seed=0']
                if kind == 'bt_sample' else [])
      folder, seconds = back_translate(args.root, mono, kind, *decode)
      if seconds:
        record(args.out, name='back_translation', arm=f'decode_{kind}', seconds=seconds)
      tag = ':x1:<bt>' if arm == 'bt_beam_tag' else ''
      flags[arm] = [f'--config.corpora={parallel},{folder}{tag}']
    final, result, dev, seconds = train_arm(args.root, arm, args.steps, *flags[arm], *args.extra)
    record(args.out, name='back_translation', arm=arm, flags=flags[arm],
            test_bleu=result.get('bleu'), test_chrf=result.get('chrf'), dev_bleu=dev,
            seconds=seconds, p_vs_base=None if arm in ('base', 'reverse') else
            p_against(os.path.join(args.root, 'base'), final))


if __name__ == '__main__':
  main()
