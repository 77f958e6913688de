"""Export a trained model to a CTranslate2 model directory (the engine of Argos Translate and
LibreTranslate), through CTranslate2's own converter API.

What is mapped, and why each needs care:

* Post-LN (`pre_norm=False`, the paper) or pre-LN (`pre_norm=True` with the final norms).
* One shared embedding matrix for source, target and the pre-softmax projection (§3.4), the
  embeddings multiplied by sqrt(d_model) (`scale_embeddings`).
* Positions: our interleaved sinusoids (§3.5, `layers.sinusoidal_positions`, from position 0)
  or the learned tables, written out explicitly with `max_len` rows: CTranslate2's built-in
  table concatenates sin|cos, starts at position 1 and uses other frequencies.
* LayerNorm epsilon 1e-6 (CTranslate2 defaults to 1e-5 for norms with a bias).
* Fused projections: self-attention Q|K|V and cross-attention K|V concatenated, our
  `[in, heads, d]` kernels flattened and transposed to CTranslate2's `[out, in]`.
* Tokens: the SentencePiece pieces as the (shared) vocabulary, padded to the embedding size
  with unique dummy tokens; EOS '</s>' (id 1) ends sources (`add_source_eos`) and starts the
  decoder (`decoder_start_token`), as in `model.py`.
* Padding is never a translation token: `translate.Translator` masks its logit, the export
  adds a bias of -1e4 to it (exp(-1e4) is 0 in float32, and -1e4 survives float16).

Decoding as t2t_jax decodes (GNMT length penalty, EOS allowed first, output length limits):
`ctranslate2_decoding`.
"""

import json
import os
import tempfile
from typing import List, Optional, Sequence, Tuple

import numpy as np

from t2t_jax.model import layers, parts, transformer as model
from t2t_jax.storage import paths
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.export.common import (ExportError, ExportSource, check_output, load_source,
                                   new_directory)

LAYER_NORM_EPSILON = 1e-6
PAD_LOGIT_BIAS = -1e4
DUMMY_TOKEN = '<t2t_jax_unused_{}>'
DECODING_FILE = 't2t_jax_decoding.json'


def _ctranslate2():
  try:
    import ctranslate2
  except ImportError:
    raise ExportError('--format=ctranslate2 needs the ctranslate2 package: '
                      'pip install -r requirements-serving.txt') from None
  return ctranslate2


def quantizations() -> Tuple[str, ...]:
  """The weight types CTranslate2 accepts for `quantization` (int8, float16, ...)."""
  from ctranslate2.specs import model_spec
  return tuple(model_spec.ACCEPTED_MODEL_TYPES)


def check_quantization(quantization: Optional[str]) -> None:
  """Raises ExportError for a quantization CTranslate2 does not know (None: keep float32)."""
  _ctranslate2()
  if quantization is not None and quantization not in quantizations():
    raise ExportError(f'--quantization={quantization}: unknown; CTranslate2 accepts '
                      f'{", ".join(quantizations())}')


def check_paper_layers(transformer: model.Transformer) -> None:
  """Raises ExportError naming the first extension point (`parts.py`) of a model variant:
  CTranslate2 runs its own implementation of the paper's layers, not the model's code."""
  changed = [name for name in parts.NAMES
             if getattr(transformer.parts, name) is not getattr(parts.PAPER, name)]
  if changed:
    raise ExportError(f'CTranslate2 runs the paper\'s layers; this model replaces its '
                      f'{", ".join(changed)}: export it with --format=stablehlo, which runs '
                      'the model\'s own code')


def check_expressible(cfg: model.TransformerConfig, params) -> None:
  """Raises ExportError naming the first option of `cfg` CTranslate2 cannot express."""
  if cfg.d_k != cfg.d_v:
    raise ExportError(f'CTranslate2 cannot express d_k={cfg.d_k} != d_v={cfg.d_v}: its '
                      'attention has one head width for queries, keys and values')
  if cfg.positional == 'learned':
    for side in ('encoder', 'decoder'):
      rows = params[side]['positions']['positions'].shape[0]
      if rows < cfg.max_len:
        raise ExportError(f'the learned {side} position table has {rows} rows but max_len='
                          f'{cfg.max_len}: CTranslate2 cannot extend learned positions')


def vocabulary(pieces: Sequence[str], size: int) -> List[str]:
  """The pieces, padded to `size` tokens with dummies ('<t2t_jax_unused_N>') unique among
  them. Raises ExportError if there are more pieces than embedding rows."""
  if len(pieces) > size:
    raise ExportError(f'the vocabulary has {len(pieces)} pieces but the embedding only '
                      f'{size} rows')
  tokens, taken, n = list(pieces), set(pieces), 0
  while len(tokens) < size:
    if DUMMY_TOKEN.format(n) not in taken:
      tokens.append(DUMMY_TOKEN.format(n))
    n += 1
  return tokens


