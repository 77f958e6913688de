"""Tests for t2t_jax.parsing.grammar: the synthetic treebank and the promises it makes."""

import collections
import os

import pytest

from t2t_jax.parsing import grammar, trees

LABELS = {'S', 'NP', 'VP', 'PP', 'SBAR', 'WHNP', 'ADJP', 'ADVP'}


@pytest.fixture(scope='module')
def sample():
  g = grammar.Grammar(1)
  return [trees.clean(g.sentence()) for _ in range(2000)]


def _nodes(tree):
  yield tree
  if not tree.is_preterminal:
    for child in tree.children:
      yield from _nodes(child)


def test_seeded_trees_are_fixed():
  g = grammar.Grammar(0)
  assert [str(g.sentence()) for _ in range(2)] == [
      '( (S (NP (DT some) (JJ famous) (NN village)) (VP (VBD sold) (NP (DT a) (JJ dark) '
      '(NN garden)) (PP (IN near) (NP (DT no) (NN child)))) (. .)))',
      '( (S (NP (NNP John) (NNP Jones)) (VP (MD must) (VP (VB carry) (NP (NP (NP (DT no) '
      '(JJ poor) (NN doctor)) (PP (IN of) (NP (DT every) (NN company)))) (CC and) (NP (JJ '
      'large) (NNS cities))))) (. .)))']


def test_every_word_has_one_tag(sample):
  tags = collections.defaultdict(set)
  for tree in sample:
    for tag, word in zip(tree.tags(), tree.words()):
      tags[word].add(tag)
  assert {w: t for w, t in tags.items() if len(t) > 1} == {}
  assert tags['that'] == {'IN'} and tags[','] == {','} and tags['.'] == {'.'}


def test_nested_constructions_all_occur_and_prepositions_keep_their_attachment(sample):
  seen = collections.Counter()
  for tree in sample:
    assert tree.label == 'S' and tree.tags()[-1] == '.'
    for node in _nodes(tree):
      if node.is_preterminal:
        continue
      assert node.label in LABELS
      kids = [c.label for c in node.children]
      if 'CC' in kids:
        seen[f'{node.label} coordination'] += 1
      for child in node.children:
        if child.label == 'PP':
          preposition = child.children[0].children[0]
          cls = 'IN_NOUN' if node.label == 'NP' else 'IN_VERB'
          assert preposition in grammar.LEXICON[cls], (str(node), preposition)
          seen[f'PP in {node.label}'] += 1
        if child.label == 'SBAR':
          seen['relative clause' if node.label == 'NP' else 'that complement'] += 1
          inner = [n for n in _nodes(child) if n is not child and n.label == 'SBAR']
          seen['SBAR in SBAR'] += bool(inner)
  assert set(seen) == {'S coordination', 'NP coordination', 'VP coordination', 'PP in NP',
                       'PP in VP', 'relative clause', 'that complement', 'SBAR in SBAR'}
  assert min(seen.values()) >= 10, seen


def test_generate_keeps_dev_and_test_sentences_out_of_train_and_each_other():
  splits = grammar.generate({'train': 1500, 'dev': 300, 'test': 300}, seed=4)
  assert {k: len(v) for k, v in splits.items()} == {'train': 1500, 'dev': 300, 'test': 300}
  words = {k: [' '.join(t.words()) for t in v] for k, v in splits.items()}
  assert len(set(words['dev'])) == 300 and len(set(words['test'])) == 300
  assert not set(words['dev']) & set(words['train'])
  assert not set(words['test']) & (set(words['train']) | set(words['dev']))
  assert len(set(words['train'])) < 1500  # short sentences repeat in train, as in real data
  again = grammar.generate({'train': 1500, 'dev': 300, 'test': 300}, seed=4)
  assert [str(t) for t in again['test']] == [str(t) for t in splits['test']]


def test_write_treebank_files_read_back_and_existing_files_are_refused(tmp_path, capsys):
  grammar.main(['--out', str(tmp_path / 'tb'), '--train', '40', '--dev', '5', '--test', '5',
                '--seed', '2'])
  paths = [str(tmp_path / 'tb' / f'{s}.trees') for s in ('train', 'dev', 'test')]
  assert capsys.readouterr().out.split() == paths
  expected = grammar.generate({'train': 40, 'dev': 5, 'test': 5}, seed=2)
  for path, split in zip(paths, expected):
    with open(path, encoding='utf-8') as f:
      text = f.read()
    assert len(text.splitlines()) == len(expected[split])
    assert [str(trees.clean(t)) for _, _, t in trees.read_trees(text, path)] == [
        str(trees.clean(t)) for t in expected[split]]
  os.remove(paths[0])
  with pytest.raises(SystemExit) as e:  # test.trees exists: nothing is written
    grammar.main(['--out', str(tmp_path / 'tb'), '--train', '3', '--dev', '1', '--test', '1'])
  assert str(e.value) == (f'error: {paths[1]} already exists; choose another --out or '
                          'remove it')
  assert not os.path.exists(paths[0])
