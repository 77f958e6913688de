"""EVALB's own reading of a bracketed tree, and its 2006 repair of quote-length mismatches.

This is not a treebank reader: it reads a line the way `evalb.c` does, so that scores agree.

* `(LABEL WORD)`, i.e. `(`, a label, whitespace, a word, `)` with nothing between, is a
  preterminal; anything else opened by `(` is a bracket, including an unlabelled `( ...)`
  root (label '') and `(LABEL)` with no word (an empty bracket, never scored). `(LABEL )` is
  a preterminal whose word is ''.
* A preterminal whose exact tag is a DELETE_LABEL is dropped with its word before anything
  else: spans count the remaining words only, and a bracket left with no word is not scored.
  Each tree is judged by its own tags, so a test tree that tags a word `.` loses that word.
* The sentence length (for CUTOFF_LEN) counts every preterminal of the gold tree whose tag is
  not a DELETE_LABEL_FOR_LENGTH, punctuation included.
* Several trees on one line are read as one sentence, as `evalb.c` does.

Where `evalb.c` aborts, loops or reads outside its buffers (a word outside a preterminal, a
preterminal with two words, unbalanced brackets), this raises EvalbError naming the tree.
"""

import dataclasses
import re

from t2t_jax.parsing.evalb.params import WHITESPACE, EvalbError, EvalbParams

_W = re.escape(WHITESPACE)
_T = _W + r'()'
# One token: a preterminal, an opening bracket with its label, a closing bracket, spaces,
# or anything else (a stray word). A label and a word stop at a space or a bracket.
_TOKEN = re.compile(
    rf'\((?P<tag>[^{_T}]*)[{_W}]+(?P<word>[^{_T}]*)\)'
    rf'|\((?P<label>[^{_T}]*)|(?P<close>\))|[{_W}]+|(?P<junk>[^{_T}]+)')


@dataclasses.dataclass
class Bracket:
  """A constituent over words [start, end) of the tree's kept words; label as written."""
  start: int
  end: int
  label: str


@dataclasses.dataclass
class QuoteTerm:
  """A QUOTE_LABEL preterminal as read, kept or not, for `fix_quotes`.

  index: the number of kept words before it; bracket: the number of brackets opened before
  it; enclosing: the indices of the brackets open around it.
  """
  word: str
  tag: str
  index: int
  bracket: int
  enclosing: tuple[int, ...]


@dataclasses.dataclass
class Tree:
  """One line as EVALB sees it.

  words, tags: the kept preterminals, in order; brackets: in the order they open;
  length: the sentence length for CUTOFF_LEN; leaves: all preterminals, deleted ones too.
  """
  words: list[str]
  tags: list[str]
  brackets: list[Bracket]
  length: int
  leaves: int
  quotes: list[QuoteTerm]


def read_tree(line: str, params: EvalbParams, where: str) -> Tree:
  """Reads one line of a gold or test file; `where` (e.g. 'gold.txt, tree 3') names it in
  errors."""
  tree = Tree([], [], [], 0, 0, [])
  stack: list[int] = []
  for token in _TOKEN.finditer(line):
    kind = token.lastgroup
    if kind == 'word':  # a preterminal (its last group is `word`)
      tag, word = token['tag'], token['word']
      tree.leaves += 1
      if tag not in params.delete_labels_for_length:
        tree.length += 1
      if params.is_quote_term(tag, word):
        tree.quotes.append(QuoteTerm(word, tag, len(tree.words), len(tree.brackets), tuple(stack)))
      if not params.is_deleted_tag(tag):
        tree.words.append(word)
        tree.tags.append(tag)
    elif kind == 'label':
      stack.append(len(tree.brackets))
      tree.brackets.append(Bracket(len(tree.words), -1, token['label']))
    elif kind == 'close':
      if not stack:
        raise EvalbError(f"{where}: unbalanced brackets: ')' at character {token.start() + 1} "
                         'closes nothing')
      tree.brackets[stack.pop()].end = len(tree.words)
    elif kind == 'junk':
      raise EvalbError(f'{where}: {token.group()!r} at character {token.start() + 1} is not in '
                       'a (TAG word) pair; expected one tree per line in Penn Treebank brackets')
  if stack:
    raise EvalbError(f"{where}: unbalanced brackets: {len(stack)} '(' not closed")
  return tree


def fix_quotes(gold: Tree, test: Tree, params: EvalbParams) -> None:
  """EVALB 2006's repair of a length mismatch caused by quote tags (QUOTE_LABEL), in place.

  For each test quote term in order and each gold quote term at the same word index with a
  different tag: if exactly one of the two tags is a DELETE_LABEL, the deleted term is put
  back as a word into its tree (brackets opened after it move right, brackets around it grow),
  and that tree's quote terms from this one on move one word right. The test term's index is
  read once per test term, as `evalb.c` does, even when a repair moves it.
  """
  for i, test_quote in enumerate(test.quotes):
    index = test_quote.index
    for j, gold_quote in enumerate(gold.quotes):
      if gold_quote.index != index or gold_quote.tag == test_quote.tag:
        continue
      gold_deleted = params.is_deleted_tag(gold_quote.tag)
      test_deleted = params.is_deleted_tag(test_quote.tag)
      if gold_deleted and not test_deleted:
        _reinsert(gold, gold_quote)
        _shift(gold.quotes, j)
      elif test_deleted and not gold_deleted:
        _reinsert(test, test_quote)
        _shift(test.quotes, i)


def _reinsert(tree: Tree, quote: QuoteTerm) -> None:
  tree.words.insert(quote.index, quote.word)
  tree.tags.insert(quote.index, quote.tag)
  for bracket in tree.brackets[quote.bracket:]:
    bracket.start += 1
    bracket.end += 1
  for b in quote.enclosing:
    tree.brackets[b].end += 1


def _shift(quotes: list[QuoteTerm], first: int) -> None:
  for quote in quotes[first:]:
    quote.index += 1
