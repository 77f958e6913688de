"""CTranslate2 export: the same log-probabilities and greedy translations as our model, for
each mapped option (post-/pre-LN, sinusoidal/learned positions, a head width other than
d_model / heads, encoder and decoder depths apart, untied and unscaled embeddings); the config, vocabulary and position table it writes; and refusals."""

import json
import os

import jax
import numpy as np
import pytest

ctranslate2 = pytest.importorskip('ctranslate2')

from t2t_jax.export import ctranslate2_decoding, ctranslate2_export as export  # noqa: E402
from t2t_jax.inference import translate  # noqa: E402
from t2t_jax.model import layers, transformer as model  # noqa: E402
from t2t_jax.export.common import ExportError  # noqa: E402
from export_helpers import (CFG, PIECES, VOCAB, PieceTokenizer, log_probs,  # noqa: E402
                            random_params as _params, sentences as _sentences)

TOKENS = export.vocabulary(PIECES, VOCAB)  # random weights may pick the dummy tokens too


def _ct2(path):
  return ctranslate2.Translator(path, device='cpu', intra_threads=1, inter_threads=1)


# (config, embedding sharpening): pre-LN at 1.0 (sharper, its decoder repeats its EOS input
# for every source) ends some sentences at once, which CTranslate2 only does with
# min_decoding_length=0.
VARIANTS = {
    'post-sinusoidal': (CFG, 4.0),
    'pre-learned': (CFG.replace(norm_position='pre', positional='learned'), 1.0),
    'head-width-16': (CFG.replace(d_k=16, d_v=16), 4.0),
    # The layer counts come from the parameter tree; untied and unscaled embeddings map to
    # CTranslate2's own decoder projection and scale_embeddings=False.
    'encoder-3-decoder-1': (CFG.replace(num_encoder_layers=3, num_decoder_layers=1), 4.0),
    'untied-unscaled': (CFG.replace(share_embeddings=False, scale_embeddings=False), 4.0),
}


@pytest.mark.parametrize('name', list(VARIANTS))
def test_log_probs_and_greedy_translations_equal_ours(tmp_path, name):
  cfg, sharpen = VARIANTS[name]
  params = _params(cfg, sharpen)
  path = export.write_model(cfg, params, PIECES, str(tmp_path / 'ct2'))
  ct2 = _ct2(path)
  sources = _sentences()
  targets = _sentences(seed=2)

  # Teacher-forced log-probabilities of given targets, EOS included.
  scored = ct2.score_batch([s.split() for s in sources], [t.split() for t in targets])
  tok = PieceTokenizer()
  ours = log_probs(cfg, params, [tok.encode(s) for s in sources],
                   [tok.encode(t) for t in targets])
  for result, expected in zip(scored, ours):
    np.testing.assert_allclose(result.log_probs, expected, atol=1e-4, rtol=0)

  # Greedy, with our output length limits (source + EOS + 20, EOS included).
  extra = 20
  ours = translate.Translator(cfg, params, tok, beam_size=1, alpha=0.0, max_decode_extra=extra,
                              batch_sentences=8, bucket_lengths=(16,)).translate_ids(sources)
  theirs = ctranslate2_decoding.translate(ct2, [s.split() for s in sources], beam_size=1,
                                          max_decode_extra=extra, max_len=cfg.max_len)
  assert [[TOKENS.index(p) for p in row] for row in theirs] == ours
  # Random weights run on to the maximum length: the far positions count.
  assert any(len(o) == len(s.split()) + extra for o, s in zip(ours, sources))


def test_config_tokens_norm_epsilon_and_no_builtin_positions(tmp_path):
  path = export.write_model(CFG, _params(CFG), PIECES, str(tmp_path / 'ct2'))
  with open(os.path.join(path, 'config.json')) as f:
    config = json.load(f)
  assert config['layer_norm_epsilon'] == 1e-6  # CTranslate2's default is 1e-5
  assert config['decoder_start_token'] == config['eos_token'] == '</s>'
  assert config['add_source_eos'] is True and config['add_source_bos'] is False
  assert config['unk_token'] == '<unk>'
  with open(os.path.join(path, 'shared_vocabulary.json')) as f:
    vocabulary = json.load(f)
  assert vocabulary[:len(PIECES)] == PIECES
  assert vocabulary[len(PIECES):] == [f'<t2t_jax_unused_{i}>' for i in range(3)]


def test_spec_holds_our_tables_and_post_ln():
  spec = export.build_spec(CFG, _params(CFG), PIECES)
  table = layers.sinusoidal_positions(CFG.max_len, CFG.d_model)
  for side in (spec.encoder, spec.decoder):
    assert side.pre_norm is False and side.scale_embeddings is True
    np.testing.assert_array_equal(side.position_encodings.encodings, table)
  # Interleaved sin/cos from position 0, not CTranslate2's sin|cos halves from position 1.
  assert table[0, 0] == 0.0 and table[0, 1] == 1.0 and table[1, 0] == np.float32(np.sin(1.0))
  embedding = spec.encoder.embeddings[0].weight
  np.testing.assert_array_equal(spec.decoder.embeddings.weight, embedding)
  np.testing.assert_array_equal(spec.decoder.projection.weight, embedding)
  assert spec.decoder.projection.bias[model.PAD_ID] == export.PAD_LOGIT_BIAS
  assert not spec.decoder.projection.bias[1:].any()
  fused = spec.encoder.layer[0].self_attention.linear[0].weight
  assert fused.shape == (3 * CFG.num_heads * CFG.d_k, CFG.d_model)  # [q|k|v out, in]


