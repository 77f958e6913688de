"""The decoding API: n-best lists with scores, Translator.from_workdir, one-line errors."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from t2t_jax import config as config_lib
from t2t_jax.data import tokenizer as tokenizer_lib
from t2t_jax.data import vocab_pair
from t2t_jax.inference import checkpoint_choice, translate
from t2t_jax.model import parts, scoring, search, transformer as model
from t2t_jax.runtime.checkpoint import CheckpointError
from translate_helpers import CFG, CharTokenizer, sharp_params

@pytest.fixture(scope='module')
def params():
  return sharp_params(1)


def teacher_forced_log_probs(params, pairs):
  """log p(output + EOS | source + EOS) of every (source ids, output ids) pair, from one
  teacher-forced pass over them all (float64 softmax), padding excluded from the softmax as
  decoding does."""
  inputs, targets = (np.zeros((len(pairs), 24), np.int32) for _ in range(2))
  for row, (source, output) in enumerate(pairs):
    inputs[row, :len(source) + 1] = source + [model.EOS_ID]
    targets[row, :len(output) + 1] = output + [model.EOS_ID]
  logits = np.asarray(jax.jit(model.Transformer(CFG).apply)({'params': params}, inputs,
                                                             targets), np.float64)
  logits[..., model.PAD_ID] = -1e9
  logits -= logits.max(axis=-1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
  chosen = np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
  return np.where(targets != model.PAD_ID, chosen, 0.0).sum(axis=1)


def test_n_best_lists_with_scores_and_log_probs(params):
  tok = CharTokenizer()
  # One bucket, outputs up to 8 + 5 tokens: one compiled search each, one cache segment.
  translator = translate.Translator(CFG, params, tok, beam_size=4, alpha=0.6,
                                    max_decode_extra=5, batch_sentences=4, bucket_lengths=(8,))
  sentences = ['abc', '', 'hello', 'q', 'xyz']
  best = translator.translate(sentences)
  n_best = translator.translate_n_best(sentences, n=3)
  assert len(n_best) == len(sentences) and n_best[1] == []  # an empty line decodes nothing
  assert translator.compiled_shapes == {(8, 13)}  # translate's own program only
  for sentence, first, hypotheses in zip(sentences, best, n_best):
    if not sentence:
      continue
    assert len(hypotheses) == 3 and hypotheses[0].text == first
    assert len({tuple(h.ids) for h in hypotheses}) == 3
    scores = [h.score for h in hypotheses]
    assert scores == sorted(scores, reverse=True)
    for h in hypotheses:
      assert h.text == tok.decode(h.ids) and model.EOS_ID not in h.ids
      np.testing.assert_allclose(h.score, h.log_prob / float(search.length_penalty(
          len(h.ids) + 1, 0.6)), rtol=1e-6)
  listed = [(tok.encode(s), h) for s, hs in zip(sentences, n_best) for h in hs]
  np.testing.assert_allclose([h.log_prob for _, h in listed], teacher_forced_log_probs(
      params, [(source, h.ids) for source, h in listed]), atol=2e-4)
  # The same sums from the documented per-token function.
  h = n_best[2][1]
  per_token = scoring.token_log_probs(CFG, params, [tok.encode('hello') + [1]],
                                      [h.ids + [1]], exclude_pad=True)
  np.testing.assert_allclose(float(np.sum(per_token)), h.log_prob, atol=2e-4)
  # The whole beam by default; a longer list than the beam is refused in one line.
  assert [len(h) for h in translator.translate_n_best(['abc', ''])] == [4, 0]
  with pytest.raises(ValueError, match=r'n=5 must be in \[1, beam_size=4\]'):
    translator.translate_n_best(['abc'], n=5)


def test_missing_or_unusable_tokenizer_and_params_are_named(params):
  # `Translator(cfg, params, None)` used to fail at the first translate with
  # "'NoneType' object has no attribute 'encode'".
  with pytest.raises(ValueError, match=r"^Translator: tokenizer is None; it needs encode"):
    translate.Translator(CFG, params, None)
  with pytest.raises(ValueError, match=r'^Translator: tokenizer is PosixPath without encode;'):
    translate.Translator(CFG, params, pathlib.Path('spm.model'))
  settings_only = translate.Translator(CFG, None, CharTokenizer())  # allowed, until used
  with pytest.raises(ValueError, match=r'^Translator: params is None; set the model'):
    settings_only.translate(['abc'])

  class Larger(CharTokenizer):
    vocab_size = 41
  with pytest.raises(ValueError, match=r"tokenizer has 41 ids but the model's vocab_size is "
                     r'40; ids 40..40 have no embedding'):
    translate.Translator(CFG, params, Larger())


def test_tokenizer_ids_outside_the_vocabulary_are_refused_before_decoding(params):
  class Wild(CharTokenizer):
    def encode(self, text):
      return [3, 45] if text == 'bad' else super().encode(text)
  translator = translate.Translator(CFG, params, Wild(), beam_size=1, batch_sentences=2,
                                    bucket_lengths=(8,))
  for call in (translator.translate, translator.translate_n_best):
    with pytest.raises(ValueError, match=r"^the tokenizer gave id 45 at position 1 of 'bad', "
                       r"outside the model's vocabulary \(vocab_size=40\)$"):
      call(['ab', 'bad'])
  assert translator.compiled_shapes == set()  # refused before anything was decoded


class _Source(CharTokenizer):
  """A source vocabulary of its own: letters -> ids 42..67, beyond the target's 40."""

  def encode(self, text):
    return [i + 40 for i in super().encode(text)] + ([75] if text == 'bad' else [])


