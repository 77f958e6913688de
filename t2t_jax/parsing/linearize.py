"""Trees as target sequences (tensor2tensor's WSJ linearization) and back.

A tree becomes one token per constituent and POS tag where it opens, and one token per
constituent where it closes; the words are left out (the source sentence has them):

  (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))  ->  (S (NP (DT (NN )NP (VP (VBD )VP (. )S

This is the token sequence of tensor2tensor's `words_and_tags_from_wsj_tree`
(`S NP DT NN /NP VP VBD /VP . /S`, see `t2t_tokens`) with one difference in spelling: an
opening token is written `(X` and a closing one `)X` instead of `X` and `/X`. The
vocabulary makes every tree token one unsplittable SentencePiece symbol (`▁(NP`, a
user-defined symbol, see `vocabulary_symbols`), and such a symbol is cut out of any word that
starts with it: spelled `NP` or `/S`, it would split `NPR` or `A/S` in the source sentences.
No treebank word starts with a bracket (they are written `-LRB-` / `-RRB-`, and
`trees.escape_word` does the same to the sentences given to the parser), so the bracket
spelling never touches a word.

`delinearize` turns any decoded sequence back into a tree over the input words; the repairs
are listed in its docstring.
"""

from typing import Iterable, List, Optional, Sequence, Union

from t2t_jax.parsing.trees import Tree

OPEN, CLOSE = '(', ')'
EXTRA_WORD_TAG = 'XX'  # the tag of a word the decoded sequence had no POS tag for
REPAIR_ROOT = 'TOP'    # the root over several top-level pieces (EVALB ignores TOP brackets)
SPACE_SYMBOL = '\u2581'  # SentencePiece's word-start marker


def linearize(tree: Tree) -> List[str]:
  """The target tokens of `tree` (module doc)."""
  if tree.is_preterminal:
    return [OPEN + tree.label]
  tokens = [OPEN + tree.label]
  for child in tree.children:
    tokens += linearize(child)
  return tokens + [CLOSE + tree.label]


def to_pair(tree: Tree) -> tuple[str, str]:
  """(sentence, target): the words and the linearized tree, each joined by spaces."""
  return ' '.join(tree.words()), ' '.join(linearize(tree))


def t2t_tokens(tokens: Sequence[str]) -> List[str]:
  """`tokens` in tensor2tensor's spelling: `(NP` -> `NP`, `)NP` -> `/NP`."""
  return [t[1:] if t[0] == OPEN else '/' + t[1:] for t in tokens]


def vocabulary_symbols(targets: Iterable[str]) -> List[str]:
  """The SentencePiece user-defined symbols for `targets` (linearized trees): `▁` + every
  distinct token, sorted. With the leading `▁` each token is one piece, spaces included."""
  found = set()
  for target in targets:
    found.update(target.split())
  return sorted(SPACE_SYMBOL + t for t in found if len(t) > 1 and t[0] in (OPEN, CLOSE))


def phrase_labels(symbols: Iterable[str]) -> frozenset:
  """The constituent labels among tree tokens or vocabulary pieces: X for every `)X` (or
  `▁)X`); POS tags never close."""
  labels = set()
  for symbol in symbols:
    token = symbol[1:] if symbol.startswith(SPACE_SYMBOL) else symbol
    if len(token) > 1 and token[0] == CLOSE:
      labels.add(token[1:])
  return frozenset(labels)


def delinearize(sequence: Union[str, Sequence[str]], words: Sequence[str],
                labels: Optional[Iterable[str]] = None) -> Tree:
  """A tree over exactly `words` from a (possibly broken) decoded target sequence.

  Args:
    sequence: the decoded text (tokens separated by spaces) or its tokens.
    words: the sentence's words, at least one.
    labels: the constituent labels (`phrase_labels` of the vocabulary); an opening token
      of another label is a POS tag. None: the labels that close somewhere in `sequence`
      (exact for any well-formed sequence, e.g. a gold target).

  Repairs, in order, so that every output is a tree that scores:
    1. Tokens that are not `(X` or `)X` with a non-empty X are dropped.
    2. A closing `)X` closes the innermost open constituent labelled X and every constituent
       opened inside it; with no open X it closes the innermost open constituent (a wrong
       label); with none open it is dropped. Constituents still open at the end are closed.
    3. More POS tags than words: the last surplus tags are dropped. Fewer: each word left
       over becomes `(XX word)` at the end of the outermost constituent.
    4. Constituents over no word are removed. Several top-level pieces (or none) are put
       under one `TOP` root.
  """
  if not words:
    raise ValueError('delinearize needs at least one word')
  tokens = sequence.split() if isinstance(sequence, str) else list(sequence)
  tokens = [t for t in tokens if len(t) > 1 and t[0] in (OPEN, CLOSE)]
  labels = phrase_labels(tokens) if labels is None else frozenset(labels)
  top = Tree('', [])
  stack, slots = [top], []
  for token in tokens:
    label = token[1:]
    if token[0] == OPEN:
      node = Tree(label, [] if label in labels else [None])
      stack[-1].children.append(node)
      if label in labels:
        stack.append(node)
      else:
        slots.append((stack[-1], node))
    elif len(stack) > 1:
      open_labels = [n.label for n in stack[1:]]
      depth = (len(open_labels) - open_labels[::-1].index(label) if label in open_labels
               else len(open_labels))
      del stack[depth:]
  for parent, node in slots[len(words):]:
    parent.children = [c for c in parent.children if c is not node]  # not by equality
  for (_, node), word in zip(slots, words):
    node.children = [word]
  only = top.children[0] if len(top.children) == 1 else None
  outer = only if only is not None and only.label in labels else top
  outer.children += [Tree(EXTRA_WORD_TAG, [w]) for w in words[len(slots):]]
  top.children = _without_empty(top.children)
  if len(top.children) == 1 and not top.children[0].is_preterminal:
    return top.children[0]
  top.label = REPAIR_ROOT
  return top


def _without_empty(children: list) -> list:
  """`children` without the constituents over no word (recursively)."""
  kept = []
  for child in children:
    if not child.is_preterminal:
      child.children = _without_empty(child.children)
      if not child.children:
        continue
    kept.append(child)
  return kept
