"""A synthetic English treebank: a probabilistic grammar with real words and PTB tags.

No Penn Treebank can be had on every machine, so this grammar makes trees in the same
bracketed format (`( (S ...) )`, one per line) for the whole path to run offline: read ->
linearize -> train -> beam search -> de-linearize -> score. It has nested NP, VP, PP, SBAR
(relative clauses and `that` complements, two levels deep), ADJP and ADVP, coordinated
noun phrases, verb phrases and clauses, with the tags DT JJ NN NNS NNP PRP VBD VB MD IN CC
RB WDT WP `,` `.`.

It is built so that every sentence has exactly one tree the grammar can make, so a parser
can reach F1 100 on held-out trees and a score below that measures the parser alone:

* each word has one tag;
* prepositions that attach to nouns (`of with from about`) never attach to verbs, and
  those that attach to verbs (`in on at near after before during under`) never to nouns;
* a prepositional object, the object inside a relative clause and a conjunct are simple
  noun phrases (a coordination takes no modifier of its own);
* relative clauses have no prepositional phrase; a `that` complement ends its verb phrase;
* clauses are coordinated (`, and`) only at the top, and a coordinated verb phrase has no
  `that` complement.

  python -m t2t_jax.parsing.grammar --out DIR [--train 20000 --dev 500 --test 500 --seed 0]

writes DIR/train.trees, dev.trees and test.trees (refusing to overwrite any); dev and test
sentences never occur in train or in each other.
"""

import argparse
import os
import random
import sys
from typing import Dict, List, Optional, Sequence

from t2t_jax.storage import textio
from t2t_jax.parsing.trees import Tree, to_string

LEXICON: Dict[str, Sequence[str]] = {
    'DT': ('the', 'a', 'this', 'every', 'some', 'no', 'another', 'each'),
    'JJ': ('old', 'young', 'small', 'large', 'red', 'green', 'quiet', 'loud', 'happy',
           'tired', 'clever', 'strange', 'famous', 'local', 'new', 'ancient', 'bright',
           'dark', 'heavy', 'gentle', 'busy', 'rich', 'poor', 'honest'),
    'NN': ('dog', 'cat', 'teacher', 'farmer', 'doctor', 'student', 'king', 'queen', 'house',
           'garden', 'river', 'city', 'car', 'book', 'letter', 'table', 'window', 'market',
           'bridge', 'village', 'painter', 'soldier', 'child', 'horse', 'ship', 'tree',
           'song', 'story', 'company', 'report', 'office', 'station'),
    'NNS': ('dogs', 'cats', 'teachers', 'farmers', 'doctors', 'students', 'houses',
            'gardens', 'rivers', 'cities', 'cars', 'books', 'letters', 'tables', 'apples',
            'workers', 'friends', 'children', 'horses', 'ships', 'songs', 'stories'),
    'NNP': ('John', 'Mary', 'Paris', 'London', 'Smith', 'Anna', 'Peter', 'Berlin', 'Tokyo',
            'Maria', 'David', 'Sarah', 'Jones', 'Lisbon', 'Chen', 'Rome'),
    'PRP_SUBJ': ('he', 'she', 'they', 'we', 'it'),
    'PRP_OBJ': ('him', 'her', 'them', 'us', 'it'),
    'VBD_TRANS': ('saw', 'found', 'liked', 'visited', 'painted', 'bought', 'sold', 'met',
                  'followed', 'helped', 'watched', 'built', 'opened', 'wrote', 'read',
                  'carried', 'praised', 'chased', 'answered', 'needed'),
    'VBD_INTRANS': ('slept', 'laughed', 'arrived', 'waited', 'smiled', 'left', 'danced',
                    'worked', 'cried', 'rested'),
    'VBD_SAY': ('said', 'believed', 'reported', 'claimed', 'thought', 'knew', 'heard'),
    'VB': ('see', 'find', 'visit', 'buy', 'sell', 'meet', 'help', 'build', 'open', 'write',
           'carry', 'need'),
    'MD': ('will', 'could', 'might', 'should', 'must', 'can'),
    'IN_NOUN': ('of', 'with', 'from', 'about'),
    'IN_VERB': ('in', 'on', 'at', 'near', 'after', 'before', 'during', 'under'),
    'CC': ('and', 'or', 'but'),
    'RB_DEGREE': ('very', 'quite', 'rather', 'extremely'),
    'RB_MANNER': ('quickly', 'slowly', 'quietly', 'happily', 'carefully', 'suddenly'),
    'WDT': ('which',),
    'WP': ('who',),
}
# The PTB tag of each lexicon class (classes split a tag by how its words combine).
TAG = {name: name.split('_')[0] for name in LEXICON}
MAX_CLAUSE_DEPTH = 2  # clauses inside clauses: at most two `that` complements deep