def test_separate_vocabularies_encode_the_source_and_decode_the_target_side():
  cfg = CFG.replace(share_embeddings=False, source_vocab_size=70)
  params = jax.jit(lambda rng: model.init_params(cfg, rng))(jax.random.PRNGKey(1))
  params['shared_embedding'] = {k: v * 4.0 for k, v in params['shared_embedding'].items()}
  pair = vocab_pair.VocabPair(_Source(), CharTokenizer())
  translator = translate.Translator(cfg, params, pair, beam_size=2, max_decode_extra=5,
                                    batch_sentences=2, bucket_lengths=(8,))
  [[best]] = translator.translate_n_best(['hello'], n=1)
  assert best.ids and best.text == CharTokenizer().decode(best.ids)  # the target's text
  # Its probability is the model's given the source tokenizer's ids (42.., beyond the
  # target's vocabulary), which only the encoder's own table holds.
  source_ids = _Source().encode('hello') + [model.EOS_ID]
  assert min(source_ids[:-1]) >= cfg.vocab_size
  per_token = scoring.token_log_probs(cfg, params, [source_ids], [best.ids + [model.EOS_ID]],
                                      exclude_pad=True)
  np.testing.assert_allclose(float(np.sum(per_token)), best.log_prob, atol=2e-4)
  with pytest.raises(ValueError, match=r"^the tokenizer gave id 75 at position 3 of 'bad', "
                     r"outside the model's vocabulary \(source_vocab_size=70\)$"):
    translator.translate(['bad'])


