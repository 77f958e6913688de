"""Tests for t2t_jax.parsing.evalb.read: EVALB's reading of a tree line, and bad input."""

import pytest

from t2t_jax.parsing import evalb
from t2t_jax.parsing.evalb.read import Bracket, QuoteTerm, read_tree


def read(line, params=evalb.COLLINS):
  return read_tree(line, params, 'gold.txt, tree 7')


def spans(tree):
  return [(b.label, b.start, b.end) for b in tree.brackets]


def test_preterminals_brackets_and_spacing():
  # No space is needed before `(` or `)`; tabs and a carriage return are spaces.
  tree = read('(NP(DT the)\t(NN dog))\r')
  assert (tree.words, tree.tags, spans(tree)) == (['the', 'dog'], ['DT', 'NN'], [('NP', 0, 2)])
  assert (tree.length, tree.leaves) == (2, 2)


def test_odd_but_legal_shapes():
  # `(NN )` is a preterminal with the word ''; `(X)` a bracket over nothing; two trees on
  # one line are one sentence whose spans run on.
  tree = read('(S (NN ) (X) (VB x)) (S (NN y))')
  assert tree.words == ['', 'x', 'y']
  assert spans(tree) == [('S', 0, 2), ('X', 1, 1), ('S', 2, 3)]


def test_only_c_whitespace_separates():
  # A no-break space is no space for evalb.c: `(NN\u00a0a)` is a bracket labelled
  # 'NN\u00a0a' over nothing, not a preterminal.
  tree = read('(S (NN\u00a0a))')
  assert (tree.words, tree.leaves) == ([], 0)
  assert spans(tree) == [('S', 0, 0), ('NN\u00a0a', 0, 0)]


def test_deleted_preterminals_leave_with_their_words():
  # -NONE- and `.` go; length counts all but -NONE- (3: He ran .).
  tree = read('(S (NP-SBJ (-NONE- *)) (NP (PRP He)) (VP (VBD ran)) (. .))')
  assert (tree.words, tree.length, tree.leaves) == (['He', 'ran'], 3, 4)
  assert spans(tree) == [('S', 0, 2), ('NP-SBJ', 0, 0), ('NP', 0, 1), ('VP', 1, 2)]


def test_quote_terms_are_recorded_for_new_prm():
  # new.prm: a `"` tagged `` (deleted) after one kept word, with S (0) and NP (1) open
  # around it and 2 brackets opened before it.
  tree = read('(S (NP (DT a) (`` ") (NN house)))', evalb.NEW)
  assert tree.quotes == [QuoteTerm('"', '``', 1, 2, (0, 1))]
  assert tree.words == ['a', 'house']
  assert read('(S (NP (DT a) (`` ") (NN house)))').quotes == []  # COLLINS: no QUOTE_LABEL
  assert tree.brackets[0] == Bracket(0, 2, 'S')


@pytest.mark.parametrize('line, message', [
    ('(S (NN dog)', r"gold.txt, tree 7: unbalanced brackets: 1 '\(' not closed"),
    ('(S (NN dog)))', r"gold.txt, tree 7: unbalanced brackets: '\)' at character 13 closes "
                      'nothing'),
    ('(S dog (NN cat))', r"gold.txt, tree 7: 'dog' at character 4 is not in a \(TAG word\) pair"),
    ('(NN dog cat)', r"gold.txt, tree 7: 'dog' at character 5 is not in a \(TAG word\) pair"),
    ('(NN dog )', r"gold.txt, tree 7: 'dog' at character 5"),
    ('dog', r"gold.txt, tree 7: 'dog' at character 1"),
])
def test_bad_trees_are_one_line_errors(line, message):
  with pytest.raises(evalb.EvalbError, match=message) as e:
    read(line)
  assert '\n' not in str(e.value)


def test_score_lines_input_errors():
  with pytest.raises(evalb.EvalbError, match=r'^gold, tree 2: no words; a gold tree needs'):
    evalb.score_lines(['(S (NN a))', ''], ['(S (NN a))', '(S (NN a))'])
  with pytest.raises(evalb.EvalbError, match=r'^g.txt, tree 1: no words'):
    evalb.score_lines(['(S)'], ['(S (NN a))'], gold_name='g.txt')
  with pytest.raises(evalb.EvalbError, match=r'^gold has 2 trees but test has 1; EVALB pairs'):
    evalb.score_lines(['(S (NN a))'] * 2, ['(S (NN a))'])
  with pytest.raises(evalb.EvalbError, match=r'^test, tree 1: unbalanced'):
    evalb.score_lines(['(S (NN a))'], ['(S (NN a)'])
  with pytest.raises(TypeError, match='not a string'):
    evalb.score_lines('(S (NN a))', '(S (NN a))')
