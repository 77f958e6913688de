"""The miniature Table 3 from `benchmarks/studies/table3_small.py`'s records: per-row mean and
seed range beside the paper's numbers, the seed noise, each of the paper's findings checked with
numbers, and the figure of docs/table3_small.md.

The noise is the pooled seed standard deviation s of a metric over all rows (each row's sample
standard deviation over its seeds, squared, averaged, square root). The difference of two rows'
means over n seeds each has standard error s * sqrt(2 / n); a difference counts as beyond the
noise when it exceeds twice that.
"""

import json
import math
from typing import Any, Dict, Iterable, List, Optional

from configs import table3

METRICS = ('dev_perplexity', 'dev_bleu')


def load(path: str) -> List[Dict[str, Any]]:
  with open(path, encoding='utf-8') as f:
    return [r for r in map(json.loads, filter(str.strip, f)) if r.get('name') == 'table3_small']


def by_row(records: Iterable[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
  """row -> {'seeds', 'params', 'overrides', and per metric its 'values', 'mean', 'min', 'max'};
  a (row, seed) recorded twice counts once (the last record)."""
  latest = {(r['row'], r['seed']): r for r in records}
  rows: Dict[str, Dict[str, Any]] = {}
  for (row, seed), r in sorted(latest.items()):
    out = rows.setdefault(row, {'seeds': [], 'params': r['params'], 'overrides': r['overrides'],
                                **{m: {'values': []} for m in METRICS}})
    out['seeds'].append(seed)
    for m in METRICS:
      out[m]['values'].append(r[m])
  for out in rows.values():
    for m in METRICS:
      v = out[m]['values']
      out[m].update(mean=sum(v) / len(v), min=min(v), max=max(v))
  return rows


def seed_noise(rows: Dict[str, Dict[str, Any]], metric: str) -> Optional[float]:
  """Pooled seed standard deviation of `metric` over the rows with two or more seeds."""
  variances = []
  for out in rows.values():
    v = out[metric]['values']
    if len(v) >= 2:
      mean = sum(v) / len(v)
      variances.append(sum((x - mean) ** 2 for x in v) / (len(v) - 1))
  return math.sqrt(sum(variances) / len(variances)) if variances else None


def difference(rows, a: str, b: str, metric: str) -> Dict[str, Any]:
  """mean(a) - mean(b) of `metric`, and whether it is beyond the noise (module doc)."""
  diff = rows[a][metric]['mean'] - rows[b][metric]['mean']
  s = seed_noise(rows, metric)
  n = min(len(rows[a]['seeds']), len(rows[b]['seeds']))
  threshold = 2 * s * math.sqrt(2 / n) if s is not None else None
  return {'diff': diff, 'threshold': threshold,
          'beyond_noise': threshold is not None and abs(diff) > threshold}


def _change(overrides: Dict[str, Any]) -> str:
  return ', '.join(f'{k}={v}' for k, v in overrides.items()) or '(the small model)'


def markdown_table(rows: Dict[str, Dict[str, Any]]) -> str:
  """Ours (mean and seed range) beside the paper's, one line per row in Table 3's order."""
  lines = ['| row | change (small model) | params | dev PPL | dev BLEU | paper PPL | paper BLEU '
           '| paper params |', '|---|---|---:|---:|---:|---:|---:|---:|']
  for row in [r for r in table3.ROWS if r in rows]:
    out = rows[row]
    ppl, bleu = out['dev_perplexity'], out['dev_bleu']
    paper_ppl, paper_bleu = table3.PAPER_DEV[row]
    paper_params = table3.PAPER_PARAMS.get(row)
    lines.append(
        f'| {row} | {_change(out["overrides"])} | {out["params"] / 1e6:.2f}M '
        f'| {ppl["mean"]:.2f} ({ppl["min"]:.2f}-{ppl["max"]:.2f}) '
        f'| {bleu["mean"]:.2f} ({bleu["min"]:.2f}-{bleu["max"]:.2f}) '
        f'| {paper_ppl:.2f} | {paper_bleu:.1f} | {f"{paper_params}M" if paper_params else ""} |')
  return '\n'.join(lines)


def compare(rows, a: str, b: str) -> str:
  """One line: a against b in both metrics, ours and the paper's."""
  parts = []
  for metric, i, name in (('dev_perplexity', 0, 'PPL'), ('dev_bleu', 1, 'BLEU')):
    d = difference(rows, a, b, metric)
    paper = table3.PAPER_DEV[a][i] - table3.PAPER_DEV[b][i]
    if d['threshold'] is None:
      noise = 'no seed noise yet'
    else:
      noise = f'{"beyond" if d["beyond_noise"] else "within"} the noise {d["threshold"]:.2f}'
    parts.append(f'{name} {d["diff"]:+.2f} ({noise}; paper {paper:+.2f})')
  return f'{a} - {b}: ' + '; '.join(parts)


FINDINGS = {
    'A': [('A1', 'base'), ('A1', 'A2'), ('A3', 'base'), ('A4', 'base'), ('A4', 'A3')],
    'B': [('B1', 'base'), ('B2', 'base')],
    'C': [('C1', 'base'), ('C2', 'base'), ('C3', 'base'), ('C4', 'base'), ('C5', 'base'),
          ('C6', 'base'), ('C7', 'base')],
    'D': [('D1', 'base'), ('D2', 'base'), ('D3', 'base'), ('D4', 'base')],
    'E': [('E', 'base')],
}


def findings(rows) -> List[str]:
  lines = []
  for group, pairs in FINDINGS.items():
    lines.append(f'({group})')
    lines.extend('  ' + compare(rows, a, b) for a, b in pairs if a in rows and b in rows)
  return lines


def draw(rows: Dict[str, Dict[str, Any]], path: str) -> None:
  """Dev BLEU per row: ours (each seed a dot, the mean a bar) over the paper's, each against its
  own base (dashed)."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  names = [r for r in table3.ROWS if r in rows]
  x = range(len(names))
  fig, (ours, paper) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
  ours.bar(x, [rows[r]['dev_bleu']['mean'] for r in names], color='#9ecae1')
  for i, r in enumerate(names):
    ours.plot([i] * len(rows[r]['seeds']), rows[r]['dev_bleu']['values'], 'k.', ms=6)
  ours.axhline(rows['base']['dev_bleu']['mean'], ls='--', c='gray', lw=1)
  ours.set_ylabel('dev BLEU (ours)')
  ours.set_title('Table 3 in miniature: bundled EN-ES corpus, '
                 f'{len(rows["base"]["seeds"])} seeds per row (dots), mean (bar)')
  paper.bar(x, [table3.PAPER_DEV[r][1] for r in names], color='#fdae6b')
  paper.axhline(table3.PAPER_DEV['base'][1], ls='--', c='gray', lw=1)
  paper.set_ylim(23, 26.5)
  paper.set_ylabel('dev BLEU (paper, EN-DE)')
  paper.set_xticks(list(x))
  paper.set_xticklabels(names)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(records_path: str, figure: Optional[str] = None) -> None:
  rows = by_row(load(records_path))
  print(markdown_table(rows))
  for metric in METRICS:
    s = seed_noise(rows, metric)
    print(f'seed noise (pooled standard deviation) of {metric}: '
          + ('n/a (no row has two seeds yet)' if s is None else f'{s:.3f}'))
  print('\n'.join(findings(rows)))
  if figure:
    draw(rows, figure)