def test_from_workdir_loads_config_params_vocabulary_and_settings(tiny_workdir):
  translator = translate.Translator.from_workdir(tiny_workdir, batch_sentences=2, beam_size=2)
  inference = checkpoint_choice.load_inference_params(tiny_workdir)
  config = config_lib.from_json(inference.config_json)
  assert translator.cfg == model.TransformerConfig.from_config(config).replace(
      deterministic=True, decode=False)
  assert translator.tokenizer.path == tokenizer_lib.vocab_path(tiny_workdir)
  assert (translator.beam_size, translator.batch_sentences) == (2, 2)  # overridden
  assert (translator.alpha, translator.max_decode_extra, translator.bucket_lengths) == (
      config.length_penalty_alpha, config.max_decode_extra, tuple(config.bucket_lengths))
  jax.tree_util.tree_map(np.testing.assert_array_equal, translator.params, inference.params)
  # A step names that training checkpoint; a variant keeps its parts and takes the run's config.
  step = translate.Translator.from_workdir(tiny_workdir, '10', beam_size=2)
  assert step.cfg == translator.cfg

  def feed_forward(cfg, *, name):
    return parts.feed_forward(cfg, name=name)
  variant = translate.Translator.from_workdir(
      tiny_workdir, model=model.Transformer(CFG, feed_forward=feed_forward))
  assert variant.model.feed_forward is feed_forward and variant.cfg == translator.cfg
  # What it decodes is the README's hand-built recipe's.
  by_hand = translate.Translator(
      model.TransformerConfig.from_config(config), inference.params,
      tokenizer_lib.load(tokenizer_lib.vocab_path(tiny_workdir)), beam_size=2,
      alpha=config.length_penalty_alpha, max_decode_extra=config.max_decode_extra,
      batch_sentences=2, bucket_lengths=config.bucket_lengths)
  sentences = ['In the beginning God created the heaven and the earth.', 'Amen.']
  assert translator.translate(sentences) == by_hand.translate(sentences)


def test_from_workdir_of_a_folder_that_is_not_a_run_says_so(tmp_path, tiny_workdir):
  empty = str(tmp_path / 'empty')
  os.makedirs(empty)
  with pytest.raises(CheckpointError, match=f'^no checkpoint in workdir {empty}'):
    translate.Translator.from_workdir(empty)
  with pytest.raises(CheckpointError, match='no checkpoint in workdir'):
    translate.Translator.from_workdir(str(tmp_path / 'missing'))
  run = str(tmp_path / 'run')  # a trained run whose vocabulary is gone, then damaged
  shutil.copytree(tiny_workdir, run)
  vocab = tokenizer_lib.vocab_path(run)
  os.remove(vocab)
  with pytest.raises(tokenizer_lib.TokenizerError, match=f'^No SentencePiece model at {vocab}'):
    translate.Translator.from_workdir(run)
  with open(vocab, 'wb') as f:
    f.write(b'\x08garbage')
  with pytest.raises(tokenizer_lib.TokenizerError, match=f'^{vocab} is damaged'):
    translate.Translator.from_workdir(run)


@pytest.mark.slow
def test_the_documented_library_decoding_blocks_run_as_written(tiny_workdir, tmp_path):
  """docs/library.md '## The model from Python' (the README links it): the model, scoring and beam search blocks as they stand, then the
  from_workdir / n-best block on a trained run (its 'runs/base'), in a fresh process from
  another folder."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  with open(os.path.join(root, 'docs', 'library.md'), encoding='utf-8') as f:
    text = f.read()
  section = text[text.index('\n## The model from Python\n'):text.index('Learning curves of any workdir')]
  blocks = re.findall(r'```python\n(.*?)```', section, re.S)
  assert 'from_workdir' in blocks[2] and 'init_cache' in blocks[1]
  script = '\n'.join(blocks[:3]).replace("'runs/base'", repr(tiny_workdir)) + (
      '\nprint("shapes", log_p.shape, sequences.shape, scores.shape)')
  result = subprocess.run([sys.executable, '-c', script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, PYTHONPATH=root))
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.splitlines()
  assert lines[-1] == 'shapes (1, 3) (1, 4, 20) (1, 4)', lines
  n_best = [line.split(' ', 2) for line in lines[1:-1]]
  assert len(n_best) == 4 and lines[0] == repr([n_best[0][2]])  # the best is translate's
  assert [float(s) for s, _, _ in n_best] == sorted((float(s) for s, _, _ in n_best),
                                                    reverse=True)