def position_table(cfg: model.TransformerConfig, params, side: str) -> np.ndarray:
  """`[max_len, d_model]` float32: the encodings `side` ('encoder'/'decoder') adds at
  positions 0, 1, ..."""
  if cfg.positional == 'learned':
    return np.array(params[side]['positions']['positions'], np.float32)[:cfg.max_len]
  return layers.sinusoidal_positions(cfg.max_len, cfg.d_model)


def _out_in(kernel) -> np.ndarray:
  """A `[in, ...]` (DenseGeneral into heads) kernel as CTranslate2's `[out, in]` weight."""
  kernel = np.array(kernel, np.float32)
  return np.ascontiguousarray(kernel.reshape(kernel.shape[0], -1).T)


def _set_linear(spec, kernel, bias=None) -> None:
  spec.weight = _out_in(kernel)
  if bias is not None:
    spec.bias = np.array(bias, np.float32)


def _set_norm(spec, params) -> None:
  spec.gamma = np.array(params['scale'], np.float32)
  spec.beta = np.array(params['bias'], np.float32)


def _set_attention(spec, params, norm, fused: Sequence[Sequence[str]]) -> None:
  """`fused`: our projections in CTranslate2's order, each group concatenated into one
  linear (self-attention: [q, k, v]; cross-attention: [q], [k, v]); the output last."""
  for linear, names in zip(spec.linear, fused):
    linear.weight = np.concatenate([_out_in(params[n]['kernel']) for n in names])
  # The output kernel is [heads, d_v, d_model]: flatten the heads, then [out, in].
  out = np.array(params['out']['kernel'], np.float32)
  spec.linear[-1].weight = np.ascontiguousarray(out.reshape(-1, out.shape[-1]).T)
  _set_norm(spec.layer_norm, norm)


def _set_ffn(spec, params, norm) -> None:
  _set_linear(spec.linear_0, params['wi']['kernel'], params['wi']['bias'])
  _set_linear(spec.linear_1, params['wo']['kernel'], params['wo']['bias'])
  _set_norm(spec.layer_norm, norm)


def build_spec(cfg: model.TransformerConfig, params, pieces: Sequence[str]):
  """A `ctranslate2.specs.TransformerSpec` holding `params` (a t2t_jax parameter tree).

  Raises:
    ExportError: an option CTranslate2 cannot express, or more pieces than embedding rows.
  """
  from ctranslate2.specs import transformer_spec
  check_expressible(cfg, params)
  pre_norm = cfg.norm_position == 'pre'
  # Only a head width other than d_model / heads needs saying (CTranslate2 derives it).
  head_dim = None if cfg.d_k * cfg.num_heads == cfg.d_model else cfg.d_k
  encoder = transformer_spec.TransformerEncoderSpec(cfg.num_layers, cfg.num_heads,
                                                    pre_norm=pre_norm, head_dim=head_dim)
  decoder = transformer_spec.TransformerDecoderSpec(cfg.num_layers, cfg.num_heads,
                                                    pre_norm=pre_norm, head_dim=head_dim)
  embedding = np.array(params['shared_embedding']['embedding'], np.float32)
  for side, spec in (('encoder', encoder), ('decoder', decoder)):
    embeddings = spec.embeddings[0] if side == 'encoder' else spec.embeddings
    embeddings.weight = embedding
    spec.scale_embeddings = True  # x sqrt(d_model), as SharedEmbedding
    spec.position_encodings.encodings = position_table(cfg, params, side)
    if pre_norm:
      _set_norm(spec.layer_norm, params[side]['final_norm'])
  for i, layer in enumerate(encoder.layer):
    p = params['encoder'][f'layer_{i}']
    _set_attention(layer.self_attention, p['self_attention'], p['attention_block']['norm'],
                   [['query', 'key', 'value']])
    _set_ffn(layer.ffn, p['ffn'], p['ffn_block']['norm'])
  for i, layer in enumerate(decoder.layer):
    p = params['decoder'][f'layer_{i}']
    _set_attention(layer.self_attention, p['self_attention'],
                   p['self_attention_block']['norm'], [['query', 'key', 'value']])
    _set_attention(layer.attention, p['cross_attention'], p['cross_attention_block']['norm'],
                   [['query'], ['key', 'value']])
    _set_ffn(layer.ffn, p['ffn'], p['ffn_block']['norm'])
  decoder.projection.weight = embedding  # §3.4; saved once (CTranslate2 aliases equal arrays)
  bias = np.zeros(cfg.vocab_size, np.float32)
  bias[model.PAD_ID] = PAD_LOGIT_BIAS
  decoder.projection.bias = bias

  spec = transformer_spec.TransformerSpec(encoder, decoder)
  spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
  spec.config.unk_token = pieces[2] if len(pieces) > 2 else '<unk>'
  spec.config.eos_token = pieces[model.EOS_ID]
  spec.config.bos_token = pieces[model.EOS_ID]  # there is no BOS: EOS starts the decoder
  spec.config.decoder_start_token = pieces[model.EOS_ID]
  spec.config.add_source_eos = True
  tokens = vocabulary(pieces, cfg.vocab_size)
  spec.register_source_vocabulary(tokens)
  spec.register_target_vocabulary(tokens)
  return spec


