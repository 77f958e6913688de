"""Tests for t2t_jax.parsing.linearize: trees to target tokens and back, with every repair."""

import pytest

from t2t_jax.parsing import grammar, linearize, trees
from t2t_jax.parsing.linearize import delinearize

CAT = trees.clean(next(trees.read_trees(
    '(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) '
    '(. .)))', 'x'))[2])
CAT_TOKENS = ['(S', '(NP', '(DT', '(NN', ')NP', '(VP', '(VBD', '(PP', '(IN', '(NP', '(DT',
              '(NN', ')NP', ')PP', ')VP', '(.', ')S']
WORDS = ['The', 'cat', 'sat', 'on', 'the', 'mat', '.']
LABELS = {'S', 'NP', 'VP', 'PP'}


def test_linearize_opens_every_constituent_and_tag_and_closes_constituents_only():
  assert linearize.linearize(CAT) == CAT_TOKENS
  assert linearize.to_pair(CAT) == ('The cat sat on the mat .', ' '.join(CAT_TOKENS))


def test_same_sequence_as_tensor2tensor_in_its_spelling():
  # tensor2tensor's words_and_tags_from_wsj_tree on the TOP tree above returns these tags.
  t2t = 'S NP DT NN /NP VP VBD PP IN NP DT NN /NP /PP /VP . /S'
  assert ' '.join(linearize.t2t_tokens(CAT_TOKENS)) == t2t


def test_round_trip_is_exact_for_gold_sequences():
  unary = trees.clean(next(trees.read_trees(
      '( (S (S (VP (VB Go))) (, ,) (NP (NP (PRP$ his) (NN dog)) (SBAR (S (VP (VBD ran))))) '
      '(. !)))', 'x'))[2])
  samples = [CAT, unary] + [trees.clean(grammar.Grammar(3).sentence()) for _ in range(200)]
  for tree in samples:
    sentence, target = linearize.to_pair(tree)
    assert str(delinearize(target, sentence.split())) == str(tree)
    assert str(delinearize(target, sentence.split(), LABELS | {'SBAR', 'ADJP', 'ADVP', 'WHNP'})
               ) == str(tree)


@pytest.mark.parametrize('sequence,expected', [
    # 1. tokens that are neither (X nor )X are dropped
    ('(S (NP junk (DT ( (NN )NP (VP (VBD ) (PP (IN (NP (DT (NN )NP )PP )VP (. )S',
     '(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))'),
    # 2. a missing closing: the open constituents close at the next matching one / the end
    ('(S (NP (DT (NN )NP (VP (VBD (PP (IN (NP (DT (NN )VP (.',
     '(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))'),
    # 2. a closing with the wrong label closes the innermost constituent; one with nothing
    #    open is dropped
    ('(S (NP (DT (NN )VP (VP (VBD (PP (IN (NP (DT (NN )NP )PP )VP (. )S )S )NP',
     '(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))'),
    # 3. more tags than words: the last ones go (and the constituents they leave empty)
    (' '.join(CAT_TOKENS[:-2] + ['(NP', '(NN', '(NN', ')NP', '(.', ')S']),
     '(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (NP (NN .)))'),
    # 3. fewer tags than words: the words left over are tagged XX in the outermost constituent
    ('(S (NP (DT (NN )NP (VP (VBD )VP )S',
     '(S (NP (DT The) (NN cat)) (VP (VBD sat)) (XX on) (XX the) (XX mat) (XX .))'),
    # 4. several top-level pieces, or nothing at all, go under TOP
    ('(NP (DT (NN )NP (VP (VBD (PP (IN (NP (DT (NN )NP )PP )VP (.',
     '(TOP (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))'),
    ('', '(TOP (XX The) (XX cat) (XX sat) (XX on) (XX the) (XX mat) (XX .))'),
    ('(S (NP )NP )S', '(S (XX The) (XX cat) (XX sat) (XX on) (XX the) (XX mat) (XX .))'),
    ('(S )S (VP )VP', '(TOP (XX The) (XX cat) (XX sat) (XX on) (XX the) (XX mat) (XX .))'),
])
def test_repairs_give_a_tree_over_exactly_the_words(sequence, expected):
  tree = delinearize(sequence, WORDS, LABELS)
  assert str(tree) == expected
  assert tree.words() == WORDS


def test_without_labels_the_closed_labels_are_the_constituents():
  # NP never closes here, so without the vocabulary's labels it reads as a POS tag.
  assert str(delinearize('(S (NP (PRP )S', ['It', 'rained'])) == (
      '(S (NP It) (PRP rained))')
  assert str(delinearize('(S (NP (PRP )S', ['It', 'rained'], {'S', 'NP'})) == (
      '(S (NP (PRP It)) (XX rained))')


def test_delinearize_needs_words():
  with pytest.raises(ValueError):
    delinearize('(S )S', [])


def test_vocabulary_symbols_and_phrase_labels():
  targets = [' '.join(CAT_TOKENS), '(FRAG (UH (. )FRAG']
  symbols = linearize.vocabulary_symbols(targets)
  assert symbols == ['▁(.', '▁(DT', '▁(FRAG', '▁(IN', '▁(NN', '▁(NP', '▁(PP', '▁(S', '▁(UH',
                     '▁(VBD', '▁(VP', '▁)FRAG', '▁)NP', '▁)PP', '▁)S', '▁)VP']
  assert linearize.phrase_labels(symbols) == {'FRAG', 'NP', 'PP', 'S', 'VP'}
  assert linearize.phrase_labels(['▁the', '▁)', ')NP', '(DT']) == {'NP'}
