"""Parsing benchmark: test F1 of configs/parsing_synthetic.py on held-out synthetic trees.

Generates a synthetic treebank (t2t_jax/parsing/grammar.py), trains with main.py, averages
the last checkpoints, parses the test sentences with beam search (`--mode=decode`, which
de-linearizes every output into a tree over its words) and scores the trees against the gold
ones with EVALB (t2t_jax.parsing.evalb, COLLINS.prm). One JSON line: the settings, the times and
the scores (target: F1 >= 95).

  python -m benchmarks.studies.parsing_synthetic --root /tmp/parsing_bench \\
      --out benchmarks/results/parsing_synthetic.jsonl [--config.KEY=VALUE ...]

An existing ROOT/treebank is reused; ROOT/run must not hold another run (main.py resumes a
finished one and only scores it again).
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import harness  # noqa: E402
from t2t_jax.parsing import evalb  # noqa: E402
from t2t_jax.parsing import grammar, parse, trees  # noqa: E402

CONFIG = 'configs/parsing_synthetic.py'


def _main_py(*args: str) -> tuple[float, float]:
  """Runs `python main.py ARGS` (output to the console); returns its wall time and CPU time
  (user + system: on a shared machine the wall time depends on the other jobs)."""
  with harness.timed() as t:
    subprocess.run([sys.executable, os.path.join(ROOT, 'main.py'), *args], cwd=ROOT, check=True)
  return t.seconds, t.children_cpu_seconds


def _read(path: str) -> List[str]:
  with open(path, encoding='utf-8') as f:
    return f.read().splitlines()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--root', required=True, help='folder for the treebank and the run')
  parser.add_argument('--train', type=int, default=20000, help='training trees')
  parser.add_argument('--test', type=int, default=500, help='test (and dev) trees')
  parser.add_argument('--seed', type=int, default=0, help='the grammar\'s seed')
  harness.add_out_argument(parser)
  args, overrides = parser.parse_known_args()
  bad = [o for o in overrides if not o.startswith('--config.')]
  if bad:
    sys.exit(f'error: unexpected arguments {bad}; only --config.KEY=VALUE overrides')
  bank, run = os.path.join(args.root, 'treebank'), os.path.join(args.root, 'run')
  if not os.path.isdir(bank):
    grammar.write_treebank(bank, {'train': args.train, 'dev': args.test, 'test': args.test},
                           args.seed)
  with open(os.path.join(bank, 'test.trees'), encoding='utf-8') as f:
    gold = [trees.clean(t) for _, _, t in trees.read_trees(f.read(), 'test.trees')]
  sentences = os.path.join(args.root, 'test.sentences')
  if not os.path.exists(sentences):
    with open(sentences, 'w', encoding='utf-8') as f:
      f.write(''.join(' '.join(t.words()) + '\n' for t in gold))
  parsed = os.path.join(args.root, f'test.parsed.{harness.timestamp(compact=True)}')
  common_args = [f'--config={CONFIG}', f'--workdir={run}']
  train_s, train_cpu_s = _main_py(*common_args, f'--config.treebank_dir={bank}',
                     '--config.final_eval_split=', *overrides)
  average_s, _ = _main_py('--mode=average', f'--workdir={run}')
  decode_s, _ = _main_py('--mode=decode', *common_args, f'--input={sentences}',
                      f'--output={parsed}', *[o for o in overrides if 'beam' in o
                                              or 'alpha' in o or 'decode' in o])
  result = evalb.score_lines([str(t) for t in gold], _read(parsed), parse.EVAL_PARAMS)
  with open(os.path.join(run, 'metrics.jsonl'), encoding='utf-8') as f:
    records = [json.loads(line) for line in f if line.strip()]
  last = [r for r in records if 'loss' in r][-1]
  record: Dict[str, Any] = {
      'name': 'parsing_synthetic', 'config': CONFIG, 'overrides': overrides,
      'treebank': {'train': args.train, 'dev': args.test, 'test': args.test,
                   'seed': args.seed},
      'steps': last['step'], 'train_loss': last['loss'], 'train_seconds': train_s,
      'train_cpu_seconds': train_cpu_s,
      'average_seconds': average_s, 'decode_seconds': decode_s,
      'sentences': len(gold), 'scorer': 'EVALB COLLINS.prm (MAX_ERROR off)',
      'f1': result.f1, 'precision': result.precision, 'recall': result.recall,
      'complete_match': result.complete_match, 'tagging_accuracy': result.tagging_accuracy,
      'error_sentences': result.error_sentences,
      'parsed': parsed}
  harness.Emitter(args.out)(record)


if __name__ == '__main__':
  main()
