"""What `--mode=decode` writes per input line beyond the 1-best text: the n-best list with its
scores (`--config.nbest`, `--config.output_scores`), and translations that start with given
target prefixes (`--config.target_prefix_file`).

With scores, each hypothesis is one line

    input_index<TAB>rank<TAB>score<TAB>log_prob<TAB>hypothesis

`input_index` 0-based (fairseq's S-/H- numbering), `rank` 1-based, `score` what the search ranks
by (the log probability over the length penalty of `length_penalty_rule`), `log_prob` the sum
of the hypothesis's token log probabilities with EOS (`translate.Hypothesis`); N lines per
input, fewer when the search finished fewer, and one line with an empty hypothesis and zero
scores for an empty input line. Rank 1 is the plain decode's line.
"""

from typing import Callable, List, Optional, Sequence

from t2t_jax.inference import translate


def hypothesis_lines(index: int, hypotheses: Sequence[translate.Hypothesis]) -> List[str]:
  """The scored lines of one input's hypotheses (module docstring)."""
  if not hypotheses:
    return [f'{index}\t1\t0.000000\t0.000000\t']
  return [f'{index}\t{rank}\t{h.score:.6f}\t{h.log_prob:.6f}\t{h.text}'
          for rank, h in enumerate(hypotheses, 1)]


class LineTranslator:
  """`translate(sentences, progress, line_numbers)` -> one output string per sentence (a
  block of lines with `nbest > 1` or `with_scores`), for `multihost.translate_all`, which
  splits the file's lines over processes and names each share by its line numbers.

  `prefixes`: one per line of the whole input (None: none), picked by line number; a line
  beyond them has none."""

  def __init__(self, translator: translate.Translator, nbest: int, with_scores: bool,
               prefixes: Optional[Sequence[str]] = None):
    self.translator, self.nbest, self.with_scores = translator, nbest, with_scores
    self.prefixes = prefixes

  def translate(self, sentences: Sequence[str],
                progress: Optional[Callable[[int, int, float], None]] = None,
                line_numbers: Optional[Sequence[int]] = None) -> List[str]:
    lines = list(line_numbers) if line_numbers is not None else list(
        range(1, len(sentences) + 1))
    # A stream is checked against its prefix file before each batch (`modes._decode_stream`).
    prefixes = None if self.prefixes is None else [self.prefixes[n - 1] for n in lines]
    if not (self.with_scores or self.nbest > 1):
      return self.translator.translate(sentences, progress, lines, prefixes)
    n_best = self.translator.translate_n_best(sentences, self.nbest, progress, lines, prefixes)
    return ['\n'.join(hypothesis_lines(n - 1, hyps)) for n, hyps in zip(lines, n_best)]
