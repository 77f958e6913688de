"""Exports that prove themselves (issue 43): the CTranslate2 exporter reads the model that is
there (layer counts of each stack, grouped-query heads, parameters it has no place for, the
embedding scale), and every export translates a few sentences with the written artifact and
with the model's own beam search before it reports success, removing what it wrote when they
differ. Each test here failed on the exporter before: it wrote a model that could not
translate, with no error."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ctranslate2 = pytest.importorskip('ctranslate2')
pytest.importorskip('flatbuffers')

from t2t_jax.data import tokenizer  # noqa: E402
from t2t_jax.export import common, ctranslate2_export as ct2_export, formats  # noqa: E402
from t2t_jax.inference import checkpoint_choice, portable  # noqa: E402
from t2t_jax import config as config_lib  # noqa: E402
from t2t_jax.model import transformer as model  # noqa: E402
from t2t_jax.model.layers import SharedEmbedding  # noqa: E402
from export_helpers import CFG, PIECES, PieceTokenizer, sentences  # noqa: E402


class ThreeEncoderLayers(model.Transformer):
  """3 encoder layers, `cfg.num_layers` (1) decoder layers: a subclass's own stacks."""

  def setup(self):
    cfg = self.cfg
    self.shared_embedding = SharedEmbedding(cfg.vocab_size, cfg.d_model, cfg.dtype)
    self.encoder = model.Encoder(cfg.replace(num_layers=3), self.shared_embedding, self.parts)
    self.decoder = model.Decoder(cfg, self.shared_embedding, self.parts)


class UnscaledEmbedding(SharedEmbedding):
  def __call__(self, ids):
    return jnp.take(jnp.asarray(self.embedding, self.dtype), ids, axis=0)  # no sqrt(d_model)


class UntiedEmbedding(SharedEmbedding):
  def setup(self):
    super().setup()
    self.output = self.param('output', jax.nn.initializers.normal(self.d_model ** -0.5),
                             (self.vocab_size, self.d_model), jnp.float32)

  def attend(self, x, transposed=None):
    return jnp.einsum('...d,vd->...v', x, self.output, preferred_element_type=jnp.float32)


def _with_embedding(embedding_class):
  class Model(model.Transformer):
    def setup(self):
      cfg = self.cfg
      self.shared_embedding = embedding_class(cfg.vocab_size, cfg.d_model, cfg.dtype)
      self.encoder = model.Encoder(cfg, self.shared_embedding, self.parts)
      self.decoder = model.Decoder(cfg, self.shared_embedding, self.parts)
  return Model


Unscaled, Untied = _with_embedding(UnscaledEmbedding), _with_embedding(UntiedEmbedding)


def _params(net, sharpen=4.0):
  params = jax.jit(model.init_params, static_argnums=0)(net, jax.random.PRNGKey(0))
  table = params['shared_embedding']['embedding'] * sharpen
  return dict(params, shared_embedding=dict(params['shared_embedding'], embedding=table))


def _ours_log_probs(net, params, sources, targets):
  """`export_helpers.log_probs` of any model (a subclass included)."""
  rows = ([list(s) + [model.EOS_ID] for s in sources],
          [list(t) + [model.EOS_ID] for t in targets])
  length = max(map(len, rows[0] + rows[1]))
  x, y = (np.array([r + [0] * (length - len(r)) for r in side], np.int32) for side in rows)
  logits = jnp.asarray(net.apply({'params': params}, x, y))
  scores = jax.nn.log_softmax(logits.at[..., model.PAD_ID].set(-1e9))  # padding masked
  picked = np.take_along_axis(np.asarray(scores), y[..., None], axis=-1)[..., 0]
  return [picked[i, :len(t)] for i, t in enumerate(rows[1])]


@pytest.mark.parametrize('name', ['grouped-query', 'three-encoder-layers'])
def test_the_spec_reads_the_model_that_is_there(tmp_path, name):
  # Before: a grouped-query model's config.json had no kv-head count (translate_batch raised
  # a shape ValueError); the subclass's spec had cfg.num_layers = 1 encoder layer of 3.
  net = (model.Transformer(CFG.replace(num_kv_heads=2)) if name == 'grouped-query'
         else ThreeEncoderLayers(CFG.replace(num_layers=1)))
  params = _params(net)
  path = ct2_export.write_model(net.cfg, params, PIECES, str(tmp_path / 'ct2'))
  spec = ct2_export.build_spec(net.cfg, params, PIECES)
  expected = (2, 2, 2) if name == 'grouped-query' else (3, 1, None)
  assert (len(spec.encoder.layer), len(spec.decoder.layer),
          getattr(spec.decoder.layer[0].self_attention, 'num_heads_kv', None)) == expected
  translator = ctranslate2.Translator(path, device='cpu', intra_threads=1)
  tok = PieceTokenizer()
  sources, targets = sentences(4), sentences(4, seed=2)
  scored = translator.score_batch([s.split() for s in sources], [t.split() for t in targets])
  ours = _ours_log_probs(net.clone(cfg=net.cfg.replace(deterministic=True)), params,
                         [tok.encode(s) for s in sources], [tok.encode(t) for t in targets])
  for result, expected_row in zip(scored, ours):
    np.testing.assert_allclose(result.log_probs, expected_row, atol=1e-4, rtol=0)


