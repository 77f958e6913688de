"""Decoding a CTranslate2 export as t2t_jax decodes: GNMT re-ranking, our length limits, and
the same beam-search translations as `translate.Translator` on a random model."""

import numpy as np
import pytest

ctranslate2 = pytest.importorskip('ctranslate2')

from t2t_jax.export import ctranslate2_decoding as decoding, ctranslate2_export  # noqa: E402
from t2t_jax.inference import translate  # noqa: E402
from export_helpers import (CFG, PIECES, VOCAB, PieceTokenizer, log_probs, random_params,  # noqa: E402
                            sentences)


def test_gnmt_rerank_undoes_ctranslate2_normalisation():
  # Two hypotheses with raw log probs -3.0 (2 tokens + EOS) and -3.6 (5 tokens + EOS),
  # decoded with CTranslate2's length_penalty 1.0 (score = log P / tokens with EOS).
  hypotheses = [['a', 'b', '</s>'], ['a', 'b', 'c', 'd', 'e', '</s>']]
  scores = [-3.0 / 3, -3.6 / 6]
  ranked = decoding.gnmt_rerank(hypotheses, scores, alpha=0.6, ct2_length_penalty=1.0)
  gnmt = lambda lp, n: lp / ((5 + n) / 6) ** 0.6  # noqa: E731
  assert [words for _, words in ranked] == [['a', 'b', 'c', 'd', 'e'], ['a', 'b']]
  np.testing.assert_allclose([s for s, _ in ranked], [gnmt(-3.6, 6), gnmt(-3.0, 3)],
                             rtol=1e-6)
  # alpha 0: raw log probs win; a hypothesis cut at the maximum length has no EOS.
  ranked = decoding.gnmt_rerank([['a'], ['b', '</s>']], [-1.0, -2.0], 0.0, 0.0)
  assert ranked == [(-1.0, ['a']), (-2.0, ['b'])]


def test_max_decoding_length_is_ours_without_eos():
  # Ours: at most min(source + EOS + extra, max_len) outputs, EOS included.
  assert decoding.max_decoding_length(10, 50, 256) == 60
  assert decoding.max_decoding_length(230, 50, 256) == 255


def test_beam_translations_equal_ours(tmp_path):
  # Unsharpened random weights: every hypothesis runs to its sentence's length limit, where
  # ours forces EOS and CTranslate2 stops without one; the re-ranked best still agree.
  params = random_params(CFG, sharpen=1.0)
  path = ctranslate2_export.write_model(CFG, params, PIECES, str(tmp_path / 'ct2'))
  sources = sentences(12, seed=3)
  ours = translate.Translator(CFG, params, PieceTokenizer(), beam_size=4, alpha=0.6,
                              max_decode_extra=20, batch_sentences=16,
                              bucket_lengths=(16,)).translate_ids(sources)
  ct2 = ctranslate2.Translator(path, device='cpu', intra_threads=1)
  theirs = decoding.translate(ct2, [s.split() for s in sources], beam_size=4, alpha=0.6,
                              max_decode_extra=20, max_len=CFG.max_len)
  tokens = ctranslate2_export.vocabulary(PIECES, VOCAB)
  assert [[tokens.index(p) for p in row] for row in theirs] == ours
  assert len(set(map(tuple, ours))) >= 8  # the sources matter


def test_a_model_that_ends_at_once_gives_empty_translations_in_both(tmp_path):
  """Empty outputs by construction (not a trained model's trajectory, which varies by
  machine): the last decoder norm's output is the EOS embedding's direction (its scale
  shrunk, its bias along E[EOS], that row lengthened), so EOS leads every first step by a wide
  margin. Ours and CTranslate2's beam search both end every sentence at once, and score it."""
  params = random_params(CFG, sharpen=1.0)
  table = np.array(params['shared_embedding']['embedding'])
  table[1] *= 3.0  # EOS (= the decoder's first input, BOS)
  norm = dict(params['decoder']['layer_1']['ffn_block']['norm'])
  norm['scale'] = np.asarray(norm['scale']) * 0.05
  norm['bias'] = 4.0 * table[1] / np.linalg.norm(table[1])
  decoder = dict(params['decoder'], layer_1=dict(
      params['decoder']['layer_1'], ffn_block=dict(params['decoder']['layer_1']['ffn_block'],
                                                   norm=norm)))
  params = dict(params, decoder=decoder, shared_embedding={'embedding': table})
  sources = sentences(6, seed=5)
  first = log_probs(CFG, params, [[PIECES.index(p) for p in s.split()] for s in sources],
                    [[] for _ in sources])
  assert all(-2e-3 < row[-1] < -1e-4 for row in first)  # EOS first: probability above 0.998
  path = ctranslate2_export.write_model(CFG, params, PIECES, str(tmp_path / 'ct2'))
  ours = translate.Translator(CFG, params, PieceTokenizer(), beam_size=4, alpha=0.6,
                              max_decode_extra=20, batch_sentences=16,
                              bucket_lengths=(16,)).translate_ids(sources)
  ct2 = ctranslate2.Translator(path, device='cpu', intra_threads=1)
  theirs = decoding.translate(ct2, [s.split() for s in sources], beam_size=4, alpha=0.6,
                              max_decode_extra=20, max_len=CFG.max_len, return_scores=True)
  assert ours == [[]] * len(sources) and [tokens for _, tokens in theirs] == ours
  # The empty translation's GNMT score: log P(EOS) over ((5 + 1) / 6)^0.6 = 1.
  np.testing.assert_allclose([score for score, _ in theirs], [row[-1] for row in first],
                             rtol=0, atol=1e-5)
