"""Export a trained model to a CTranslate2 model directory (the engine of Argos Translate and
LibreTranslate), through CTranslate2's own converter API.

What is mapped, and why each needs care:

* Post-LN (`pre_norm=False`, the paper) or pre-LN (`pre_norm=True` with the final norms).
* One shared embedding matrix for source, target and the pre-softmax projection (§3.4), the
  embeddings multiplied by sqrt(d_model) (`scale_embeddings`). Separate vocabularies
  (`share_vocab=False`): the encoder's own matrix and the source pieces as CTranslate2's
  source vocabulary (source_vocabulary.json beside target_vocabulary.json, and
  source_spm.model beside spm.model to tokenize the input with).
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
import shutil
import tempfile
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from t2t_jax.model import layers, parts, transformer as model
from t2t_jax.storage import paths
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.export import ctranslate2_decoding, self_check
from t2t_jax.export.ctranslate2_params import (  # noqa: F401  (check_expressible, Layout: API)
    Layout, ReadTracker, check_embedding_scale, check_expressible, embedding_tables,
    refuse_unread, source_table)
from t2t_jax.export.common import (ExportError, ExportSource, check_output, load_source,
                                   new_directory)

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


def check_quantization(quantization: Optional[str], argument: str = '--quantization') -> None:
  """Raises ExportError for a quantization CTranslate2 does not know (None: keep float32);
  `argument` names it (main.py's flag, or a library call's argument)."""
  _ctranslate2()
  if quantization is not None and quantization not in quantizations():
    raise ExportError(f'{argument}={quantization}: unknown; CTranslate2 accepts '
                      f'{", ".join(quantizations())}')


def check_length_rule(config) -> None:
  """Refuses a run decoding by transformers' length rule in one line: CTranslate2's search,
  re-ranked (`ctranslate2_decoding`), finds GNMT's best; its stop is not transformers'."""
  rule = getattr(config, 'length_penalty_rule', 'gnmt')
  if rule != 'gnmt':
    raise ExportError(f"--config.length_penalty_rule={rule!r}: the CTranslate2 export decodes by "
                      "the paper's GNMT rule only (its stop is not transformers' heuristic); "
                      "export with 'gnmt', or with --format=huggingface to decode in transformers")


def check_paper_layers(transformer: model.Transformer) -> None:
  """Raises ExportError naming the first extension point (`parts.py`) of a model variant:
  CTranslate2 runs its own implementation of the paper's layers, not the model's code."""
  changed = [name for name in parts.NAMES
             if getattr(transformer.parts, name) is not getattr(parts.PAPER, name)]
  window = transformer.cfg.decoder_window
  if window is not None:  # CTranslate2's decoder would attend to every earlier position
    raise ExportError(f'CTranslate2 runs the paper\'s full self-attention; this model has '
                      f'decoder_window={window}: export it with --format=stablehlo, which '
                      'runs the model\'s own code')
  if changed:
    raise ExportError(f'CTranslate2 runs the paper\'s layers; this model replaces its '
                      f'{", ".join(changed)}: export it with --format=stablehlo, which runs '
                      'the model\'s own code')


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
  return layers.position_table(cfg.positional, cfg.max_len, cfg.d_model)


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
  linear (self-attention: [q, k, v]; cross-attention: [q], [k, v]); the output last. Their
  biases (`attention_bias`) likewise, flattened over the heads."""
  for linear, names in zip(spec.linear, fused):
    linear.weight = np.concatenate([_out_in(params[n]['kernel']) for n in names])
    if 'bias' in params[names[0]]:
      linear.bias = np.concatenate([np.array(params[n]['bias'], np.float32).reshape(-1)
                                    for n in names])
  # The output kernel is [heads, d_v, d_model]: flatten the heads, then [out, in].
  out = np.array(params['out']['kernel'], np.float32)
  spec.linear[-1].weight = np.ascontiguousarray(out.reshape(-1, out.shape[-1]).T)
  if 'bias' in params['out']:
    spec.linear[-1].bias = np.array(params['out']['bias'], np.float32)
  _set_norm(spec.layer_norm, norm)


