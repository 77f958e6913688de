"""Translator's decoding options (batch_search.SearchSettings, prefixes.py): greedy is beam 1
without a penalty, sampling is reproducible by seed and reports the model's log probability
(checked by teacher forcing, score.py), n-gram blocking and target prefixes hold, and the
plain beam search is untouched by the new path."""

import numpy as np
import pytest
from translate_helpers import CFG, CharTokenizer, sharp_params

from t2t_jax.inference import prefixes, score, translate
from t2t_jax.model import transformer as model

SENTENCES = ['abc', 'hello world', '', 'xyz tuv', 'a']


@pytest.fixture(scope='module')
def params():
  return sharp_params()


def _translator(params, **options):
  return translate.Translator(CFG, params, CharTokenizer(), batch_sentences=4,
                              parallelism='threads', threads=1, **options)


def _teacher_forced(params, sentence, ids):
  """The model's log probability of `ids` + EOS given `sentence`, by score.py."""
  pair = (CharTokenizer().encode(sentence) + [model.EOS_ID], list(ids) + [model.EOS_ID])
  return score.score_pairs(CFG, params, [pair], rows=1)[0][0]


def test_greedy_is_a_beam_of_one_without_penalty(params):
  greedy = _translator(params, strategy='greedy').translate_n_best(SENTENCES)
  beam = _translator(params, beam_size=1, alpha=0.0).translate_n_best(SENTENCES)
  assert [[h.ids for h in x] for x in greedy] == [[h.ids for h in x] for x in beam]


def test_samples_are_reproducible_and_scored_by_the_model(params):
  sampler = _translator(params, strategy='sample', top_k=10, seed=1)
  first = sampler.translate_n_best(SENTENCES, n=3)
  assert first == sampler.translate_n_best(SENTENCES, n=3)
  other = _translator(params, strategy='sample', top_k=10, seed=2).translate_n_best(SENTENCES, 3)
  assert [h.ids for x in first for h in x] != [h.ids for x in other for h in x]
  assert [len(x) for x in first] == [3, 3, 0, 3, 3]
  for sentence, hyps in zip(SENTENCES, first):
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    for h in hyps:
      np.testing.assert_allclose(h.log_prob, _teacher_forced(params, sentence, h.ids), atol=1e-3)
  # A sentence's samples depend on its line alone: not on its batch mates, nor on which
  # process decodes it (a share of the file, named by its line numbers).
  # (The same tokens; the log probabilities to float rounding, which a batch's shape changes.)
  ids = lambda lists: [[h.ids for h in x] for x in lists]  # noqa: E731
  assert ids(sampler.translate_n_best(SENTENCES[3:4], n=3, line_numbers=[4])) == ids(first[3:4])
  one_row = _translator(params, strategy='sample', top_k=10, seed=1)
  one_row.batch_sentences = 1
  assert ids(one_row.translate_n_best(SENTENCES, n=3)) == ids(first)
  assert sampler.translate(SENTENCES) == [x[0].text if x else '' for x in
                                          sampler.translate_n_best(SENTENCES, n=1)]


def test_no_output_repeats_a_token_with_unigram_blocking(params):
  plain = _translator(params).translate_n_best(SENTENCES)
  assert any(len(set(h.ids)) < len(h.ids) for x in plain for h in x)  # the model repeats
  blocked = _translator(params, no_repeat_ngram_size=1).translate_n_best(SENTENCES)
  for sentence, hyps in zip(SENTENCES, blocked):
    for h in hyps:
      assert len(set(h.ids)) == len(h.ids)
      np.testing.assert_allclose(h.log_prob, _teacher_forced(params, sentence, h.ids), atol=1e-3)


def test_every_hypothesis_starts_with_its_prefix(params):
  given = ['zz', '', '', 'q', 'yyy']
  hyps = _translator(params).translate_n_best(SENTENCES, prefixes=given)
  tok = CharTokenizer()
  for sentence, prefix, options in zip(SENTENCES, given, hyps):
    for h in options:
      assert h.ids[:len(prefix)] == tok.encode(prefix)
      np.testing.assert_allclose(h.log_prob, _teacher_forced(params, sentence, h.ids), atol=1e-3)
  plain = _translator(params).translate(SENTENCES)
  assert _translator(params).translate(SENTENCES, prefixes=[''] * 5) == plain
  with pytest.raises(prefixes.PrefixError, match='^target prefix line 5 has 60 tokens; at most'):
    _translator(params, max_decode_extra=4).translate(SENTENCES, prefixes=[''] * 4 + ['y' * 60])
