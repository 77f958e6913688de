"""Constituency scoring exactly as EVALB (Sekine and Collins, `evalb.c`) computes it.

    result = evalb.score_lines(gold_lines, test_lines)          # COLLINS.prm by default
    result.f1, result.recall, result.precision, result.complete_match, result.tagging_accuracy
    result.sentences, result.error_sentences, result.skipped; print(result.summary())

One tree per line in both files, paired line by line. Per sentence, as `evalb.c`:

1. Read each tree (`read`): preterminals with a DELETE_LABEL tag (COLLINS.prm: `TOP
   -NONE- , : `` '' .`) leave with their word, each tree by its own tags.
2. A test tree with no word left is skipped (`Stat.` 2; a parser's failure). If the two
   trees keep different numbers of words (after the QUOTE_LABEL repair, if configured), or
   any word differs (EQ_WORD aside), the sentence is an error (`Stat.` 1): it is reported
   and scores nothing. The run gives up at the (MAX_ERROR+2)-th error sentence.
3. Brackets that cover no word, or whose label (cut at the first `-` or `=`: `NP-SBJ-1`,
   `NP=2` -> `NP`) is a DELETE_LABEL, are not scored; an unlabelled root `( ...)` is scored
   (its label is '').
4. Each gold bracket, in order, matches the first unmatched test bracket with its span and
   an equal label (EQ_LABEL: ADVP = PRT), so duplicates count as a multiset. A test bracket
   crosses if it overlaps some gold bracket without nesting. A tag is correct if equal to
   the gold tag (EQ_LABEL applies to tags too).
5. Recall, precision and crossings are corpus totals over the valid sentences.

Where `evalb.c` does something well defined, this does the same; the differences are on
input that `evalb.c` cannot score: a word outside a preterminal or a preterminal with two
words (`evalb.c` loops until MAX_ERROR and exits), unbalanced brackets, a gold tree with no
word, or files with different numbers of lines raise EvalbError naming the file and tree.
`evalb.c`'s fixed buffers (5000 bytes a line, 200 words or brackets) do not apply here.
Files are read as UTF-8 (`textio`). `EvalbResult.f1` is 0.0 where precision and recall are
both 0; EVALB prints `-nan` there, and so does `summary()`.

Command line (prints EVALB's summary; --per-sentence adds its table, the whole output then
being `evalb -p PRM GOLD TEST`'s):
  python -m t2t_jax.parsing.evalb --gold GOLD --test TEST [--param FILE.prm] [--per-sentence]
"""

import argparse
import collections
import dataclasses
import re
import sys
from typing import Optional, Sequence

from t2t_jax.storage import textio
from t2t_jax.parsing.evalb.read import Bracket, Tree, fix_quotes, read_tree
# Re-exported: the API is `evalb.*`.
from t2t_jax.parsing.evalb.params import (COLLINS, NEW, EvalbError, EvalbParams,  # noqa: F401
                                          read_params)
from t2t_jax.parsing.evalb.result import (ERROR, OK, SKIPPED, EvalbResult,  # noqa: F401
                                          SentenceScore, Totals)

# EVALB cuts a bracket label at its first '-' or '=' (function tags, indices).
_FUNCTION_TAGS = re.compile('[-=]')


def score_lines(gold_lines: Sequence[str], test_lines: Sequence[str],
                params: EvalbParams = COLLINS, *, gold_name: str = 'gold',
                test_name: str = 'test') -> EvalbResult:
  """Scores test trees against gold trees, one tree per item, paired in order.

  gold_name and test_name name the inputs in errors (EvalbError).
  """
  if isinstance(gold_lines, str) or isinstance(test_lines, str):
    raise TypeError('gold_lines and test_lines must be sequences of trees, not a string')
  if len(gold_lines) != len(test_lines):
    raise EvalbError(f'{gold_name} has {len(gold_lines)} trees but {test_name} has '
                     f'{len(test_lines)}; EVALB pairs them line by line')
  result = EvalbResult(cutoff_len=params.cutoff_len)
  for number, (gold_line, test_line) in enumerate(zip(gold_lines, test_lines), 1):
    gold = read_tree(gold_line, params, f'{gold_name}, tree {number}')
    test = read_tree(test_line, params, f'{test_name}, tree {number}')
    if not gold.leaves:
      raise EvalbError(f'{gold_name}, tree {number}: no words; a gold tree needs at least '
                       'one (TAG word) pair')
    score, error = score_trees(number, gold, test, params)
    if error is None:
      result.add(score)
      continue
    # evalb.c exits when its error count, before this one, exceeds MAX_ERROR.
    if params.max_error is not None and len(result.errors) > params.max_error:
      raise EvalbError(
          f'{test_name}, tree {number}: {error}, error sentence {len(result.errors) + 1}: '
          f'EVALB gives up at MAX_ERROR+2 = {params.max_error + 2}, and so does this; check '
          'that the files pair up, or raise MAX_ERROR')
    result.add(score, f'{number} : {error}')
  return result


