"""EVALB's figures: per-sentence scores, corpus totals, and the report text of `evalb.c`.

Every figure is computed with `evalb.c`'s own formulas and operation order, in double
precision, and printed with its printf formats, so `EvalbResult.report(per_sentence=True)` is
the C program's standard output character for character.
"""

import dataclasses
from typing import Optional

OK, ERROR, SKIPPED = 0, 1, 2  # a sentence's status, as in EVALB's `Stat.` column

_HEADER = ('  Sent.                        Matched  Bracket   Cross        Correct Tag\n'
           ' ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n')
_RULE = '=' * 76 + '\n'


def _percent(part: int, whole: int) -> float:
  return 100.0 * part / whole if whole > 0 else 0.0


class _Rates:
  """Recall, precision and tagging accuracy in percent (0.0 for an empty denominator) from
  the counts `matched`, `gold_brackets`, `test_brackets`, `correct_tags` and `words`."""
  matched: int
  gold_brackets: int
  test_brackets: int
  correct_tags: int
  words: int

  @property
  def recall(self) -> float:
    return _percent(self.matched, self.gold_brackets)

  @property
  def precision(self) -> float:
    return _percent(self.matched, self.test_brackets)

  @property
  def tagging_accuracy(self) -> float:
    return _percent(self.correct_tags, self.words)


@dataclasses.dataclass(frozen=True)
class SentenceScore(_Rates):
  """One sentence's row of EVALB's table.

  id: the tree number (line number, from 1); length: the gold length that decides the
  CUTOFF_LEN section; status: OK, ERROR (length or word mismatch) or SKIPPED (a test tree
  without words). The counts are 0 for an error or skipped sentence.
  """
  id: int
  length: int
  status: int
  matched: int = 0
  gold_brackets: int = 0
  test_brackets: int = 0
  crossing: int = 0
  words: int = 0
  correct_tags: int = 0

  def row(self) -> str:
    return (f'{self.id:4d}  {self.length:3d}    {self.status:d}  '
            f'{self.recall:6.2f} {self.precision:6.2f}   {self.matched:3d}    '
            f'{self.gold_brackets:3d}  {self.test_brackets:3d}    {self.crossing:3d}'
            f'   {self.words:4d}  {self.correct_tags:4d}   {self.tagging_accuracy:6.2f}\n')


@dataclasses.dataclass
class Totals(_Rates):
  """Corpus totals over a set of sentences; error and skipped sentences add nothing but
  their count. The properties are EVALB's summary figures, in percent (average crossing in
  brackets per sentence)."""
  sentences: int = 0
  error_sentences: int = 0
  skipped: int = 0
  matched: int = 0
  gold_brackets: int = 0
  test_brackets: int = 0
  complete: int = 0
  words: int = 0
  correct_tags: int = 0
  crossing: int = 0
  no_crossing: int = 0
  two_or_less_crossing: int = 0

  def add(self, s: SentenceScore) -> None:
    self.sentences += 1
    if s.status == ERROR:
      self.error_sentences += 1
      return
    if s.status == SKIPPED:
      self.skipped += 1
      return
    self.matched += s.matched
    self.gold_brackets += s.gold_brackets
    self.test_brackets += s.test_brackets
    # Equal counts: a sentence with no bracket on either side is a complete match.
    self.complete += s.gold_brackets == s.test_brackets == s.matched
    self.words += s.words
    self.correct_tags += s.correct_tags
    self.crossing += s.crossing
    self.no_crossing += s.crossing == 0
    self.two_or_less_crossing += s.crossing <= 2

  @property
  def valid_sentences(self) -> int:
    return self.sentences - self.error_sentences - self.skipped

  @property
  def f1(self) -> float:
    """2PR/(P+R) on the rounded-nowhere percentages; 0.0 where both are 0 (EVALB: nan)."""
    p, r = self.precision, self.recall
    return 2 * p * r / (p + r) if p + r > 0 else 0.0

  @property
  def complete_match(self) -> float:
    return _percent(self.complete, self.valid_sentences)

  @property
  def average_crossing(self) -> float:
    n = self.valid_sentences
    return 1.0 * self.crossing / n if n > 0 else 0.0

  @property
  def no_crossing_percent(self) -> float:
    return _percent(self.no_crossing, self.valid_sentences)

  @property
  def two_or_less_crossing_percent(self) -> float:
    return _percent(self.two_or_less_crossing, self.valid_sentences)

  def summary(self, title: str) -> str:
    """One section of EVALB's `=== Summary ===`, headed `-- TITLE --`."""
    p, r = self.precision, self.recall
    # glibc prints the 0/0 of evalb.c's F-measure as -nan (the x86 default NaN is negative).
    f1 = f'{self.f1:6.2f}' if p + r > 0 else '  -nan'
    return (f'\n-- {title} --\n'
            f'Number of sentence        = {self.sentences:6d}\n'
            f'Number of Error sentence  = {self.error_sentences:6d}\n'
            f'Number of Skip  sentence  = {self.skipped:6d}\n'
            f'Number of Valid sentence  = {self.valid_sentences:6d}\n'
            f'Bracketing Recall         = {r:6.2f}\n'
            f'Bracketing Precision      = {p:6.2f}\n'
            f'Bracketing FMeasure       = {f1}\n'
            f'Complete match            = {self.complete_match:6.2f}\n'
            f'Average crossing          = {self.average_crossing:6.2f}\n'
            f'No crossing               = {self.no_crossing_percent:6.2f}\n'
            f'2 or less crossing        = {self.two_or_less_crossing_percent:6.2f}\n'
            f'Tagging accuracy          = {self.tagging_accuracy:6.2f}\n')


