"""`--mode=attention`: maps of a trained workdir's sentences as PNG, HTML and npz; bad input."""

import io
import json
import os
import re

import numpy as np
import pytest
from PIL import Image

from conftest import TINY, run_main
from t2t_jax.inspect import attention_html, attention_maps, attention_mode
from t2t_jax.model import transformer as model

SOURCES = ['In the beginning God created the heaven and the earth.',
           'And God said, Let there be light: and there was light.']


class CharTokenizer:
  """Letters -> ids 3..28, enough for the mode's checks without SentencePiece."""

  def encode(self, text):
    return [3 + (ord(c) - ord('a')) % 26 for c in text.lower() if c.isalpha()]

  def decode(self, ids):
    return ''.join(chr(ord('a') + i - 3) for i in ids if i >= 3)

  def pieces(self, ids):
    return ['</s>' if i == model.EOS_ID else chr(ord('a') + i - 3) for i in ids]


@pytest.fixture(scope='module')
def workdir(tiny_workdir):
  return tiny_workdir


def _not_blank(path, min_size):
  with Image.open(path) as image:
    assert image.format == 'PNG'
    width, height = image.size
    pixels = np.asarray(image.convert('L'))
  assert width >= min_size[0] and height >= min_size[1], (path, image.size)
  assert len(np.unique(pixels)) > 20 and (pixels < 128).mean() > 0.002, path  # ink, shades


@pytest.mark.slow
def test_attention_mode_writes_maps_page_and_arrays(workdir, tmp_path):
  source = tmp_path / 'input.en'
  source.write_text('\n'.join(SOURCES) + '\n', encoding='utf-8')
  out = tmp_path / 'maps'
  out.mkdir()  # an empty directory is used
  result = run_main('--mode=attention', f'--workdir={workdir}', f'--input={source}',
                    f'--output={out}', '--config.beam_size=2')
  assert result.returncode == 0, result.stderr[-3000:]
  printed = result.stdout.strip().split('\n')
  assert [line.split('\t')[0] for line in printed] == [str(out / 'sentence_1'),
                                                       str(out / 'sentence_2')]
  assert sorted(os.listdir(out / 'sentence_1')) == [
      'attention.html', 'attention.npz', 'decoder_layer1.png', 'encoder_decoder_layer1.png',
      'encoder_layer1.png', 'lines_encoder_layer1.png']  # TINY has 1 layer: the line view's

  arrays = np.load(out / 'sentence_2' / 'attention.npz')
  src, tgt = list(arrays['source_pieces']), list(arrays['target_pieces'])
  assert src[-1] == tgt[-1] == '</s>' and ''.join(src).replace('\u2581', ' ').strip() == (
      SOURCES[1] + '</s>')
  assert str(arrays['source']) == SOURCES[1] and str(arrays['target']) == printed[1].split('\t')[1]
  assert arrays['encoder'].shape == (1, 4, len(src), len(src))
  assert arrays['decoder'].shape == (1, 4, len(tgt), len(tgt))
  assert arrays['encoder_decoder'].shape == (1, 4, len(tgt), len(src))
  for kind in attention_maps.KINDS:
    np.testing.assert_allclose(arrays[kind].sum(-1), 1.0, atol=1e-5)
  assert (arrays['decoder'][..., np.triu_indices(len(tgt), 1)[0],
                            np.triu_indices(len(tgt), 1)[1]] == 0).all()

  _not_blank(out / 'sentence_2' / 'encoder_layer1.png', (500, 300))
  _not_blank(out / 'sentence_2' / 'encoder_decoder_layer1.png', (500, 300))
  _not_blank(out / 'sentence_2' / 'lines_encoder_layer1.png', (400, 300))

  page = (out / 'sentence_2' / 'attention.html').read_text(encoding='utf-8')
  assert not re.search(r'https?://|\ssrc=|<link|@import', page)  # nothing loaded at view time
  assert '<script>' in page and 'getElementById' in page and SOURCES[1] in page
  data = json.loads(re.search(r'id="attention-data">(.*?)</script>', page, re.S).group(1))
  for kind in attention_maps.KINDS:
    embedded = data['kinds'][kind]
    assert embedded['shape'] == list(arrays[kind].shape)
    np.testing.assert_allclose(attention_html.dequantise(embedded['data'], embedded['shape']),
                               arrays[kind], atol=1 / 510 + 1e-6)
  assert data['kinds']['encoder_decoder']['rows'] == tgt
  assert data['kinds']['encoder_decoder']['cols'] == src

  # A targets file of another length is refused in one line; the folder is not touched.
  targets = tmp_path / 'targets.es'
  targets.write_text('Uno.\n', encoding='utf-8')
  again = tmp_path / 'again'
  refused = run_main('--mode=attention', f'--workdir={workdir}', f'--input={source}',
                     f'--targets={targets}', f'--output={again}')
  assert refused.returncode == 1
  assert refused.stderr == (f'error: --targets={targets} has 1 lines but --input={source} has '
                            '2; give one target per input line\n')
  assert not again.exists()
  # So is a workdir without a checkpoint.
  empty = tmp_path / 'empty_run'
  empty.mkdir()
  missing = run_main('--mode=attention', f'--workdir={empty}', f'--input={source}',
                     f'--output={again}')
  assert missing.returncode == 1
  assert missing.stderr.startswith(f'error: no checkpoint in workdir {empty}')
  assert missing.stderr.count('\n') == 1 and not again.exists() and not os.listdir(empty)