def _set_ffn(spec, params, norm) -> None:
  _set_linear(spec.linear_0, params['wi']['kernel'], params['wi']['bias'])
  _set_linear(spec.linear_1, params['wo']['kernel'], params['wo']['bias'])
  _set_norm(spec.layer_norm, norm)


def _set_layers(encoder, decoder, tree) -> None:
  """Every layer of both stacks from `tree` (a `ReadTracker` of the parameters)."""
  for i, layer in enumerate(encoder.layer):
    p = tree['encoder'][f'layer_{i}']
    _set_attention(layer.self_attention, p['self_attention'], p['attention_block']['norm'],
                   [['query', 'key', 'value']])
    _set_ffn(layer.ffn, p['ffn'], p['ffn_block']['norm'])
  for i, layer in enumerate(decoder.layer):
    p = tree['decoder'][f'layer_{i}']
    _set_attention(layer.self_attention, p['self_attention'],
                   p['self_attention_block']['norm'], [['query', 'key', 'value']])
    _set_attention(layer.attention, p['cross_attention'], p['cross_attention_block']['norm'],
                   [['query'], ['key', 'value']])
    _set_ffn(layer.ffn, p['ffn'], p['ffn_block']['norm'])


def _activation(name: str):
  """CTranslate2's `Activation` of our FFN `activation` (§3.3's ReLU, swish, exact GELU)."""
  from ctranslate2.specs import common_spec
  return {'relu': common_spec.Activation.RELU, 'swish': common_spec.Activation.SWISH,
          'gelu': common_spec.Activation.GELU}[name]


def build_spec(cfg: model.TransformerConfig, params, pieces: Sequence[str],
               source_pieces: Optional[Sequence[str]] = None):
  """A `ctranslate2.specs.TransformerSpec` holding `params` (a t2t_jax parameter tree), with
  the layer and head counts the tree holds (`layout`), grouped-query attention as
  CTranslate2's `num_heads_kv`. `pieces`: the (target) vocabulary's; `source_pieces`: the
  source vocabulary's of a model with separate ones (`cfg.source_vocab_size`).

  Raises:
    ExportError: an option CTranslate2 cannot express, a parameter it has no place for, or
      more pieces than embedding rows.
  """
  from ctranslate2.specs import transformer_spec
  shape = check_expressible(cfg, params)
  read: set = set()
  tree = ReadTracker(params, read)
  pre_norm = cfg.norm_position == 'pre'
  # Only a head width other than d_model / heads needs saying (CTranslate2 derives it), and
  # only fewer key/value heads than query heads.
  options = dict(pre_norm=pre_norm, activation=_activation(cfg.activation),
                 head_dim=None if shape.head_dim * shape.num_heads == cfg.d_model
                 else shape.head_dim,
                 num_heads_kv=None if shape.kv_heads == shape.num_heads else shape.kv_heads)
  encoder = transformer_spec.TransformerEncoderSpec(shape.encoder_layers, shape.num_heads,
                                                    **options)
  decoder = transformer_spec.TransformerDecoderSpec(shape.decoder_layers, shape.num_heads,
                                                    **options)
  # Through the model's embedding part, tied or not (`share_embeddings`).
  embedding, projection = embedding_tables(cfg, params, read)
  separate = cfg.source_vocab_size is not None  # the encoder's own table and vocabulary
  tables = {'encoder': source_table(cfg, params, read) if separate else embedding,
            'decoder': embedding}
  for side, spec in (('encoder', encoder), ('decoder', decoder)):
    embeddings = spec.embeddings[0] if side == 'encoder' else spec.embeddings
    embeddings.weight = tables[side]
    spec.scale_embeddings = cfg.scale_embeddings  # x sqrt(d_model) or not, as the model
    spec.position_encodings.encodings = position_table(cfg, tree, side)
    if pre_norm:
      _set_norm(spec.layer_norm, tree[side]['final_norm'])
  _set_layers(encoder, decoder, tree)
  bias = (np.array(tree['shared_embedding']['logits_bias'], np.float32) if cfg.logits_bias
          else np.zeros(cfg.vocab_size, np.float32))
  bias[model.PAD_ID] = PAD_LOGIT_BIAS
  refuse_unread(params, read)
  # §3.4: the embedding itself when tied, saved once (CTranslate2 aliases equal arrays).
  decoder.projection.weight = embedding if cfg.share_embeddings else projection
  decoder.projection.bias = bias

  spec = transformer_spec.TransformerSpec(encoder, decoder)
  spec.config.layer_norm_epsilon = cfg.layer_norm_epsilon
  spec.config.unk_token = pieces[2] if len(pieces) > 2 else '<unk>'
  spec.config.eos_token = pieces[model.EOS_ID]
  spec.config.bos_token = pieces[model.EOS_ID]  # there is no BOS: EOS starts the decoder
  spec.config.decoder_start_token = pieces[cfg.decoder_start_id]
  spec.config.add_source_eos = True
  tokens = vocabulary(pieces, cfg.vocab_size)
  spec.register_source_vocabulary(vocabulary(source_pieces, cfg.input_vocab_size)
                                  if separate else tokens)
  spec.register_target_vocabulary(tokens)
  return spec


