"""Tests for t2t_jax.parsing.trees: reading bracketed trees, cleaning them, one-line errors."""

import pytest

from t2t_jax.parsing import trees
from t2t_jax.parsing.trees import Tree, TreeError

# Two trees as WSJ .mrg files have them (over several lines), then one on a single line.
MRG = """( (S
    (NP-SBJ-1 (DT The) (NN cat) )
    (VP (VBD sat)
      (NP (-NONE- *-1) ))
    (. .) ))
( (S (NP-SBJ (PRP It)) (VP (VBD rained)) (. .)) )
(TOP (FRAG (NP (NNP Yes)) (. !)))
"""


def _read(text, path='x.mrg'):
  return list(trees.read_trees(text, path))


def test_reads_multi_line_and_one_per_line_trees_with_numbers_and_lines():
  read = _read(MRG)
  assert [(number, line) for number, line, _ in read] == [(1, 1), (2, 6), (3, 7)]
  assert trees.to_string(read[0][2]) == (
      '( (S (NP-SBJ-1 (DT The) (NN cat)) (VP (VBD sat) (NP (-NONE- *-1))) (. .)))')
  assert read[1][2].words() == ['It', 'rained', '.']
  assert read[1][2].children[0].tags() == ['PRP', 'VBD', '.']


def test_clean_removes_empty_elements_emptied_nodes_function_tags_and_the_root():
  cleaned = [str(trees.clean(tree)) for _, _, tree in _read(MRG)]
  assert cleaned == ['(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))',
                     '(S (NP (PRP It)) (VP (VBD rained)) (. .))',
                     '(FRAG (NP (NNP Yes)) (. !))']


@pytest.mark.parametrize('label,stripped', [
    ('NP-SBJ-1', 'NP'), ('NP=2', 'NP'), ('PP-LOC-CLR', 'PP'), ('ADVP|PRT', 'ADVP'),
    ('-LRB-', '-LRB-'), ('-NONE-', '-NONE-'), ('S', 'S'), ('PRP$', 'PRP$'), (',', ','),
    ('-', '-')])
def test_strip_label(label, stripped):
  assert trees.strip_label(label) == stripped


def test_clean_keeps_bracket_tags_and_labels_a_root_over_several_constituents_top():
  (_, _, tree), = _read('( (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)) (. .))')
  assert str(trees.clean(tree)) == '(TOP (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)) (. .))'
  (_, _, tree), = _read('(ROOT (S-TPC (NP (-NONE- *)) (VP (VBZ is) (ADJP-PRD (JJ odd)))))')
  assert str(trees.clean(tree)) == '(S (VP (VBZ is) (ADJP (JJ odd))))'
  (_, _, tree), = _read('( (UH hello))')  # a root over a single word keeps its root
  assert str(trees.clean(tree)) == '(TOP (UH hello))'


def test_escape_word_spells_brackets_as_the_treebank_does():
  assert trees.escape_word('(see') == '-LRB-see'
  assert trees.escape_word(')') == '-RRB-'
  assert trees.escape_word('plain') == 'plain'


@pytest.mark.parametrize('text,message', [
    ('(S (NP (DT a) (NN b))) )\n(S (VB c))',
     'f.mrg: line 1: unbalanced brackets: a closing bracket after tree 1 closes nothing.'),
    ('(S (VB a))\n\n( (S (NP (DT a) (NN b)\n)',
     'f.mrg: tree 2 (line 3): unbalanced brackets: 2 still open at the end of the file.'),
    ('(S (VB a)) stray (S (VB b))',
     "f.mrg: line 1: text outside any tree ('stray') after tree 1; expected \"(\"."),
    ('(S (VB a))\n(S (NP (DT a) dog))',
     'f.mrg: tree 2 (line 2): NP on line 2 has a word beside constituents (dog); expected '
     '(TAG word) or constituents.'),
    ('(S (NNP New York))',
     'f.mrg: tree 1 (line 1): NNP on line 1 has several words (New York); expected (TAG word) '
     'or constituents.'),
])
def test_malformed_trees_raise_one_line_naming_file_tree_and_line(text, message):
  with pytest.raises(TreeError) as e:
    _read(text, 'f.mrg')
  assert str(e.value) == message


@pytest.mark.parametrize('text,message', [
    ('( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *?*))) )',
     'f.mrg: tree 1 (line 1) has no words (after removing -NONE- elements): '
     '( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *?*))))'),
    ('()', "f.mrg: tree 1 (line 1) has no words (after removing -NONE- elements): ()"),
    ('(NP)', "f.mrg: tree 1 (line 1) has no words (after removing -NONE- elements): (NP)"),
    ('(TOP hello)', "f.mrg: tree 1 (line 1): the word 'hello' has no POS tag; expected "
     '(TAG word).'),
])
def test_a_tree_without_words_is_refused_by_clean(text, message):
  (_, _, tree), = _read(text, 'f.mrg')
  with pytest.raises(TreeError) as e:
    trees.clean(tree, 'f.mrg', 1, 1)
  assert str(e.value) == message
  assert isinstance(e.value, trees.DataError)  # main.py prints it as one line


def test_tree_accessors():
  tree = Tree('S', [Tree('NP', [Tree('PRP', ['It'])]), Tree('VP', [Tree('VBD', ['rained'])])])
  assert [p.label for p in tree.preterminals()] == ['PRP', 'VBD']
  assert tree.words() == ['It', 'rained'] and tree.tags() == ['PRP', 'VBD']
  assert not tree.is_preterminal and tree.children[0].children[0].is_preterminal