def test_teacher_forced_targets_and_layer_choice(workdir, tmp_path):
  from t2t_jax import config as config_lib
  from t2t_jax.inference import checkpoint_choice
  from t2t_jax.data import tokenizer
  inference = checkpoint_choice.load_inference_params(workdir)
  config = config_lib.from_json(inference.config_json)
  tok = tokenizer.load(tokenizer.vocab_path(workdir))
  targets = ['En el principio crió Dios los cielos y la tierra.', 'Y dijo Dios: Sea la luz.']
  sentences = attention_mode.prepare(config, inference.params, tok, SOURCES, targets, 'in',
                                     't.es')
  assert [s.target for s in sentences] == targets
  assert sentences[1].target_ids == tok.encode(targets[1]) + [model.EOS_ID]
  alone = attention_maps.attention_weights(
      model.TransformerConfig.from_config(config), inference.params,
      np.array([sentences[1].source_ids]), np.array([sentences[1].target_ids]))
  for kind in attention_maps.KINDS:  # padded, batched maps equal the unpadded sentence's
    np.testing.assert_allclose(sentences[1].maps[kind], alone[kind][:, 0], atol=1e-6)
  with pytest.raises(attention_mode.AttentionInputError,
                     match=r'^--attention_layer=2: the model has 1 encoder layers; expected 1..1$'):
    attention_mode.check_layer(2, config.num_layers)
  assert attention_mode.check_layer(None, 6) == 5 and attention_mode.check_layer(None, 1) == 1


def test_output_that_exists_is_refused(tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('keep me\n')
  with pytest.raises(FileExistsError, match=rf'^--output={blocker} is an existing file'):
    attention_mode.check_output(str(blocker))
  with pytest.raises(FileExistsError, match=rf'^--output={tmp_path} is a non-empty directory'):
    attention_mode.check_output(str(tmp_path))
  with pytest.raises(attention_mode.AttentionInputError, match='needs --output=DIR'):
    attention_mode.check_output(None)
  assert blocker.read_text() == 'keep me\n'
  attention_mode.check_output(str(tmp_path / 'new'))  # a new directory is fine


def test_empty_lines_and_long_inputs_are_named_by_line(tmp_path):
  source = tmp_path / 'in.en'
  source.write_text('fine\n\nalso fine\n', encoding='utf-8')
  with pytest.raises(attention_mode.AttentionInputError,
                     match=rf'^--input={source} line 2 is empty; every line must hold'):
    attention_mode.read_sentences(str(source), None)
  source.write_text('abc\nabcdefghij\n', encoding='utf-8')
  targets = tmp_path / 't.es'
  targets.write_text('x\n   \n', encoding='utf-8')
  with pytest.raises(attention_mode.AttentionInputError, match=rf'^--targets={targets} line 2'):
    attention_mode.read_sentences(str(source), str(targets))
  with pytest.raises(FileNotFoundError, match=r'^--targets=/nonexistent: no such file$'):
    attention_mode.read_sentences(str(source), '/nonexistent')
  lines, _ = attention_mode.read_sentences(str(source), None)
  with pytest.raises(attention_mode.AttentionInputError,
                     match=r'^--input=F line 2: 11 tokens with EOS; the model takes at most 9 '
                     r'\(config max_len=10\)$'):
    attention_mode.encode_checked(CharTokenizer(), lines, '--input=F', 9, 10)


def test_render_every_file_of_a_sentence(tmp_path):
  """The files of one sentence from given maps (no model, 2 layers), never overwritten."""
  tok = CharTokenizer()
  src, tgt = tok.encode('abcde') + [1], tok.encode('xyz') + [1]
  rng = np.random.default_rng(0)
  maps = {kind: rng.dirichlet(np.ones(k), size=(2, 2, q)).astype(np.float32)
          for kind, (q, k) in {'encoder': (6, 6), 'decoder': (4, 4),
                               'encoder_decoder': (4, 6)}.items()}
  sentence = attention_mode.Sentence('abcde', 'xyz', src, tgt, maps)
  paths = attention_mode.write_all(str(tmp_path / 'out'), [sentence], tok, 2, 'random')
  assert paths == [str(tmp_path / 'out' / 'sentence_1')]
  assert sorted(os.listdir(paths[0])) == ['attention.html', 'attention.npz'] + sorted(
      f'{kind}_layer{layer}.png' for kind in attention_maps.KINDS for layer in (1, 2)) + [
      'lines_encoder_layer2.png']
  np.testing.assert_array_equal(np.load(os.path.join(paths[0], 'attention.npz'))['decoder'],
                                maps['decoder'])
  with pytest.raises(FileExistsError, match='already exists'):
    attention_mode.write_all(str(tmp_path / 'out'), [sentence], tok, 2, 'random')