def _converter(spec, files):
  """A `ctranslate2.converters.Converter` of a built spec (imported lazily)."""
  from ctranslate2.converters.converter import Converter

  class T2TJaxConverter(Converter):
    def _load(self):
      for name, path in files.items():
        spec.register_file(path, name)
      return spec

  return T2TJaxConverter()


def write_model(cfg: model.TransformerConfig, params, pieces: Sequence[str], output: str, *,
                quantization: Optional[str] = None, files: Optional[dict] = None,
                check: Optional[Callable[[str], None]] = None,
                argument: str = '--output', source_pieces: Optional[Sequence[str]] = None) -> str:
  """Writes `params` as a CTranslate2 model into the new directory `output` (model.bin,
  config.json, shared_vocabulary.json, or with `source_pieces` (separate vocabularies,
  `build_spec`) source_ and target_vocabulary.json, plus `files`: {name in the model
  directory: path}).
  `check(directory)`, if given, runs on the written model before it becomes `output`; what it
  raises removes everything written. A quantized model translates otherwise by design (int8
  weights), so `check` then runs on a float32 conversion of the same parameters, written
  beside it and removed: what it proves is the mapping, which quantization does not change.
  `argument` names `output` in messages.

  Raises:
    FileExistsError: `output` exists (nothing is written).
    ExportError: ctranslate2 missing, an unknown quantization or an inexpressible model
      (before anything is written), or what `check` raises.
  """
  check_quantization(quantization)
  check_output(output, argument)
  spec = build_spec(cfg, params, pieces, source_pieces)  # every refusal before writing
  quantized = quantization not in (None, 'float32')
  # A full disk or a read-only file system: one line naming `output`, nothing left of it.
  with new_directory(output, argument) as temp, workdir_lib.writing(paths.absolute(output)):
    if check is not None and quantized:
      # A second spec: conversion quantizes a spec's arrays in place.
      unquantized = _converter(build_spec(cfg, params, pieces, source_pieces), {}).convert(
          os.path.join(temp, 'float32_self_check'))
      check(unquantized)
      shutil.rmtree(unquantized)
    # The converter writes into a directory it creates: one inside our temporary one.
    converted = _converter(spec, files or {}).convert(os.path.join(temp, 'model'),
                                                      quantization=quantization)
    for name in os.listdir(converted):
      os.rename(os.path.join(converted, name), os.path.join(temp, name))
    os.rmdir(converted)
    if check is not None and not quantized:
      check(temp)
  return paths.absolute(output)