def _of_total(name: str) -> property:
  return property(lambda self: getattr(self.total, name),
                  doc=f'`total.{name}`: the figure over all sentences.')


@dataclasses.dataclass
class EvalbResult:
  """EVALB's result on a corpus.

  total: all sentences; short: sentences whose gold length is <= cutoff_len;
  per_sentence: one SentenceScore per tree; errors: EVALB's messages for error sentences,
  e.g. '3 : Length unmatch (4|5)'. `recall`, `precision`, `f1`, `complete_match`,
  `average_crossing`, `tagging_accuracy`, `sentences`, `error_sentences`, `skipped` and
  `valid_sentences` are those of `total`.
  """
  cutoff_len: int = 40
  total: Totals = dataclasses.field(default_factory=Totals)
  short: Totals = dataclasses.field(default_factory=Totals)
  per_sentence: list[SentenceScore] = dataclasses.field(default_factory=list)
  errors: list[str] = dataclasses.field(default_factory=list)

  recall = _of_total('recall')
  precision = _of_total('precision')
  f1 = _of_total('f1')
  complete_match = _of_total('complete_match')
  average_crossing = _of_total('average_crossing')
  tagging_accuracy = _of_total('tagging_accuracy')
  sentences = _of_total('sentences')
  error_sentences = _of_total('error_sentences')
  skipped = _of_total('skipped')
  valid_sentences = _of_total('valid_sentences')

  def add(self, score: SentenceScore, error: Optional[str] = None) -> None:
    """Adds one sentence, and EVALB's error message for it if it is an error sentence."""
    self.per_sentence.append(score)
    self.total.add(score)
    if score.length <= self.cutoff_len:
      self.short.add(score)
    if error is not None:
      self.errors.append(error)

  def table(self) -> str:
    """EVALB's per-sentence table with its header and its totals line."""
    rows = ''.join(s.row() for s in self.per_sentence)
    t = self.total
    totals = ''
    if t.gold_brackets > 0 and t.test_brackets > 0:
      totals = (f'                {t.recall:6.2f} {t.precision:6.2f} {t.matched:6d} '
                f'{t.gold_brackets:5d} {t.test_brackets:5d}  {t.crossing:5d}')
    totals += f'  {t.words:5d} {t.correct_tags:5d}   {t.tagging_accuracy:6.2f}\n'
    return _HEADER + _RULE + rows + _RULE + totals

  def summary(self) -> str:
    """EVALB's `=== Summary ===`: all sentences, then those of length <= cutoff_len."""
    return ('=== Summary ===\n' + self.total.summary('All')
            + self.short.summary(f'len<={self.cutoff_len}'))

  def report(self, per_sentence: bool = True) -> str:
    """What `evalb` prints on standard output; without the table if per_sentence=False."""
    return (self.table() if per_sentence else '') + self.summary()