def _converter(cfg, params, pieces, files):
  """A `ctranslate2.converters.Converter` over our parameters (imported lazily)."""
  from ctranslate2.converters.converter import Converter

  class T2TJaxConverter(Converter):
    def _load(self):
      spec = build_spec(cfg, params, pieces)
      for name, path in files.items():
        spec.register_file(path, name)
      return spec

  return T2TJaxConverter()


def decoding_options(config, description: str) -> dict:
  """What `t2t_jax_decoding.json` records: the run's decoding settings and their source."""
  return {'beam_size': config.beam_size, 'length_penalty_alpha': config.length_penalty_alpha,
          'length_penalty': 'GNMT ((5 + |Y|) / 6) ** alpha, |Y| counting EOS: re-rank '
                            'CTranslate2 hypotheses (t2t_jax.gnmt_rerank)',
          'min_decoding_length': 0,
          'max_decode_extra': config.max_decode_extra, 'max_len': config.max_len,
          'source_max_tokens': config.max_len - 1, 'checkpoint': description}


def write_model(cfg: model.TransformerConfig, params, pieces: Sequence[str], output: str, *,
                quantization: Optional[str] = None, files: Optional[dict] = None) -> str:
  """Writes `params` as a CTranslate2 model into the new directory `output` (model.bin,
  config.json, shared_vocabulary.json, plus `files`: {name in the model directory: path}).

  Raises:
    FileExistsError: `output` exists (nothing is written).
    ExportError: ctranslate2 missing, an unknown quantization or an inexpressible model.
  """
  check_quantization(quantization)
  check_expressible(cfg, params)
  # A full disk or a read-only file system: one line naming `output`, nothing left of it.
  with new_directory(output) as temp, workdir_lib.writing(paths.absolute(output)):
    # The converter writes into a directory it creates: one inside our temporary one.
    converted = _converter(cfg, params, pieces, files or {}).convert(
        os.path.join(temp, 'model'), quantization=quantization)
    for name in os.listdir(converted):
      os.rename(os.path.join(converted, name), os.path.join(temp, name))
    os.rmdir(converted)
  return paths.absolute(output)


def convert(source: ExportSource, output: str, quantization: Optional[str] = None) -> str:
  """`write_model` of a trained run, with its SentencePiece model (spm.model) and its decoding
  settings (t2t_jax_decoding.json) in the model directory. Returns `output`'s absolute path."""
  with tempfile.TemporaryDirectory() as scratch:
    options = os.path.join(scratch, DECODING_FILE)
    vocab = os.path.join(scratch, 'spm.model')  # a local copy: the workdir may be gs://
    with workdir_lib.writing(scratch):  # the system's temporary folder, full or read-only
      with open(options, 'w', encoding='utf-8') as f:
        json.dump(decoding_options(source.config, source.description), f, indent=2,
                  sort_keys=True)
      with open(vocab, 'wb') as f:
        f.write(paths.read_bytes(source.tokenizer_path))
    check_paper_layers(source.transformer)
    return write_model(source.model_config, source.params, source.pieces(), output,
                       quantization=quantization,
                       files={'spm.model': vocab, DECODING_FILE: options})


def export_ctranslate2(workdir: str, output: str, *, checkpoint: Optional[str] = None,
                       quantization: Optional[str] = None) -> str:
  """Exports a run to CTranslate2: the averaged parameters (or `checkpoint`: a step or a
  checkpoint path) and the run's SentencePiece model, into the new directory `output`.

  Args:
    workdir: the training run's directory.
    output: the model directory to create; it must not exist.
    checkpoint: as `--checkpoint` (default: the newest averaged checkpoint, else the latest).
    quantization: CTranslate2 weight type ('int8', 'float16', ...; None keeps float32).

  Returns:
    The absolute path of `output`. Translate with `ctranslate2.Translator(output)` on
    SentencePiece pieces (README: Serving).

  Raises:
    FileExistsError, ExportError, CheckpointError, TokenizerError: one-line reasons; nothing
      is written.
  """
  check_output(output)
  check_quantization(quantization)
  return convert(load_source(workdir, checkpoint), output, quantization)
