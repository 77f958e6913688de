"""BLEU: sacreBLEU on detokenized text, and the paper's tokenized BLEU (§6.1).

Two numbers are reported for translations:

* `corpus_bleu`: detokenized BLEU from sacreBLEU with its defaults (13a
  tokenizer, exp smoothing, mixed case), with the sacreBLEU signature string,
  the number to compare across papers.
* `tokenized_bleu`: the number the paper reports (Table 2), computed as
  tensor2tensor's `get_ende_bleu.sh` does: Moses `tokenizer.perl -l de` on
  hypothesis and reference, compound hyphens split into `##AT##-##AT##`, then
  `multi-bleu.perl`. Here: `sacremoses` (a Python port of `tokenizer.perl`),
  the same hyphen regex, and sacreBLEU with `tokenize='none'` and
  `smooth_method='none'`, which gives multi-bleu.perl's number (n-grams from a
  whitespace split, no smoothing, so any empty n-gram order gives 0).

Command line:
  python -m t2t_jax.inference.bleu --hyp HYP_FILE --ref REF_FILE [--tokenized] [--lang de]
"""

import argparse
import dataclasses
import re
import sys
from typing import Optional, Sequence

from sacrebleu.metrics import BLEU

from t2t_jax.storage.textio import read_lines  # noqa: F401  (re-exported: bleu.read_lines)

# tensor2tensor's get_ende_bleu.sh: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'.
# Perl reads the file as bytes there, so \s is ASCII whitespace only and every
# non-ASCII byte counts as \S; re.ASCII gives the same classes on str. Matches
# do not overlap, as in Perl: 'x-y-z' -> 'x ##AT##-##AT## y-z' (the 'y' is used
# by the first match), which this port keeps on purpose.
_COMPOUND_HYPHEN = re.compile(r'(\S)-(\S)', re.ASCII)
_ATAT = r'\1 ##AT##-##AT## \2'


@dataclasses.dataclass(frozen=True)
class BleuResult:
  """A corpus BLEU score with what is needed to report and reproduce it.

  Attributes:
    score: BLEU in [0, 100].
    signature: sacreBLEU's signature (for `tokenized_bleu`, with the
      pre-tokenization appended as `|pretok:...`).
    counts: matching n-gram counts, n = 1..4.
    totals: hypothesis n-gram counts, n = 1..4.
    precisions: n-gram precisions in percent, n = 1..4.
    bp: brevity penalty.
    sys_len: hypothesis length in tokens.
    ref_len: reference length in tokens.
  """
  score: float
  signature: str
  counts: tuple[int, ...]
  totals: tuple[int, ...]
  precisions: tuple[float, ...]
  bp: float
  sys_len: int
  ref_len: int

  def __str__(self) -> str:
    precisions = '/'.join(f'{p:.1f}' for p in self.precisions)
    ratio = self.sys_len / self.ref_len if self.ref_len else 0.0
    return (f'BLEU = {self.score:.2f} {precisions} (BP = {self.bp:.3f} ratio = {ratio:.3f} '
            f'hyp_len = {self.sys_len} ref_len = {self.ref_len}) {self.signature}')


def _check_lengths(hypotheses: Sequence[str], references: Sequence[str]) -> None:
  if isinstance(hypotheses, str) or isinstance(references, str):
    raise TypeError('hypotheses and references must be lists of strings, not a string')
  if len(hypotheses) != len(references):
    raise ValueError(f'{len(hypotheses)} hypotheses but {len(references)} references')


def _score(metric: BLEU, hypotheses: Sequence[str], references: Sequence[str],
           signature_suffix: str = '') -> BleuResult:
  result = metric.corpus_score(list(hypotheses), [list(references)])
  return BleuResult(
      score=float(result.score),
      signature=str(metric.get_signature()) + signature_suffix,
      counts=tuple(int(c) for c in result.counts),
      totals=tuple(int(t) for t in result.totals),
      precisions=tuple(float(p) for p in result.precisions),
      bp=float(result.bp),
      sys_len=int(result.sys_len),
      ref_len=int(result.ref_len))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> BleuResult:
  """Detokenized corpus BLEU with sacreBLEU's defaults (one reference each).

  Equals `sacrebleu.corpus_bleu(hypotheses, [references])`; the signature
  (e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`) says
  how it was computed.

  Args:
    hypotheses: detokenized system outputs, one sentence each.
    references: detokenized references, aligned with `hypotheses`.

  Returns:
    A `BleuResult`.
  """
  _check_lengths(hypotheses, references)
  return _score(BLEU(), hypotheses, references)


def split_compounds(line: str) -> str:
  """get_ende_bleu.sh's compound split: `rich-text` -> `rich ##AT##-##AT## text`."""
  return _COMPOUND_HYPHEN.sub(_ATAT, line)


_TOKENIZERS = {}