def _self_check(source: ExportSource, output: str, quantization: Optional[str]
                ) -> Callable[[str], None]:
  """`write_model`'s check of a run's export: `self_check.check_artifact` with the written
  model decoded by `ctranslate2_decoding.translate` at the run's settings."""
  from t2t_jax.data import language_tokens, vocab_pair
  ctranslate2 = _ctranslate2()
  settings = self_check.Settings.of(source.config)
  # Separate vocabularies: sources in the source model's pieces; language tokens: the
  # source's first, the target's forced (CTranslate2's target_prefix).
  tok = language_tokens.wrap(source.tokenizer(), source.config)
  encoder_tok = vocab_pair.side(tok, 'source')
  forced = vocab_pair.side(tok, 'target').pieces(language_tokens.forced(tok))
  sentences = self_check.check_sentences(source.config, tok)
  tokens = vocabulary(source.pieces(), source.model_config.vocab_size)
  index = {token: i for i, token in enumerate(tokens)}
  # The written weights are float32 (or quantized from float32) and CTranslate2 computes in
  # float32: the reference decodes with float32 activations too, also for a bfloat16 run.
  net = source.transformer
  reference = net.clone(cfg=net.cfg.replace(dtype='float32'))

  def check(directory: str) -> None:
    translator = ctranslate2.Translator(directory, device='cpu', intra_threads=1)

    def artifact_ids(sentences):
      # patience=2: CTranslate2 then keeps the hypothesis our search prefers where its own
      # stopping rule would end first (docs/performance.md, "Serving": 1010 of 1010 test
      # sentences agree at patience 2, 1003 at 1).
      rows = ctranslate2_decoding.translate(
          translator, [encoder_tok.pieces(encoder_tok.encode(s)) for s in sentences],
          beam_size=settings.beam_size, alpha=settings.alpha,
          max_decode_extra=settings.max_decode_extra, max_len=source.model_config.max_len,
          patience=2.0, target_prefix=forced)
      return [[index.get(piece, -1) for piece in row] for row in rows]

    name = (f'the float32 conversion of the {quantization} CTranslate2 model for {output}'
            if quantization not in (None, 'float32') else
            f'the float32 CTranslate2 model for {output}')
    self_check.check_artifact(name, reference, source.params, tok, settings, artifact_ids,
                              sentences)
  return check


def convert(source: ExportSource, output: str, quantization: Optional[str] = None,
            argument: str = '--output') -> str:
  """`write_model` of a trained run, with its SentencePiece model (spm.model; separate
  vocabularies: the target's, and source_spm.model) and its decoding settings
  (t2t_jax_decoding.json) in the model directory, after the model is read
  (`check_paper_layers`, `ExportSource.check_vocabulary`, `check_embedding_scale`,
  `build_spec`) and before it is kept, checked by translating (`self_check`). Returns
  `output`'s absolute path."""
  check_paper_layers(source.transformer)
  check_length_rule(source.config)
  source.check_vocabulary()  # padded with dummy tokens, a smaller one would translate to them
  check_embedding_scale(source.transformer, source.params)
  separate = source.source_tokenizer_path is not None
  with tempfile.TemporaryDirectory() as scratch:
    options = os.path.join(scratch, DECODING_FILE)
    # Local copies: the workdir may be gs://.
    files = {'spm.model': source.tokenizer_path}
    if separate:
      files['source_spm.model'] = source.source_tokenizer_path
    with workdir_lib.writing(scratch):  # the system's temporary folder, full or read-only
      with open(options, 'w', encoding='utf-8') as f:
        json.dump(ctranslate2_decoding.decoding_options(source.config, source.description), f,
                  indent=2,
                  sort_keys=True)
      for name, where in files.items():
        files[name] = os.path.join(scratch, name)
        with open(files[name], 'wb') as f:
          f.write(paths.read_bytes(where))
    return write_model(source.model_config, source.params, source.pieces(), output,
                       quantization=quantization, files={**files, DECODING_FILE: options},
                       check=_self_check(source, output, quantization), argument=argument,
                       source_pieces=source.pieces('source') if separate else None)


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
  check_output(output, 'export_ctranslate2: output')
  check_quantization(quantization, 'export_ctranslate2: quantization')
  return convert(load_source(workdir, checkpoint), output, quantization,
                 'export_ctranslate2: output')