@pytest.mark.parametrize('net,message', [
    (Untied(CFG), "CTranslate2's Transformer has no place for the parameters "
     'shared_embedding/output'),
    (Unscaled(CFG), r"the model's shared_embedding does not multiply the embeddings by "
     r'sqrt\(d_model=32\)'),
], ids=['untied-projection', 'unscaled-embedding'])
def test_what_ctranslate2_cannot_express_is_refused_before_writing(tiny_source, tmp_path, net,
                                                                  message):
  source = tiny_source(net)
  with pytest.raises(common.ExportError, match=message):
    formats.export('ctranslate2', source, str(tmp_path / 'ct2'))
  assert os.listdir(tmp_path) == []


@pytest.fixture(scope='module')
def tiny_config(tiny_workdir):
  inference = checkpoint_choice.load_inference_params(tiny_workdir)
  config = config_lib.from_json(inference.config_json)
  config.beam_size, config.decode_batch_sentences = 2, 4
  return config


@pytest.fixture
def tiny_source(tiny_workdir, tiny_config):
  """`make(net)`: an ExportSource of `net` (random sharpened weights) with the tiny run's
  vocabulary (400 pieces), dev split and decoding settings (beam 2)."""
  def make(net):
    net = net.clone(cfg=net.cfg.replace(vocab_size=tiny_config.vocab_size,
                                        max_len=tiny_config.max_len))
    return common.ExportSource(tiny_config, _params(net), tokenizer.vocab_path(tiny_workdir),
                               'random', net)
  return make


@pytest.mark.parametrize('name', ['grouped-query', 'three-encoder-layers'])
def test_a_run_export_checks_itself_and_keeps_what_translates_as_ours(tiny_source, tmp_path,
                                                                      name):
  net = (model.Transformer(CFG.replace(num_kv_heads=2)) if name == 'grouped-query'
         else ThreeEncoderLayers(CFG.replace(num_layers=1)))
  # The self-check translated the dev sentences with the written model and ours, alike.
  output = formats.export('ctranslate2', tiny_source(net), str(tmp_path / 'ct2'))
  assert sorted(os.listdir(output)) == ['config.json', 'model.bin', 'shared_vocabulary.json',
                                        'spm.model', 't2t_jax_decoding.json']
  assert os.listdir(tmp_path) == ['ct2']
  # Before: the grouped-query model's translate_batch raised a shape ValueError.
  translator = ctranslate2.Translator(output, device='cpu', intra_threads=1)
  assert len(translator.translate_batch([['\u2581In']], max_decoding_length=4)) == 1


def test_a_ctranslate2_export_that_translates_otherwise_is_removed(tiny_source, tmp_path,
                                                                   monkeypatch):
  # The embedding probe cannot see every subclass: take it away, and the self-check stops
  # the export of the unscaled model instead.
  monkeypatch.setattr(ct2_export, 'check_embedding_scale', lambda *args: None)
  with pytest.raises(common.ExportError) as error:
    formats.export('ctranslate2', tiny_source(Unscaled(CFG)), str(tmp_path / 'ct2'))
  message = str(error.value)
  assert message.startswith(f'the float32 CTranslate2 model for {tmp_path}/ct2 does not '
                            'translate as the model: self-check sentence 1 of 4 ')
  assert message.endswith('(beam 2); nothing was written') and '\n' not in message
  assert os.listdir(tmp_path) == []


def test_a_stablehlo_export_that_translates_otherwise_is_removed(tiny_source, tmp_path,
                                                                 monkeypatch):
  decode = portable.ExportedTranslator.decode_batch

  def broken(self, inputs, max_lengths, max_decode_len):  # every first token wrong
    out = np.array(decode(self, inputs, max_lengths, max_decode_len))
    out[:, 0] = np.where(out[:, 0] == 1, 5, 1)
    return out

  monkeypatch.setattr(portable.ExportedTranslator, 'decode_batch', broken)
  source = tiny_source(model.Transformer(CFG))
  source.config.bucket_lengths = (16,)  # one module to lower
  with pytest.raises(common.ExportError, match=rf'^the StableHLO artifact for {tmp_path}/hlo '
                     'does not translate as the model: self-check sentence 1 of 4 '):
    formats.export('stablehlo', source, str(tmp_path / 'hlo'))
  assert os.listdir(tmp_path) == []


def test_check_sentences_come_from_the_dev_split_or_the_vocabulary(tiny_workdir, tiny_config):
  from t2t_jax.export import self_check
  tok = tokenizer.load(tokenizer.vocab_path(tiny_workdir))
  dev = self_check.check_sentences(tiny_config, tok)
  with open(os.path.join(tiny_config.local_corpus_dir, 'dev.en'), encoding='utf-8') as f:
    lines = [line.strip() for line in f][:self_check.DEV_LINES]
  assert len(dev) == 4 and set(dev) <= set(lines)
  assert max(map(len, map(tok.encode, dev))) <= sorted(map(len, map(tok.encode, lines)))[3]
  made = self_check.check_sentences(None, tok)
  assert len(made) == 4 and set(made).isdisjoint(dev)
