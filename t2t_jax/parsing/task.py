"""The 'treebank' task (`config.dataset = 'treebank'`): parsing's hooks into data, training
and inference (`t2t_jax.data.tasks`), registered when this package is imported.

The hooks import what they need when called, so importing t2t_jax stays as light as before
(no TFDS until a treebank is read).
"""
# pylint: disable=import-outside-toplevel

from t2t_jax.data import tasks


def _load_split(config, split, data_dir, **kwargs):
  from t2t_jax.parsing import treebank
  return treebank.load_split(config, split, data_dir, **kwargs)


def _locate(config):
  from t2t_jax.parsing import treebank
  return treebank.locate(config)


def _vocabulary_symbols(targets):
  from t2t_jax.parsing import linearize
  return linearize.vocabulary_symbols(targets)


def _decoded_scores(pairs, hypotheses, tokenizer):
  from t2t_jax.parsing import parse
  return parse.parse_scores(pairs, hypotheses, parse.vocabulary_labels(tokenizer))


def _decode_lines(translator, lines, progress=None):
  """Sentences in, one-line bracketed trees out."""
  from t2t_jax.parsing import parse
  return parse.parse_lines(translator, lines, progress=progress)


def _present_splits(config):
  from t2t_jax.parsing import treebank
  return treebank.find_splits(treebank.treebank_dir(config))


def _expected_files(config, split):
  from t2t_jax.parsing import treebank
  return treebank.expected_files(config, split)


TREEBANK = tasks.Task(load_split=_load_split, locate=_locate,
                      vocabulary_symbols=_vocabulary_symbols, decoded_scores=_decoded_scores,
                      decode_lines=_decode_lines, present_splits=_present_splits,
                      expected_files=_expected_files)
tasks.register('treebank', TREEBANK)
