"""Penn-Treebank bracketed trees: reading, cleaning, writing.

A file holds any number of trees, one per line or spread over several lines (`.mrg` files);
it is read as a stream of top-level brackets, so both layouts (and a mix) read alike. A tree
is `(LABEL CHILD ...)` where every child is either a single word (a preterminal: `(DT the)`)
or all children are trees; the outermost bracket may have no label (`( (S ...) )`, as the
WSJ files have it).

`clean` makes the trees the parser learns and is scored on:

* empty elements (`-NONE-` preterminals) are removed, and every constituent left without
  children by that (or written without any) is removed too;
* function tags and indices are stripped: `NP-SBJ-1`, `NP=2`, `PP-LOC-CLR` -> `NP`, `NP`,
  `PP`; an alternative `ADVP|PRT` keeps its first label; labels written `-X-` (`-LRB-`,
  `-RRB-`, `-NONE-`) are kept whole;
* a root labelled '', `TOP` or `ROOT` over a single constituent is replaced by that
  constituent (tensor2tensor strips `TOP` the same way); an unlabelled root over several
  constituents is labelled `TOP`.

Every malformed input raises `TreeError` (a `DataError`, so main.py prints one line) naming
the file, the 1-based tree number and the line where that tree starts.
"""

import dataclasses
import re
from typing import Iterator, List, Optional, Tuple, Union

from t2t_jax.data.textfiles import DataError

ROOT_LABELS = ('', 'TOP', 'ROOT')
EMPTY_TAG = '-NONE-'
_TOKEN = re.compile(r'\(|\)|[^\s()]+')


class TreeError(DataError):
  """A tree that cannot be read or used; the message names the file, tree and line."""


@dataclasses.dataclass
class Tree:
  """A constituent: `label` over `children`, each a `Tree` or a word (`str`).

  A preterminal (a POS tag over its word) has exactly one child, the word; every other
  constituent has only `Tree` children.
  """
  label: str
  children: List[Union['Tree', str]]

  @property
  def is_preterminal(self) -> bool:
    return len(self.children) == 1 and isinstance(self.children[0], str)

  def preterminals(self) -> List['Tree']:
    """The preterminals, left to right."""
    if self.is_preterminal:
      return [self]
    return [p for child in self.children for p in child.preterminals()]

  def words(self) -> List[str]:
    return [p.children[0] for p in self.preterminals()]

  def tags(self) -> List[str]:
    return [p.label for p in self.preterminals()]

  def __str__(self) -> str:
    return to_string(self)


def to_string(tree: Tree) -> str:
  """The tree on one line: `(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))`."""
  if tree.is_preterminal:
    return f'({tree.label} {tree.children[0]})'
  return '(' + ' '.join([tree.label] + [to_string(c) for c in tree.children]) + ')'


def escape_word(word: str) -> str:
  """A word as a treebank leaf: brackets become `-LRB-` / `-RRB-` (PTB's spelling), since a
  bracket inside a leaf would end or open a constituent."""
  return word.replace('(', '-LRB-').replace(')', '-RRB-')


def _tokens(text: str) -> Iterator[Tuple[str, int]]:
  """(token, 1-based line) for every bracket and atom of `text`."""
  line, pos = 1, 0
  for match in _TOKEN.finditer(text):
    line += text.count('\n', pos, match.start())
    pos = match.start()
    yield match.group(), line


def read_trees(text: str, path: str) -> Iterator[Tuple[int, int, Tree]]:
  """Yields (tree number, line of its opening bracket, tree) for every tree of `text`.

  `path` names the file in errors. Raises TreeError for a closing bracket without an open
  one, brackets left open at the end, text outside any bracket, a word beside constituents,
  a tag over several words, or a word in place of a label.
  """
  number, start, stack = 0, 0, []  # stack: [label, children] of the open brackets
  where = lambda: f'{path}: tree {number} (line {start})'  # noqa: E731
  expect_label = False
  for token, line in _tokens(text):
    if token == '(':
      if not stack:
        number, start = number + 1, line
      elif expect_label:
        stack[-1][0] = ''  # `( (S ...` : an unlabelled bracket
      stack.append([None, []])
      expect_label = True
    elif token == ')':
      if not stack:
        raise TreeError(f'{path}: line {line}: unbalanced brackets: a closing bracket after '
                        f'tree {number} closes nothing.')
      label, children = stack.pop()
      tree = _node('' if label is None else label, children, where, line)
      expect_label = False
      if stack:
        stack[-1][1].append(tree)
      else:
        yield number, start, tree
    elif not stack:
      raise TreeError(f'{path}: line {line}: text outside any tree ({token!r}) after tree '
                      f'{number}; expected "(".')
    elif expect_label:
      stack[-1][0] = token
      expect_label = False
    else:
      stack[-1][1].append(token)
  if stack:
    raise TreeError(f'{where()}: unbalanced brackets: {len(stack)} still open at the end '
                    'of the file.')


def _node(label: str, children: list, where, line: int) -> Tree:
  words = [c for c in children if isinstance(c, str)]
  if words and len(children) > 1:
    what = 'several words' if len(words) == len(children) else 'a word beside constituents'
    raise TreeError(f'{where()}: {label or "an unlabelled bracket"} on line {line} has '
                    f'{what} ({" ".join(words)}); expected (TAG word) or constituents.')
  return Tree(label, children)


def strip_label(label: str) -> str:
  """`NP-SBJ-1` -> `NP`, `NP=2` -> `NP`, `ADVP|PRT` -> `ADVP`; `-LRB-`, `-NONE-` unchanged."""
  if len(label) > 2 and label.startswith('-') and label.endswith('-'):
    return label
  return re.split(r'[-=|]', label, maxsplit=1)[0] or label


def _prune(tree: Tree) -> Optional[Tree]:
  """The tree without empty elements, emptied constituents and function tags."""
  if tree.is_preterminal:
    return None if tree.label == EMPTY_TAG else Tree(strip_label(tree.label), tree.children)
  children = [c for c in (_prune(child) for child in tree.children) if c is not None]
  return Tree(strip_label(tree.label), children) if children else None


def clean(tree: Tree, path: str = '<tree>', number: int = 1, line: int = 1) -> Tree:
  """The cleaned tree (module doc); TreeError naming `path`, `number`, `line` if no word is
  left."""
  root_label = tree.label
  if tree.is_preterminal and root_label in ROOT_LABELS:
    raise TreeError(f'{path}: tree {number} (line {line}): the word {tree.children[0]!r} has '
                    'no POS tag; expected (TAG word).')
  pruned = _prune(tree)
  if pruned is None:
    raise TreeError(f'{path}: tree {number} (line {line}) has no words '
                    f'(after removing {EMPTY_TAG} elements): {to_string(tree)}')
  if root_label in ROOT_LABELS and not pruned.is_preterminal:
    if len(pruned.children) == 1 and not pruned.children[0].is_preterminal:
      return pruned.children[0]
    pruned.label = root_label or 'TOP'
  return pruned
