"""Tests for t2t_jax.parsing.parse: sentences -> trees through a (fake) translator."""

from t2t_jax.parsing import parse


class _Tokenizer:
  """The pieces of a vocabulary with tree symbols for S, NP, VP (and the POS tags)."""
  PIECES = ['<pad>', '</s>', '<unk>', '▁(S', '▁)S', '▁(NP', '▁)NP', '▁(VP', '▁)VP', '▁(DT',
            '▁(NN', '▁)', '▁the']
  vocab_size = len(PIECES)

  def pieces(self, ids):
    return [self.PIECES[i] for i in ids]


class _Translator:
  """Decodes a fixed output per source sentence and records what it was given."""

  def __init__(self, outputs):
    self.outputs, self.tokenizer, self.given = outputs, _Tokenizer(), []

  def translate(self, sentences, progress=None, line_numbers=None):
    self.given.append(list(sentences))
    return [self.outputs.get(s, '') for s in sentences]


def test_parse_lines_escapes_brackets_repairs_and_keeps_blank_lines():
  translator = _Translator({
      'the dog -LRB-barked-RRB-': '(S (NP (DT (NN )NP (VP (VBD )VP )S',
      'dogs bark': '(S (NP (NNS )NP (VP (VBP (NN )VP'})  # one tag too many, S not closed
  lines = ['the  dog (barked)', '', 'dogs bark', 'unknown words']
  assert parse.parse_lines(translator, lines) == [
      '(S (NP (DT the) (NN dog)) (VP (VBD -LRB-barked-RRB-)))', '',
      '(S (NP (NNS dogs)) (VP (VBP bark)))', '(TOP (XX unknown) (XX words))']
  assert translator.given == [['the dog -LRB-barked-RRB-', '', 'dogs bark', 'unknown words']]


def test_vocabulary_labels_are_the_closing_symbols():
  assert parse.vocabulary_labels(_Tokenizer()) == {'S', 'NP', 'VP'}


def test_gold_and_parsed_trees_of_treebank_pairs():
  pairs = [{'source': 'the dog', 'target': '(NP (DT (NN )NP'},
           {'source': 'Dogs bark', 'target': '(S (NP (NNS )NP (VP (VBP )VP )S'}]
  gold, parsed = parse.gold_and_parsed(pairs, ['(NP (DT (NN )NP', '(S (VP (NNS (VBP )VP )S'],
                                       frozenset({'S', 'NP', 'VP'}))
  assert gold == ['(NP (DT the) (NN dog))', '(S (NP (NNS Dogs)) (VP (VBP bark)))']
  assert parsed == ['(NP (DT the) (NN dog))', '(S (VP (NNS Dogs) (VBP bark)))']


def test_parse_scores_are_evalb_figures_and_never_give_up_on_mismatches():
  gold = '(S (NP (NNS )NP (VP (VBP )VP (. )S'
  pairs = [{'source': 'the dog', 'target': '(NP (DT (NN )NP'},
           {'source': 'Dogs bark .', 'target': gold}] + [
               {'source': 'Cats sleep .', 'target': gold}] * 12
  decoded = ['(NP (DT (NN )NP', '(S (VP (NNS (VBP )VP (. )S'] + [
      '(S (NP (NNS )NP (. (. )S'] * 12  # 'sleep' tagged '.': a length mismatch in EVALB
  scores = parse.parse_scores(pairs, decoded, frozenset({'S', 'NP', 'VP'}))
  # Valid sentences 1-2: gold NP(0,2); S(0,2) NP(0,1) VP(1,2). Parsed NP(0,2); S(0,2)
  # VP(0,2). Matched 2 of 4 gold and 3 parsed brackets; every tag right.
  assert scores['recall'] == 50.0 and round(scores['precision'], 2) == 66.67
  assert round(scores['f1'], 2) == 57.14 and scores['complete_match'] == 50.0
  assert scores['tagging_accuracy'] == 100.0
  assert scores['error_sentences'] == 12 and scores['skipped_sentences'] == 0
  assert 'Number of Error sentence  =     12' in scores['evalb_summary']
  assert scores['references'][1] == '(S (NP (NNS Dogs)) (VP (VBP bark)) (. .))'
  assert scores['hypotheses'][1] == '(S (VP (NNS Dogs) (VBP bark)) (. .))'