class Grammar:
  """Samples trees (the module doc's grammar) from one `random.Random`."""

  def __init__(self, seed: int = 0):
    self.rng = random.Random(seed)

  def _chance(self, p: float) -> bool:
    return self.rng.random() < p

  def _word(self, cls: str) -> Tree:
    return Tree(TAG[cls], [self.rng.choice(LEXICON[cls])])

  def base_np(self, obj: bool = False) -> Tree:
    """A simple noun phrase: determiner, adjectives and noun; a name; a pronoun."""
    r = self.rng.random()
    if r < 0.12:
      return Tree('NP', [self._word('PRP_OBJ' if obj else 'PRP_SUBJ')])
    if r < 0.27:
      return Tree('NP', [self._word('NNP')] + ([self._word('NNP')] if self._chance(0.3)
                                               else []))
    plural = r > 0.8
    children = [self._word('DT')] if not plural or self._chance(0.5) else []
    if self._chance(0.12):
      children.append(Tree('ADJP', [self._word('RB_DEGREE'), self._word('JJ')]))
    else:
      children += [self._word('JJ') for _ in range(self.rng.choice((0, 0, 1, 1, 2)))]
    return Tree('NP', children + [self._word('NNS' if plural else 'NN')])

  def _pp(self, attach: str) -> Tree:
    obj = self.base_np(obj=True)
    if attach == 'VERB' and self._chance(0.2):
      obj = Tree('NP', [obj, self._pp('NOUN')])
    return Tree('PP', [self._word('IN_' + attach), obj])

  def _np_item(self, obj: bool) -> Tree:
    """A conjunct: a simple noun phrase, perhaps with a noun-attached PP."""
    np = self.base_np(obj)
    return Tree('NP', [np, self._pp('NOUN')]) if self._chance(0.2) else np

  def _relative(self) -> Tree:
    who = Tree('WHNP', [self._word(self.rng.choice(('WDT', 'WP')))])
    if self._chance(0.7):
      vp = Tree('VP', [self._word('VBD_TRANS'), self.base_np(obj=True)])
    else:
      vp = Tree('VP', [self._word('VBD_INTRANS')])
    return Tree('SBAR', [who, Tree('S', [vp])])

  def np(self, obj: bool = False) -> Tree:
    """A full noun phrase: simple, with a PP, with a relative clause, or coordinated."""
    r = self.rng.random()
    if r < 0.12:
      return Tree('NP', [self._np_item(obj), self._word('CC'), self._np_item(obj)])
    if r < 0.22:
      return Tree('NP', [self.base_np(obj), self._relative()])
    if r < 0.42:
      return Tree('NP', [self.base_np(obj), self._pp('NOUN')])
    return self.base_np(obj)

  def _simple_vp(self) -> Tree:
    """A verb phrase without a `that` complement."""
    r = self.rng.random()
    if r < 0.5:
      children = [self._word('VBD_TRANS'), self.np(obj=True)]
    elif r < 0.75:
      children = [self._word('VBD_INTRANS')]
    else:
      inner = [self._word('VB'), self.np(obj=True)]
      if self._chance(0.3):
        inner.append(self._pp('VERB'))
      return Tree('VP', [self._word('MD'), Tree('VP', inner)])
    if self._chance(0.35):
      children.append(self._pp('VERB'))
    if self._chance(0.15):
      children.append(Tree('ADVP', [self._word('RB_MANNER')]))
    return Tree('VP', children)

  def vp(self, depth: int) -> Tree:
    r = self.rng.random()
    if r < 0.15 and depth < MAX_CLAUSE_DEPTH:
      complement = Tree('SBAR', [Tree('IN', ['that']), self.clause(depth + 1)])
      return Tree('VP', [self._word('VBD_SAY'), complement])
    if r < 0.25:
      return Tree('VP', [self._simple_vp(), self._word('CC'), self._simple_vp()])
    return self._simple_vp()

  def clause(self, depth: int = 0) -> Tree:
    return Tree('S', [self.np(), self.vp(depth)])

  def sentence(self) -> Tree:
    """A tree as the treebank has it: an unlabelled root over S, ending in a full stop."""
    if self._chance(0.1):
      s = Tree('S', [self.clause(), Tree(',', [',']), self._word('CC'), self.clause(),
                     Tree('.', ['.'])])
    else:
      s = self.clause()
      s.children.append(Tree('.', ['.']))
    return Tree('', [s])


def generate(sizes: Dict[str, int], seed: int = 0) -> Dict[str, List[Tree]]:
  """{split: trees} for `sizes` ({'train': 20000, 'dev': 500, ...}, generated in that
  order); a sentence of a later split never repeats one of an earlier split or its own."""
  grammar, seen, out = Grammar(seed), set(), {}
  for index, (split, size) in enumerate(sizes.items()):
    out[split], own = [], set()
    attempts = 0
    while len(out[split]) < size:
      attempts += 1
      if attempts > 100 * size + 1000:
        raise RuntimeError(f'could not find {size} new sentences for {split}')
      tree = grammar.sentence()
      words = ' '.join(tree.words())
      if index > 0 and (words in seen or words in own):
        continue
      own.add(words)
      out[split].append(tree)
    seen |= own
  return out


def write_treebank(out_dir: str, sizes: Dict[str, int], seed: int = 0) -> List[str]:
  """Writes `<out_dir>/<split>.trees` for `sizes` (one tree per line); refuses, before
  writing anything, when one of them exists. Returns the paths."""
  paths = {split: os.path.join(out_dir, f'{split}.trees') for split in sizes}
  for path in paths.values():
    if os.path.exists(path):
      raise FileExistsError(f'{path} already exists; choose another --out or remove it')
  for split, treebank in generate(sizes, seed).items():
    textio.write_lines_atomic(paths[split], [to_string(t) for t in treebank])
  return list(paths.values())


def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', required=True, help='folder for train/dev/test.trees')
  parser.add_argument('--train', type=int, default=20000, help='training trees')
  parser.add_argument('--dev', type=int, default=500, help='dev trees')
  parser.add_argument('--test', type=int, default=500, help='test trees')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  try:
    for path in write_treebank(args.out, {'train': args.train, 'dev': args.dev,
                                          'test': args.test}, args.seed):
      print(path)
  except FileExistsError as e:
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  main()
