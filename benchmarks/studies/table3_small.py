"""Table 3 in miniature: every row of the paper's Table 3 as a variation of the embedded default.

Each (row, seed) is `python main.py --config=configs/table3_small.py:ROW --config.seed=SEED
--config.shuffle_seed=SEED --workdir=ROOT/ROW/seedSEED` (the scaling rule, step budget and
schedule are configs/table3_small.py's). A rerun skips the settings whose workdir already holds
the final dev evaluation and restarts the others in the same workdir. With `--cores 0,1` two
runs go side by side, one per core; on a bigger machine give more cores ('0,1,2,3' or
'0-1,2-3'). One JSON line per (row, seed): the row's overrides, its parameter counts (small and
at WMT scale, with the paper's), the final dev perplexity per wordpiece and dev BLEU (beam 4, no
averaging), train loss and seconds. docs/table3_small.md is written from these records:

  python -m benchmarks.studies.table3_small --root /tmp/table3 --cores 0,1 \\
      --out benchmarks/results/table3_small.jsonl
  python -m benchmarks.studies.table3_small --root /tmp/table3 --collect --out ...  # finished only
  python -m benchmarks.studies.table3_small --report benchmarks/results/table3_small.jsonl \\
      --figure docs/table3_small.png                                          # the table
"""

import argparse
import functools
import json
import os
import sys
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import common, harness  # noqa: E402
from configs import table3, table3_small  # noqa: E402

ROWS = list(table3.ROWS)  # 'base' first, then the paper's rows in Table 3's order


def workdir(root: str, row: str, seed: int) -> str:
  return os.path.join(root, row, f'seed{seed}')


def _records(path: str) -> List[Dict[str, Any]]:
  try:
    with open(os.path.join(path, 'metrics.jsonl'), encoding='utf-8') as f:
      return [json.loads(line) for line in f if line.strip()]
  except FileNotFoundError:
    return []


def final_eval(path: str, steps: int) -> Optional[Dict[str, Any]]:
  """The run's last-step dev evaluation with BLEU, or None while the run is unfinished."""
  done = [r for r in _records(path) if r.get('step') == steps and 'eval_dev/bleu' in r]
  return done[-1] if done else None


def command(root: str, row: str, seed: int) -> List[str]:
  return [sys.executable, os.path.join(ROOT, 'main.py'),
          f'--config={os.path.join(ROOT, "configs", "table3_small.py")}:{row}',
          f'--workdir={workdir(root, row, seed)}', f'--config.seed={seed}',
          f'--config.shuffle_seed={seed}']


@functools.lru_cache(maxsize=None)
def param_counts(row: str) -> Dict[str, Any]:
  """Parameters of the small row, of the paper's row at WMT scale, and Table 3's (millions);
  once per row, not per seed (each count traces the model's init)."""
  from t2t_jax.model import transformer as model

  def count(config) -> int:
    return model.count_params(model.param_shapes(model.TransformerConfig.from_config(config)))
  return {'params': count(table3_small.get_config(row)),
          'params_wmt': count(table3.get_config(row)),
          'paper_params_m': table3.PAPER_PARAMS.get(row)}


def collect(root: str, row: str, seed: int) -> Optional[Dict[str, Any]]:
  """One JSON-able record of a finished (row, seed), or None."""
  path = workdir(root, row, seed)
  steps = table3_small.STEPS
  final = final_eval(path, steps)
  if final is None:
    return None
  train = [r for r in _records(path) if 'loss' in r]
  return {'name': 'table3_small', 'row': row, 'seed': seed, 'steps': steps,
          'overrides': table3_small.scaled_row(row), 'warmup_steps': table3_small.WARMUP,
          'learning_rate_scale': table3_small.LR_SCALE, **param_counts(row),
          'dev_nll': final['eval_dev/nll'], 'dev_perplexity': final['eval_dev/perplexity'],
          'dev_accuracy': final['eval_dev/accuracy'], 'dev_bleu': final['eval_dev/bleu'],
          'dev_tokenized_bleu': final['eval_dev/tokenized_bleu'],
          'train_loss': train[-1]['loss'] if train else None,
          'train_seconds': train[-1]['elapsed_s'] if train else None,
          'run_seconds': final['eval_dev/elapsed_s']}


def run(root: str, rows: List[str], seeds: List[int], cores: List[str]) -> None:
  """Runs the unfinished settings, every row's first seed before any row's second."""
  jobs = []
  for seed in seeds:
    for row in rows:
      if final_eval(workdir(root, row, seed), table3_small.STEPS) is None:
        os.makedirs(workdir(root, row, seed), exist_ok=True)
        jobs.append((command(root, row, seed), workdir(root, row, seed) + '.log'))
  print(f'{len(jobs)} of {len(rows) * len(seeds)} settings to run', flush=True)
  codes = common.run_pinned(jobs, cores, cwd=ROOT)
  failed = [log for log, code in codes.items() if code]
  if failed:
    print(f'{len(failed)} runs failed; see {", ".join(failed)}', file=sys.stderr)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--root', help="folder of the runs' workdirs")
  parser.add_argument('--rows', default=','.join(ROWS), help='comma-separated Table 3 rows')
  parser.add_argument('--seeds', default='0,1', help='comma-separated seeds')
  parser.add_argument('--cores', default='', help='e.g. "0,1": one run per core at a time')
  parser.add_argument('--collect', action='store_true', help='only record finished runs')
  parser.add_argument('--report', help='print the table of this records file and stop')
  parser.add_argument('--figure', help='with --report: draw dev BLEU per row into this PNG')
  harness.add_out_argument(parser)
  args = parser.parse_args()
  if args.report:
    from benchmarks.studies import table3_report
    table3_report.main(args.report, args.figure)
    return
  if not args.root:
    parser.error('--root is required unless --report is given')
  rows = [r for r in args.rows.split(',') if r]
  unknown = [r for r in rows if r not in ROWS]
  if unknown:
    sys.exit(f'error: unknown rows {unknown}; known: {", ".join(ROWS)}')
  seeds = [int(s) for s in args.seeds.split(',') if s]
  if not args.collect:
    run(args.root, rows, seeds, args.cores.split(',') if args.cores else [''])
  harness.start_jax()  # the parameter counts start jax's backends, quietly as main.py does
  emit = harness.Emitter(args.out)
  for seed in seeds:
    for row in rows:
      record = collect(args.root, row, seed)
      if record is not None:
        emit(record)


if __name__ == '__main__':
  main()
