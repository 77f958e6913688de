"""Parsing sentences with a trained model: decode mode's and eval mode's trees.

A sentence is its whitespace-separated words (tokenized as the treebank is); brackets in a
word are spelled `-LRB-` / `-RRB-` first (`trees.escape_word`), so the model sees what the
treebank showed it and the output tree stays well-formed. Beam search gives a linearized
tree, which `linearize.delinearize` repairs into a tree over exactly the input words, with
the constituent labels of the workdir's vocabulary (its `▁)X` symbols).
"""

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from t2t_jax.parsing import evalb
from t2t_jax.runtime import multihost
from t2t_jax.parsing import linearize, trees

# EVALB's COLLINS.prm, except that it never gives up after MAX_ERROR length mismatches (a
# word tagged as punctuation in one tree only): an evaluation scores every model, and the
# mismatches are counted (`error_sentences`).
EVAL_PARAMS = dataclasses.replace(evalb.COLLINS, max_error=None)


def words_of(sentence: str) -> List[str]:
  """The escaped words of a sentence."""
  return [trees.escape_word(w) for w in sentence.split()]


def vocabulary_labels(tokenizer: Any) -> frozenset:
  """The constituent labels the vocabulary can close (`linearize.phrase_labels`)."""
  return linearize.phrase_labels(tokenizer.pieces(range(tokenizer.vocab_size)))


def trees_of(sentences: Sequence[str], decoded: Sequence[str],
             labels: Optional[frozenset]) -> List[str]:
  """One-line trees of decoded linearizations over their sentences' words ('' for a blank
  sentence). `labels` None takes each sequence's own closed labels (gold targets)."""
  out = []
  for sentence, sequence in zip(sentences, decoded):
    words = words_of(sentence)
    out.append(trees.to_string(linearize.delinearize(sequence, words, labels)) if words else '')
  return out


def parse_lines(translator: Any, lines: Sequence[str],
                progress: Optional[Callable[[int, int, float], None]] = None) -> List[str]:
  """The parse tree of every line (module doc), in input order; blank lines stay blank.

  Decoding is shared across processes (`multihost.translate_all`); every process returns
  every tree.
  """
  sentences = [' '.join(words_of(line)) for line in lines]
  decoded = multihost.translate_all(translator, sentences, progress=progress)
  return trees_of(sentences, decoded, vocabulary_labels(translator.tokenizer))


def gold_and_parsed(pairs: Sequence[Dict[str, str]], decoded: Sequence[str],
                    labels: frozenset) -> Tuple[List[str], List[str]]:
  """(gold trees, parsed trees), one line each, for treebank `pairs` ({'source': sentence,
  'target': linearized gold tree}) and the model's `decoded` targets."""
  sources = [p['source'] for p in pairs]
  return (trees_of(sources, [p['target'] for p in pairs], None),
          trees_of(sources, decoded, labels))


def parse_scores(pairs: Sequence[Dict[str, str]], decoded: Sequence[str],
                 labels: frozenset) -> Dict[str, Any]:
  """EVALB scores (`EVAL_PARAMS`) of the model's `decoded` targets for treebank `pairs`.

  Returns {'f1', 'precision', 'recall', 'complete_match', 'tagging_accuracy' (percent),
  'error_sentences', 'skipped_sentences', 'evalb_summary' (EVALB's summary text),
  'hypotheses' (the parsed trees), 'references' (the gold trees)}.
  """
  gold, parsed = gold_and_parsed(pairs, decoded, labels)
  result = evalb.score_lines(gold, parsed, EVAL_PARAMS, gold_name='gold trees',
                             test_name='parsed trees')
  return {'f1': result.f1, 'precision': result.precision, 'recall': result.recall,
          'complete_match': result.complete_match,
          'tagging_accuracy': result.tagging_accuracy,
          'error_sentences': result.error_sentences, 'skipped_sentences': result.skipped,
          'evalb_summary': result.summary(), 'hypotheses': parsed, 'references': gold}