def score_files(gold_path: str, test_path: str, params: EvalbParams = COLLINS) -> EvalbResult:
  """`score_lines` on two UTF-8 files, one tree per line."""
  return score_lines(textio.read_lines(gold_path), textio.read_lines(test_path), params,
                     gold_name=gold_path, test_name=test_path)


def score_trees(number: int, gold: Tree, test: Tree,
                params: EvalbParams) -> tuple[SentenceScore, Optional[str]]:
  """One sentence: its score, and EVALB's error message if it is an error sentence.

  `gold` and `test` may be changed (the quote repair).
  """
  if not test.words:
    return SentenceScore(number, gold.length, SKIPPED), None
  if len(gold.words) != len(test.words):
    fix_quotes(gold, test, params)
    if len(gold.words) != len(test.words):
      error = f'Length unmatch ({len(gold.words)}|{len(test.words)})'
      return SentenceScore(number, gold.length, ERROR), error
  for gold_word, test_word in zip(gold.words, test.words):
    if not params.word_eq(gold_word, test_word):
      return SentenceScore(number, gold.length, ERROR), f'Words unmatch ({gold_word}|{test_word})'
  gold_brackets = _scored(gold.brackets, params)
  test_brackets = _scored(test.brackets, params)
  correct_tags = sum(params.label_eq(g, t) for g, t in zip(gold.tags, test.tags))
  return SentenceScore(
      number, gold.length, OK, matched=_matches(gold_brackets, test_brackets, params),
      gold_brackets=len(gold_brackets), test_brackets=len(test_brackets),
      crossing=_crossing(gold_brackets, test_brackets), words=len(gold.words),
      correct_tags=correct_tags), None


def _scored(brackets: list[Bracket], params: EvalbParams) -> list[Bracket]:
  """The brackets EVALB scores, labels cut at the first '-' or '=' (a label starting with
  one becomes '')."""
  scored = []
  for b in brackets:
    if b.start == b.end:  # no word left under it (all -NONE- or punctuation, or none at all)
      continue
    label = _FUNCTION_TAGS.split(b.label, 1)[0]
    if not params.is_deleted_bracket(label):
      scored.append(Bracket(b.start, b.end, label))
  return scored


def _matches(gold: list[Bracket], test: list[Bracket], params: EvalbParams) -> int:
  """Greedy multiset matching in reading order, as evalb.c (the order matters only for
  EQ_LABEL pairs that are not an equivalence)."""
  by_span = collections.defaultdict(list)
  for t in test:
    by_span[t.start, t.end].append(t)
  matched = set()
  for g in gold:
    for t in by_span.get((g.start, g.end), ()):
      if id(t) not in matched and (not params.labeled or params.label_eq(g.label, t.label)):
        matched.add(id(t))
        break
  return len(matched)


def _crossing(gold: list[Bracket], test: list[Bracket]) -> int:
  """Test brackets that overlap some gold bracket without either containing the other."""
  def crosses(t: Bracket) -> bool:
    return any(g.start < t.start < g.end < t.end or t.start < g.start < t.end < g.end
               for g in gold)
  return sum(crosses(t) for t in test)


def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = argparse.ArgumentParser(
      prog='python -m t2t_jax.parsing.evalb',
      description="Bracket scoring with EVALB's rules; prints EVALB's summary.")
  parser.add_argument('--gold', required=True, help='gold trees, one per line')
  parser.add_argument('--test', required=True, help='parsed trees, one per line, same order')
  parser.add_argument('--param', help="an EVALB .prm file (evalb -p); default: COLLINS.prm's "
                      'settings, built in')
  parser.add_argument('--max-error', type=int, help='override MAX_ERROR (evalb -e)')
  parser.add_argument('--cutoff-len', type=int, help='override CUTOFF_LEN (evalb -c)')
  parser.add_argument('--per-sentence', action='store_true',
                      help="also print EVALB's per-sentence table (then the output is evalb's)")
  args = parser.parse_args(argv)
  try:
    params = read_params(args.param) if args.param else COLLINS
    overrides = {k: v for k, v in (('max_error', args.max_error),
                                   ('cutoff_len', args.cutoff_len)) if v is not None}
    result = score_files(args.gold, args.test, dataclasses.replace(params, **overrides))
  except (EvalbError, textio.TextFileError, FileNotFoundError) as e:
    sys.exit(f'error: {e}')
  for error in result.errors:
    print(error, file=sys.stderr)
  sys.stdout.write(result.report(per_sentence=args.per_sentence))


if __name__ == '__main__':
  main()