def _moses_tokenizer(lang: str):
  # Imported lazily: only the tokenized mode needs sacremoses, and building a
  # tokenizer loads its nonbreaking-prefix list, so each language is built once.
  if lang not in _TOKENIZERS:
    from sacremoses import MosesTokenizer  # pylint: disable=g-import-not-at-top
    from sacremoses.corpus import NonbreakingPrefixes  # pylint: disable=g-import-not-at-top
    known = NonbreakingPrefixes().available_langs
    if not isinstance(lang, str) or lang not in known:
      # sacremoses would quietly tokenize an unknown code as no language at all.
      raise ValueError(f'lang={lang!r} is not a Moses language code; expected one of '
                       + ', '.join(sorted(k for k in known if len(k) <= 3)))
    _TOKENIZERS[lang] = MosesTokenizer(lang=lang)
  return _TOKENIZERS[lang]


def tokenize_for_bleu(line: str, lang: str = 'de') -> str:
  """One line as get_ende_bleu.sh feeds it to multi-bleu.perl.

  `tokenizer.perl -l LANG` with its defaults (HTML-escaping of special
  characters such as `"` -> `&quot;`, no aggressive hyphen splitting), then
  `split_compounds`.

  Args:
    line: a detokenized sentence.
    lang: the Moses language code of the text (the target language: 'de' for
      EN-DE, 'fr' for EN-FR); it selects nonbreaking prefixes and apostrophe
      rules.

  Returns:
    The space-separated tokens.
  """
  tokens = _moses_tokenizer(lang).tokenize(line, return_str=True, escape=True)
  return split_compounds(tokens)


def _sacremoses_version() -> str:
  try:
    from importlib import metadata  # pylint: disable=g-import-not-at-top
    return metadata.version('sacremoses')
  except Exception:  # pylint: disable=broad-except
    return 'unknown'


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str],
                   lang: str = 'de') -> BleuResult:
  """The paper-style tokenized BLEU (tensor2tensor's get_ende_bleu.sh, §6.1).

  Both sides go through `tokenize_for_bleu`; BLEU is then taken on the tokens
  as they are (sacreBLEU `tokenize='none'`, `force=True` since the text is
  tokenized on purpose) and without smoothing, as multi-bleu.perl does.

  Args:
    hypotheses: detokenized system outputs.
    references: detokenized references, aligned with `hypotheses`.
    lang: Moses language code of the target side.

  Returns:
    A `BleuResult`; its signature ends in `|pretok:moses-LANG+atat|sacremoses:VERSION`.

  Raises:
    ValueError: `lang` is no Moses language code (sacremoses' nonbreaking-prefix lists).
  """
  _check_lengths(hypotheses, references)
  _moses_tokenizer(lang)  # refuses an unknown lang before any work
  hyp_tok = [tokenize_for_bleu(h, lang) for h in hypotheses]
  ref_tok = [tokenize_for_bleu(r, lang) for r in references]
  metric = BLEU(tokenize='none', force=True, smooth_method='none')
  suffix = f'|pretok:moses-{lang}+atat|sacremoses:{_sacremoses_version()}'
  return _score(metric, hyp_tok, ref_tok, suffix)


def bleu_from_files(hyp_path: str, ref_path: str, tokenized: bool = False,
                    lang: str = 'de') -> BleuResult:
  """BLEU of a hypothesis file against a reference file (one sentence a line).

  Raises:
    FileNotFoundError / OSError / ValueError: a file is missing, unreadable or
      not UTF-8, or the two files differ in line count or are empty; the
      message names the file(s) and the line counts.
  """
  hypotheses = read_lines(hyp_path)
  references = read_lines(ref_path)
  if len(hypotheses) != len(references):
    raise ValueError(
        f'line counts differ: hypothesis file {hyp_path} has {len(hypotheses)} lines, '
        f'reference file {ref_path} has {len(references)} lines')
  if not hypotheses:
    raise ValueError(f'hypothesis file {hyp_path} and reference file {ref_path} are empty')
  if tokenized:
    return tokenized_bleu(hypotheses, references, lang)
  return corpus_bleu(hypotheses, references)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """CLI: print the BLEU line (score, precisions, signature); 1 on a bad input."""
  parser = argparse.ArgumentParser(
      prog='python -m t2t_jax.inference.bleu',
      description='Detokenized sacreBLEU, or with --tokenized the paper-style tokenized BLEU '
      '(Moses tokenizer + ##AT## compound split + multi-bleu).')
  parser.add_argument('--hyp', required=True, help='hypothesis file, UTF-8, one sentence a line')
  parser.add_argument('--ref', required=True, help='reference file, UTF-8, one sentence a line')
  parser.add_argument('--tokenized', action='store_true',
                      help="paper-style tokenized BLEU (tensor2tensor's get_ende_bleu.sh)")
  parser.add_argument('--lang', default='de',
                      help='Moses tokenizer language for --tokenized (default: de)')
  args = parser.parse_args(argv)
  try:
    result = bleu_from_files(args.hyp, args.ref, tokenized=args.tokenized, lang=args.lang)
  except (OSError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  print(result)
  return 0

