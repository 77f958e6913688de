"""Is system B better than baseline A on the same sentences? sacreBLEU's paired bootstrap
resampling (Koehn 2004; `sacrebleu --paired-bs`) over BLEU and chrF.

    python -m t2t_jax.inference.compare --baseline=A --system=B [--references=REF]
        [--samples=1000] [--json]

A and B are hypothesis files (one line per sentence, aligned with REF), or the
`eval_<split>_<step>.json` files `--mode=eval` writes, which name their hypotheses and
references (then `--references` may be left out). The p-value is the share of resampled test
sets on which B's improvement over A vanishes (sacreBLEU's: (count + 1) / (samples + 1)); below
0.05 the difference is called significant, as sacreBLEU prints it. Each score comes with the
mean and 95% confidence half-width of its bootstrap distribution and the metric's signature.
The resamples are sacreBLEU's (its seed 12345, or `SACREBLEU_SEED`), so the numbers are those
of `sacrebleu REF -i A B --paired-bs`.
"""

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from t2t_jax.storage.textio import TextFileError, read_lines

SAMPLES = 1000  # sacreBLEU's default number of bootstrap samples


class CompareError(ValueError):
  """An input the comparison cannot use; the message names the flag and file."""


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str],
                     references: Sequence[str], samples: int = SAMPLES) -> Dict[str, Any]:
  """{'signatures': {metric: signature}, metric: {'baseline': {score, mean, ci},
  'system': {score, mean, ci, p_value}}} for BLEU and chrF (sacreBLEU's `PairedTest`)."""
  from sacrebleu.metrics import BLEU, CHRF  # pylint: disable=import-outside-toplevel
  from sacrebleu.significance import PairedTest  # pylint: disable=import-outside-toplevel
  if not len(baseline) == len(system) == len(references):
    raise ValueError(f'paired_bootstrap: {len(baseline)} baseline, {len(system)} system and '
                     f'{len(references)} reference lines; expected the same number')
  test = PairedTest([('baseline', list(baseline)), ('system', list(system))],
                    {'bleu': BLEU(), 'chrf': CHRF()}, [list(references)], test_type='bs',
                    n_samples=samples)
  signatures, results = test()
  out: Dict[str, Any] = {'signatures': {k: str(v) for k, v in signatures.items()},
                         'samples': samples}
  # sacreBLEU names them by their signatures' metric ('BLEU', 'chrF2'), in the order given.
  named = [scores for metric, scores in results.items() if metric != 'System']
  for metric, scores in zip(('bleu', 'chrf'), named):
    rows = {}
    for name, score in zip(('baseline', 'system'), scores):
      rows[name] = {'score': round(float(score.score), 4), 'mean': round(float(score.mean), 4),
                    'ci95': round(float(score.ci), 4)}
      if score.p_value is not None:
        rows[name]['p_value'] = round(float(score.p_value), 6)
    out[metric] = rows
  return out


def read_eval(path: str) -> Tuple[List[str], List[str]]:
  """(hypotheses, references) that the eval JSON `path` names (`--mode=eval` writes them beside
  it), checked to align; CompareError or TextFileError naming the file otherwise."""
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
    # Relative to the JSON's folder (as eval writes them), or absolute.
    hyps_path, refs_path = (os.path.join(os.path.dirname(os.path.abspath(path)), record[key])
                            for key in ('hypotheses_path', 'references_path'))
  except (ValueError, KeyError, TypeError):
    raise CompareError(f'{path}: not an eval JSON that names its hypotheses_path and '
                       'references_path (written by --mode=eval)') from None
  hyps, refs = read_lines(hyps_path), read_lines(refs_path)
  if len(hyps) != len(refs):
    raise CompareError(f'{hyps_path} has {len(hyps)} lines but {refs_path} has {len(refs)}: '
                       f'the texts of {path} were changed; evaluate again')
  return hyps, refs


def _texts(path: str, role: str) -> Tuple[List[str], Optional[List[str]]]:
  """(hypotheses, references or None) of a hypothesis file or an eval JSON."""
  if not os.path.isfile(path):
    raise CompareError(f'--{role}={path}: no such file; expected a hypothesis file or an '
                       'eval_<split>_<step>.json of --mode=eval')
  if not path.endswith('.json'):
    return read_lines(path), None
  return read_eval(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--baseline', required=True, help='A: hypotheses or an eval JSON')
  parser.add_argument('--system', required=True, help='B: hypotheses or an eval JSON')
  parser.add_argument('--references', help='the reference file (default: the eval JSON\'s)')
  parser.add_argument('--samples', type=int, default=SAMPLES, help='bootstrap samples')
  parser.add_argument('--json', action='store_true', help='print the result as JSON')
  args = parser.parse_args(argv)
  try:
    if args.samples < 1:
      raise CompareError(f'--samples={args.samples}: expected at least 1')
    baseline, refs_a = _texts(args.baseline, 'baseline')
    system, refs_b = _texts(args.system, 'system')
    if refs_a is not None and refs_b is not None and refs_a != refs_b:
      raise CompareError(f'--baseline={args.baseline} and --system={args.system} were '
                         'evaluated on different references; compare evaluations of one split')
    if args.references:
      refs, references = args.references, read_lines(args.references)
    elif refs_a is not None or refs_b is not None:
      refs, references = 'the eval JSON\'s references', refs_a if refs_a is not None else refs_b
    else:
      raise CompareError('--references: needed when neither input is an eval JSON')
    for name, lines, path in (('baseline', baseline, args.baseline),
                              ('system', system, args.system)):
      if len(lines) != len(references):
        raise CompareError(f'--{name}={path} has {len(lines)} lines but {refs} has '
                        f'{len(references)}; expected one hypothesis per reference')
  except (CompareError, TextFileError, OSError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  result = paired_bootstrap(baseline, system, references, args.samples)
  print(json.dumps(result, indent=2, sort_keys=True) if args.json else describe(result))
  return 0


def describe(result: Dict[str, Any]) -> str:
  """Lines a person reads: each metric's two scores, B's p-value and the verdict."""
  lines = []
  for metric in ('bleu', 'chrf'):
    a, b = result[metric]['baseline'], result[metric]['system']
    # sacreBLEU's p-value of a system against an identical one is its floor (it counts
    # resamples strictly above a zero difference): no difference, not a significant one.
    verdict = ('no difference' if a['score'] == b['score'] else
               'significant at 0.05' if b['p_value'] < 0.05 else 'not significant at 0.05')
    lines.append(f'{metric}: baseline {a["score"]:.2f} (+-{a["ci95"]:.2f}), system '
                 f'{b["score"]:.2f} (+-{b["ci95"]:.2f}), p = {b["p_value"]:.4f} ({verdict}, '
                 f'{result["samples"]} paired bootstrap samples)')
  lines += [f'{k}: {v}' for k, v in sorted(result['signatures'].items())]
  return '\n'.join(lines)


if __name__ == '__main__':
  sys.exit(main())
