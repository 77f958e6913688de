"""--mode=score's computation (inference/score.py): each pair's log probability against a
plain numpy log-softmax of one unbatched forward pass, in input order whatever the batching;
scoring beam search's own n-best gives the log probabilities the search reports; bad input
named by file and line."""

import os

import jax
import numpy as np
import pytest
from conftest import run_main

from t2t_jax.inference import score, translate
from t2t_jax.model import transformer as model

CFG = model.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                              num_layers=2, max_len=64, deterministic=True)
SOURCES = ['5 9 13 22', '7 3', '11 12 13 14 15 16 17 18 19 20 21', '30']
TARGETS = ['11 4 30', '8', '2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18', '9 9 9 9']


def _ids(text):
  return [int(t) for t in text.split()]


@pytest.fixture(scope='module')
def params():
  params = jax.jit(lambda rng: model.init_params(CFG, rng))(jax.random.PRNGKey(0))
  table = params['shared_embedding']['embedding']  # sharper than the initialisation
  return dict(params, shared_embedding={'embedding': table * 4.0})


def _plain(params, source, target):
  """Sum of log p(target tokens + EOS), PAD excluded from the softmax, one pair alone."""
  inputs = np.array([source + [1]], np.int32)
  targets = np.array([target + [1]], np.int32)
  logits = np.asarray(model.Transformer(CFG).apply({'params': params}, inputs, targets),
                      np.float64)[0]
  logits[:, model.PAD_ID] = -1e9
  logits -= logits.max(axis=-1, keepdims=True)
  log_softmax = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
  return log_softmax[np.arange(len(target) + 1), targets[0]].sum()


def test_each_pair_scores_as_alone_in_input_order(params):
  pairs = score.encode_pairs(SOURCES, TARGETS, _ids, _ids, CFG.max_len)
  got = score.score_pairs(CFG, params, pairs, rows=2, pad_to=4)  # several batches
  for (log_prob, n), source, target in zip(got, SOURCES, TARGETS):
    assert n == len(_ids(target)) + 1
    np.testing.assert_allclose(log_prob, _plain(params, _ids(source), _ids(target)), rtol=1e-5)
  assert score.format_line(-6.0, 4) == '-6.000000\t4\t-1.500000'


def test_each_batch_is_padded_to_its_longest_rounded_up_to_pad_to(params, monkeypatch):
  shapes, scored = [], score.scoring.token_log_probs

  def recorded(net, p, inputs, targets, **kwargs):
    shapes.append((inputs.shape, targets.shape))
    return scored(net, p, inputs, targets, **kwargs)
  monkeypatch.setattr(score.scoring, 'token_log_probs', recorded)
  pairs = score.encode_pairs(SOURCES, TARGETS, _ids, _ids, CFG.max_len)
  rows = score.multihost.local_mesh().size  # rows split over the devices (8 simulated)
  want = score.score_pairs(CFG, params, pairs, rows=rows, pad_to=1)
  got = score.score_pairs(CFG, params, pairs, rows=rows, pad_to=8)
  # One batch: sources of up to 12 tokens with EOS, targets of up to 18.
  assert shapes == [((rows, 12), (rows, 18)), ((rows, 16), (rows, 24))]
  np.testing.assert_allclose([g for g, _ in got], [w for w, _ in want], rtol=1e-5)


def test_scoring_the_n_best_gives_the_search_log_probs(params):
  translator = translate.Translator(CFG, params, _Tokenizer(), beam_size=4, alpha=0.6)
  n_best = translator.translate_n_best(SOURCES[:2], n=4)
  hyps = [(s, h) for s, hyps in zip(SOURCES, n_best) for h in hyps if h.ids]
  pairs = score.encode_pairs([s for s, _ in hyps], [h.text for _, h in hyps], _ids, _ids,
                             CFG.max_len)
  got = score.score_pairs(CFG, params, pairs, rows=8)
  np.testing.assert_allclose([g for g, _ in got], [h.log_prob for _, h in hyps], atol=1e-3)


class _Tokenizer:
  """Ids written as numbers."""
  vocab_size = CFG.vocab_size

  def encode(self, text):
    return _ids(text)

  def decode(self, ids):
    return ' '.join(map(str, ids))


@pytest.mark.parametrize('sources, targets, says', [
    (['1 2', '3'], ['4'], '--input has 2 lines but --targets has 1; expected one target per'),
    ([' ', '3'], ['4', '5'], '--input line 1 is empty; expected a sentence to translate'),
    (['2 ' * 64, '3'], ['4', '5'], "--input line 1 has 65 tokens with EOS; the model's max_len is 64"),
])
def test_bad_pairs_are_named_by_file_and_line(sources, targets, says):
  with pytest.raises(score.ScoreInputError, match='^' + says):
    score.encode_pairs(sources, targets, _ids, _ids, CFG.max_len)


def test_an_empty_target_is_scored_as_the_empty_translation():
  # A beam's empty hypothesis (n-best lists hold them) is a candidate: EOS alone.
  assert score.encode_pairs(['1 2', '3'], ['4', ' '], _ids, _ids, CFG.max_len) == [
      (_ids('1 2') + [1], _ids('4') + [1]), (_ids('3') + [1], [1])]


def test_the_mode_writes_one_line_per_pair(tiny_workdir, corpus, tmp_path):
  sources, targets = tmp_path / 'src.txt', tmp_path / 'tgt.txt'
  lines = []
  for lang in ('en', 'es'):
    with open(os.path.join(corpus, f'dev.{lang}'), encoding='utf-8') as f:
      lines.append(f.readlines())
  pairs = [p for p in zip(*lines) if max(len(x.split()) for x in p) < 14]  # TINY's max_len
  assert len(pairs) == 3
  for path, side in ((sources, 0), (targets, 1)):
    path.write_text(''.join(p[side] for p in pairs), encoding='utf-8')
  output = tmp_path / 'scores.tsv'
  result = run_main('--mode=score', f'--workdir={tiny_workdir}', f'--input={sources}',
                    f'--targets={targets}', f'--output={output}')
  assert result.returncode == 0, result.stderr[-3000:]
  rows = [line.split('\t') for line in output.read_text().splitlines()]
  assert len(rows) == 3
  for log_prob, n, per_token in rows:
    assert float(log_prob) < 0 and int(n) > 1
    assert float(per_token) == pytest.approx(float(log_prob) / int(n), abs=1e-6)
  short = tmp_path / 'short.txt'
  short.write_text('Uno.\n')
  again = run_main('--mode=score', f'--workdir={tiny_workdir}', f'--input={sources}',
                   f'--targets={short}', f'--output={tmp_path / "other.tsv"}')
  assert again.returncode == 1 and again.stderr.splitlines()[-1] == (
      f'error: --input={sources} has 3 lines but --targets={short} has 1; expected one target '
      'per source line')
  assert not (tmp_path / 'other.tsv').exists()  # the claim is removed
