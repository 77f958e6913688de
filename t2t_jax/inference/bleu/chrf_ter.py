"""chrF and TER beside BLEU (`--mode=eval`), and per-sentence BLEU and chrF: sacreBLEU's, with
its defaults and signatures, so the numbers are those of `sacrebleu -m chrf ter`.

chrF (Popovic 2015): character n-gram F-score, n up to 6, beta 2 (sacreBLEU's `chrF2`). TER
(Snover et al. 2006): edits per reference word, lower is better. Per-sentence BLEU uses
sacreBLEU's `sentence_score`, which smooths with 'exp' (effective order on), as its
`--sentence-level` does.
"""

from typing import Dict, List, Sequence, Tuple

from sacrebleu.metrics import BLEU, CHRF, TER


def corpus_chrf_ter(hypotheses: Sequence[str], references: Sequence[str]) -> Dict[str, object]:
  """{'chrf', 'chrf_signature', 'ter', 'ter_signature'} of detokenized outputs, one reference
  each."""
  if len(hypotheses) != len(references):
    raise ValueError(f'{len(hypotheses)} hypotheses but {len(references)} references')
  out: Dict[str, object] = {}
  for name, metric in (('chrf', CHRF()), ('ter', TER())):
    out[name] = float(metric.corpus_score(list(hypotheses), [list(references)]).score)
    out[f'{name}_signature'] = str(metric.get_signature())
  return out


def sentence_scores(hypotheses: Sequence[str], references: Sequence[str]
                    ) -> Tuple[List[Tuple[float, float]], Dict[str, str]]:
  """([(sentence BLEU, sentence chrF)] per pair, {metric: signature})."""
  bleu, chrf = BLEU(effective_order=True), CHRF()
  rows = [(float(bleu.sentence_score(h, [r]).score), float(chrf.sentence_score(h, [r]).score))
          for h, r in zip(hypotheses, references)]
  return rows, {'bleu': str(bleu.get_signature()), 'chrf': str(chrf.get_signature())}