def test_dummy_tokens_are_unique_among_the_pieces():
  pieces = ['<pad>', '</s>', '<t2t_jax_unused_0>']
  assert export.vocabulary(pieces, 5) == pieces + ['<t2t_jax_unused_1>', '<t2t_jax_unused_2>']
  with pytest.raises(ExportError, match='3 pieces but the embedding only 2 rows'):
    export.vocabulary(pieces, 2)


def test_int8_export_is_smaller_and_still_translates(tmp_path):
  params = _params(CFG)
  full = export.write_model(CFG, params, PIECES, str(tmp_path / 'f32'))
  int8 = export.write_model(CFG, params, PIECES, str(tmp_path / 'int8'), quantization='int8')
  size = lambda p: os.path.getsize(os.path.join(p, 'model.bin'))  # noqa: E731
  assert size(int8) < 0.6 * size(full)
  source = _sentences(1)[0].split()
  result = _ct2(int8).translate_batch([source], beam_size=1, max_decoding_length=8)[0]
  assert 1 <= len(result.hypotheses[0]) <= 8 and set(result.hypotheses[0]) <= set(TOKENS)


@pytest.mark.parametrize('cfg,params_cfg,message', [
    (CFG.replace(d_v=16), CFG, 'CTranslate2 cannot express d_k=8 != d_v=16'),
    (VARIANTS['pre-learned'][0].replace(max_len=50), VARIANTS['pre-learned'][0],
     'the learned encoder position table has 40 rows but max_len=50: CTranslate2 cannot '
     'extend learned positions'),
], ids=['d_v', 'learned-positions'])
def test_inexpressible_models_are_refused_and_nothing_is_written(tmp_path, cfg, params_cfg,
                                                                 message):
  with pytest.raises(ExportError, match=message):
    export.write_model(cfg, _params(params_cfg), PIECES, str(tmp_path / 'out'))
  assert os.listdir(tmp_path) == []


def test_bad_quantization_and_existing_output_are_refused(tmp_path):
  with pytest.raises(ExportError, match='--quantization=int4: unknown; CTranslate2 accepts '
                                        'int8, int8_float32'):
    export.write_model(CFG, _params(CFG), PIECES, str(tmp_path / 'out'), quantization='int4')
  (tmp_path / 'taken').mkdir()
  (tmp_path / 'taken' / 'keep').write_text('keep me')
  with pytest.raises(FileExistsError, match='already exists'):
    export.write_model(CFG, _params(CFG), PIECES, str(tmp_path / 'taken'))
  assert sorted(os.listdir(tmp_path)) == ['taken']
  assert (tmp_path / 'taken' / 'keep').read_text() == 'keep me'


def test_a_run_whose_vocabulary_is_not_the_models_is_refused(tmp_path):
  """Issue 51 x8, CTranslate2's side: `vocabulary` pads the pieces to the embedding rows with
  dummy tokens, so a vocabulary smaller than the model would translate into them; a run's
  export (`convert`) refuses it before writing, as the StableHLO export does."""
  import gzip
  from conftest import BUNDLED
  from t2t_jax.data import tokenizer
  from t2t_jax.export import common
  with gzip.open(os.path.join(BUNDLED, 'train.en.gz'), 'rt', encoding='utf-8') as f:
    lines = [next(f).rstrip('\n') for _ in range(400)]
  tok = tokenizer.train(lines, 120, str(tmp_path / 'spm.model'))
  big = CFG.replace(vocab_size=150)
  source = common.ExportSource(None, _params(big), tok.path, 'random weights', big)
  with pytest.raises(ExportError) as error:
    export.convert(source, str(tmp_path / 'ct2'))
  assert str(error.value) == (
      f"{tok.path} has 120 pieces but the model's vocab_size is 150: the model can output ids "
      '120..149, which have no piece, so the export could not decode them; expected the '
      'SentencePiece model the model was trained with (150 pieces)')
  assert sorted(os.listdir(tmp_path)) == ['spm.model', 'spm.vocab']


def test_separate_vocabularies_map_to_a_source_and_a_target_vocabulary(tmp_path):
  """share_vocab=False: the encoder's own table and pieces are CTranslate2's source side,
  the target's its target side and output; ids only the source has (48..55) score as ours."""
  cfg = CFG.replace(share_embeddings=False, source_vocab_size=VOCAB + 8)
  params = _params(cfg)
  source_pieces = ['<pad>', '</s>', '<unk>'] + [f'\u2581s{i}' for i in range(3, VOCAB + 8)]
  path = export.write_model(cfg, params, PIECES, str(tmp_path / 'ct2'),
                            source_pieces=source_pieces)
  assert not os.path.exists(os.path.join(path, 'shared_vocabulary.json'))
  with open(os.path.join(path, 'source_vocabulary.json')) as f:
    assert json.load(f) == source_pieces
  with open(os.path.join(path, 'target_vocabulary.json')) as f:
    assert json.load(f) == TOKENS
  rng = np.random.RandomState(3)
  sources = [list(rng.randint(3, VOCAB + 8, rng.randint(2, 12))) for _ in range(6)]
  assert max(map(max, sources)) >= VOCAB
  targets = [PieceTokenizer().encode(t) for t in _sentences(seed=2)]
  scored = _ct2(path).score_batch([[source_pieces[i] for i in s] for s in sources],
                                  [[PIECES[i] for i in t] for t in targets])
  for result, expected in zip(scored, log_probs(cfg, params, sources, targets)):
    np.testing.assert_allclose(result.log_probs, expected, atol=1e-4, rtol=0)
