"""Export a trained model as a portable JAX artifact: StableHLO (`jax.export`) of the whole
batched beam search, one module per source length bucket, plus parameters and vocabulary.

The artifact directory (`--mode=export --format=stablehlo --output=DIR`):

  manifest.json     format, version, decoding settings, buckets, parameter order, origin
  params.npz        the parameters, float32, named 'encoder/layer_0/...'
  spm.model         the SentencePiece model (the target side's with separate vocabularies)
  source_spm.model  separate vocabularies only: the source side's (manifest 'source_vocab')
  decode_<S>x<L>.stablehlo   serialized `jax.export.Exported` of
                    (params, inputs [rows, S] int32, max_lengths [rows] int32)
                    -> best hypotheses [rows, L] int32, for every source length S a batch
                    can be padded to (L = min(S + max_decode_extra, max_len))
  serve.py          the runtime (`t2t_jax/inference/portable.py`): jax, numpy and sentencepiece only

Each module is `translate.decode_batch`, the function `main.py --mode=decode` jits, lowered
for CPU, CUDA and TPU; serve.py batches sentences as `translate.Translator` does, so the
artifact translates exactly as the model it came from.

Two entry points write the same artifact (`write_artifact`): `export_stablehlo` from a run's
workdir (its checkpoint, vocabulary and decoding settings), `export_stablehlo_model` from a
model, its parameters and a SentencePiece vocabulary in memory (a model trained in Python),
with `Translator`'s decoding settings.
"""

import json
import logging
import math
import numbers
import os
import shutil
import types
from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.inference import portable, translate
from t2t_jax.model import search, transformer as model
from t2t_jax.model.transformer import as_model  # `model` is also export_stablehlo_model's argument
from t2t_jax.storage import paths
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.export import self_check
from t2t_jax.export.common import (ExportError, ExportSource, check_output, check_vocabulary,
                                   load_source, new_directory)

PLATFORMS = ('cpu', 'cuda', 'tpu')
KNOWN_PLATFORMS = ('cpu', 'cuda', 'rocm', 'tpu')  # what jax.export lowers for


def check_serialization() -> None:
  try:
    import flatbuffers  # noqa: F401  (jax.export serializes with it)
  except ImportError:
    raise ExportError('--format=stablehlo needs the flatbuffers package to serialize: '
                      'pip install -r requirements-serving.txt') from None


def _param_names(params):
  """('encoder/layer_0/attention_block/norm/bias', ...) in tree-flattening order."""
  paths, _ = jax.tree_util.tree_flatten_with_path(params)
  return tuple('/'.join(str(k.key) for k in path) for path, _ in paths)


def export_bucket(transformer: model.ModelLike, params, *, beam_size: int, alpha: float,
                  rows: int, src_len: int, max_decode_len: int,
                  platforms: Sequence[str] = PLATFORMS,
                  length_rule: str = 'gnmt') -> jax.export.Exported:
  """`translate.decode_batch` for `[rows, src_len]` inputs, taking the parameters as a flat
  tuple in `_param_names` order."""
  leaves, tree = jax.tree_util.tree_flatten(params)

  def decode(flat_params, inputs, max_lengths):
    return translate.decode_batch(transformer, beam_size, alpha, jax.tree_util.tree_unflatten(
        tree, list(flat_params)), inputs, max_lengths, max_decode_len,
                                  length_rule=length_rule)

  shapes = (tuple(jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in leaves),
            jax.ShapeDtypeStruct((rows, src_len), jnp.int32),
            jax.ShapeDtypeStruct((rows,), jnp.int32))
  return jax.export.export(jax.jit(decode), platforms=tuple(platforms))(*shapes)


def check_platforms(platforms: Sequence[str], argument: str = 'platforms') -> Tuple[str, ...]:
  """`platforms` as a tuple, after refusing an empty or repeated one or a platform
  `jax.export` does not lower for (`KNOWN_PLATFORMS`); `argument` names it in the message."""
  found = tuple(platforms) if isinstance(platforms, (list, tuple)) else None
  unknown = ([p for p in found if p not in KNOWN_PLATFORMS] if found is not None else None)
  if not found or unknown or len(set(found)) != len(found):
    what = (f'unknown platform {unknown[0]!r}' if unknown else
            'a repeated platform' if found else 'expected a non-empty tuple of platforms')
    raise ExportError(f'{argument}={platforms!r}: {what}; jax.export lowers for '
                      f'{", ".join(KNOWN_PLATFORMS)}')
  return found


def _runs_here(platforms: Sequence[str]) -> bool:
  """Whether this process's default jax backend can run a module lowered for `platforms`."""
  backend = jax.default_backend()
  return backend in platforms or (backend == 'gpu' and bool({'cuda', 'rocm'} & set(platforms)))


def _self_check(source: ExportSource, output: str, directory: str,
                platforms: Sequence[str]) -> None:
  """`self_check.check_artifact` of the artifact in `directory` (its serve.py's
  `ExportedTranslator`) at the artifact's decoding settings. An artifact without a lowering
  for this machine's backend (e.g. platforms=('tpu',) exported on a CPU) cannot run here: the
  check is skipped with a warning rather than refusing a valid export."""
  if not _runs_here(platforms):
    logging.warning('export self-check skipped: %s has no lowering for this machine\'s %s '
                    'backend', output, jax.default_backend())
    return
  tok = source.tokenizer()
  artifact = portable.ExportedTranslator(directory, threads=1)
  self_check.check_artifact(f'the StableHLO artifact for {output}', source.transformer,
                            source.params, tok, self_check.Settings.of(source.config),
                            artifact.translate_ids,
                            self_check.check_sentences(source.config, tok))


def write_artifact(source: ExportSource, output: str,
                   platforms: Sequence[str] = PLATFORMS, argument: str = '--output') -> str:
  """Writes the StableHLO artifact of `source` into the new directory `output`; returns its
  absolute path. Decoding settings (beam size, alpha, max_decode_extra, rows per batch,
  buckets) are the config's, so they can be overridden at export like at decode. Before it
  becomes `output` the artifact translates a few sentences as the model's own beam search
  does (`self_check`), or nothing is kept. `argument` names `output` in messages.

  Raises:
    FileExistsError: `output` exists (nothing is written).
    ExportError: flatbuffers (needed by jax.export serialization) is missing, an unknown
      platform, a vocabulary whose piece count is not the model's vocab_size
      (`check_vocabulary`), or the artifact translates otherwise than the model (nothing is
      kept).
  """
  check_serialization()
  platforms = check_platforms(platforms)
  check_output(output, argument)
  source.check_vocabulary()  # serve.py must decode every id the model can output
  config, cfg = source.config, source.model_config
  params = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), source.params)
  names = _param_names(params)
  rows = config.decode_batch_sentences
  buckets = []
  with new_directory(output, argument) as temp:
    for src_len in portable.source_lengths(config.bucket_lengths, cfg.max_len):
      max_decode_len = min(src_len + config.max_decode_extra, cfg.max_len)
      exported = export_bucket(source.transformer, params, beam_size=config.beam_size,
                               alpha=config.length_penalty_alpha, rows=rows, src_len=src_len,
                               max_decode_len=max_decode_len, platforms=platforms,
                               length_rule=config.length_penalty_rule)
      name = f'decode_{src_len}x{max_decode_len}.stablehlo'
      _write(temp, output, name, lambda path: _write_bytes(path, exported.serialize()))
      buckets.append({'source_length': src_len, 'max_decode_len': max_decode_len,
                      'file': name})
    _write(temp, output, portable.PARAMS, lambda path: np.savez(
        path, **dict(zip(names, jax.tree_util.tree_leaves(params)))))
    vocabs = {portable.VOCAB: source.tokenizer_path}
    if source.source_tokenizer_path is not None:  # separate vocabularies
      vocabs[portable.SOURCE_VOCAB] = source.source_tokenizer_path
    for name, where in vocabs.items():
      vocab = paths.read_bytes(where)  # the workdir may be gs://
      _write(temp, output, name, lambda path, data=vocab: _write_bytes(path, data))
    _write(temp, output, 'serve.py', lambda path: shutil.copyfile(portable.__file__, path))
    manifest = {
        'format': portable.ARTIFACT_FORMAT, 'version': portable.ARTIFACT_VERSION,
        'jax_version': jax.__version__, 'platforms': list(platforms),
        'beam_size': config.beam_size, 'length_penalty_alpha': config.length_penalty_alpha,
        'length_penalty_rule': config.length_penalty_rule,
        'max_decode_extra': config.max_decode_extra, 'max_len': cfg.max_len, 'rows': rows,
        'bucket_lengths': list(config.bucket_lengths), 'buckets': buckets,
        'params': list(names), 'eos_id': portable.EOS_ID, 'pad_id': portable.PAD_ID,
        'checkpoint': source.description}
    if source.source_tokenizer_path is not None:  # a shared vocabulary's manifest as it was
      manifest['source_vocab'] = portable.SOURCE_VOCAB
    text = json.dumps(manifest, indent=2) + '\n'
    _write(temp, output, portable.MANIFEST, lambda path: _write_bytes(path, text.encode()))
    _self_check(source, output, temp, platforms)
  return paths.absolute(output)


def _write_bytes(path: str, data: bytes) -> None:
  with open(path, 'wb') as f:
    f.write(data)


def _write(temp: str, output: str, name: str, write: Callable[[str], None]) -> None:
  """`write(temp/name)`; a full disk or a read-only file system raises one WorkdirError
  naming `output/name` (`new_directory` then removes `temp`: nothing partial is left)."""
  with workdir_lib.writing(os.path.join(output, name)):
    write(os.path.join(temp, name))


def export_stablehlo(workdir: str, output: str, *, checkpoint: Optional[str] = None,
                     model_variant: Optional[model.Transformer] = None) -> str:
  """Exports a run as a StableHLO artifact (see the module docstring) into the new directory
  `output`, from the averaged parameters (or `checkpoint`) with the run's decoding settings.
  `model_variant`: the run's model when it is not the paper's (`parts.py`); the artifact then
  decodes with the variant's own layers.

  Returns the absolute path of `output`; translate with `python OUTPUT/serve.py < input` or
  `ExportedTranslator(output)` from `OUTPUT/serve.py`.

  Raises:
    FileExistsError, ExportError, CheckpointError, TokenizerError: one-line reasons; nothing
      is written.
  """
  check_serialization()
  check_output(output, 'export_stablehlo: output')
  return write_artifact(load_source(workdir, checkpoint, model_variant), output,
                        argument='export_stablehlo: output')


def export_stablehlo_model(model: model.ModelLike, params, tokenizer: Any, output: str, *,
                           beam_size: int = 4, alpha: float = 0.6, max_decode_extra: int = 50,
                           batch_sentences: int = 64,
                           bucket_lengths: Sequence[int] = (16, 32, 64, 128, 256),
                           description: str = 'parameters given to export_stablehlo_model',
                           platforms: Sequence[str] = PLATFORMS,
                           length_rule: str = 'gnmt') -> str:
  """Exports `model` with `params` as a StableHLO artifact (the module docstring's, the same
  files and serve.py as `export_stablehlo` writes) into the new directory `output`.

  The artifact translates as `Translator(model, params, tokenizer, beam_size=, alpha=,
  max_decode_extra=, batch_sentences=, bucket_lengths=, length_rule=)` does: the same
  arguments, the same defaults (§6.1: beam 4, alpha 0.6, output length up to input length +
  50, the GNMT length rule).

  Args:
    model: a `Transformer`, a variant (its extension points are exported), or a
      `TransformerConfig` (the paper's model).
    params: its parameters (`init_params`'s tree; `nnx_bridge.linen_params` of an NNX module),
      exported as float32.
    tokenizer: the SentencePiece model the model was trained with: its `.model` path, or the
      `t2t_jax.data.tokenizer.Tokenizer` loaded from one; copied as spm.model. A model with
      separate vocabularies (`source_vocab_size`): a `t2t_jax.data.vocab_pair.VocabPair` of
      the two (each a path or a Tokenizer), the source's copied as source_spm.model.
    output: the directory to create (local or gs://); it must not exist.
    description: the parameters' origin, kept in manifest.json ('checkpoint').
    platforms: the lowerings in every module, among `KNOWN_PLATFORMS`.

  Before the artifact becomes `output` it translates a few sentences made of the vocabulary's
  pieces exactly as `Translator` with these settings does (`self_check`), or nothing is kept.

  Returns the absolute path of `output`.

  Raises:
    FileExistsError: `output` exists.
    ExportError: a setting, platform, model or parameter tree that cannot be exported (named
      by argument), or an artifact that translates otherwise than the model.
    TokenizerError: `tokenizer` is not a usable SentencePiece model.
    Each in one line naming the argument; nothing is written.
  """
  check_serialization()
  platforms = check_platforms(platforms, f'{_CALL}: platforms')
  argument = f'{_CALL}: output'
  check_output(output, argument)
  try:
    net = as_model(model)
  except TypeError as e:
    raise ExportError(f'{_CALL}: model: {e}') from None
  settings = _decoding_settings(beam_size, alpha, max_decode_extra, batch_sentences,
                                bucket_lengths, net.cfg.max_len, length_rule)
  _check_params(net, params)
  target_vocab, source_vocab = _vocabularies(tokenizer, net.cfg)
  source = ExportSource(settings, params, target_vocab, description, net, source_vocab)
  return write_artifact(source, output, platforms, argument)


_CALL = 'export_stablehlo_model'


def _check_params(net: model.Transformer, params) -> None:
  """Refuses `params` unless its tree holds exactly `net`'s parameters, in their shapes: the
  first missing, unexpected or misshapen one is named (rather than a KeyError or a flax
  scope error from deep inside the export)."""
  if not isinstance(params, Mapping):
    raise ExportError(f'{_CALL}: params is a {type(params).__name__}; expected the model\'s '
                      'parameter tree (init_params\' nested dict, without the {"params": ...} '
                      'wrapper)')
  expected = dict(_flat(model.param_shapes(net)))
  given = dict(_flat(params))
  missing = [p for p in expected if p not in given]
  extra = [p for p in given if p not in expected]
  shapes = [p for p in expected if p in given and tuple(np.shape(given[p])) != tuple(
      expected[p].shape)]
  if missing or extra or shapes:
    what = (f'has no {missing[0]}' if missing else f'has {extra[0]}, which the model does '
            'not use' if extra else f'{shapes[0]} is {tuple(np.shape(given[shapes[0]]))}, '
            f'the model\'s {tuple(expected[shapes[0]].shape)}')
    count = len(missing) + len(extra) + len(shapes)
    raise ExportError(f'{_CALL}: params {what}' + (f' ({count - 1} more differ)'
                                                    if count > 1 else '')
                      + '; are they the parameters of this model?')


def _flat(tree, prefix: str = ''):
  """(path 'encoder/layer_0/...', leaf) of a nested mapping."""
  for key, value in tree.items():
    if isinstance(value, Mapping):
      yield from _flat(value, f'{prefix}{key}/')
    else:
      yield f'{prefix}{key}', value


def _decoding_settings(beam_size: int, alpha: float, max_decode_extra: int,
                       batch_sentences: int, bucket_lengths: Sequence[int], max_len: int,
                       length_rule: str = 'gnmt'):
  """The run config keys `write_artifact` reads, from `Translator`'s argument names; an
  ExportError names the first value a search cannot run with, and what it expects."""
  checks = (('beam_size', beam_size, _count(beam_size, 1) or 'an int >= 1 (1: greedy)'),
            ('alpha', alpha, (isinstance(alpha, numbers.Real) and math.isfinite(alpha))
             or 'a finite number, the length penalty\'s exponent (0: none; the paper\'s 0.6)'),
            ('max_decode_extra', max_decode_extra,
             _count(max_decode_extra, 0) or 'an int >= 0 (output tokens beyond the input\'s)'),
            ('batch_sentences', batch_sentences, _count(batch_sentences, 1) or 'an int >= 1'),
            ('bucket_lengths', bucket_lengths, _bucket_problem(bucket_lengths, max_len)),
            ('length_rule', length_rule, length_rule in search.LENGTH_RULES
             or f'one of {", ".join(search.LENGTH_RULES)}'))
  for name, value, ok in checks:
    if ok is not True:
      raise ExportError(f'{_CALL}: {name}={value!r} is not a valid setting: expected {ok}')
  return types.SimpleNamespace(
      beam_size=beam_size, length_penalty_alpha=float(alpha), length_penalty_rule=length_rule,
      max_decode_extra=max_decode_extra, decode_batch_sentences=batch_sentences,
      bucket_lengths=tuple(bucket_lengths))


def _bucket_problem(bucket_lengths: Sequence[int], max_len: int) -> 'bool | str':
  """True when `bucket_lengths` can pad every batch of inputs cut to max_len - 1 tokens
  within `max_len` positions; else what a valid value is (for `_decoding_settings`)."""
  example = tuple(b for b in (16, 32, 64, 128, 256) if b < max_len) + (max_len,)
  expected = (f'a non-empty, strictly increasing sequence of ints >= 1, e.g. {example} for '
              f'the model\'s max_len {max_len}')
  try:
    buckets = tuple(bucket_lengths)
  except TypeError:
    return expected
  if not (buckets and all(_count(b, 1) for b in buckets)
          and list(buckets) == sorted(set(buckets))):
    return expected
  padded = portable.source_lengths(buckets, max_len)[-1]
  if padded <= max_len:
    return True
  below = max([b for b in buckets if b < padded], default=0)
  return (f'buckets a batch is padded to within the model\'s max_len {max_len}: a batch of '
          f'{below + 1} to {max_len - 1} tokens would be padded to {padded}; e.g. '
          f'{tuple(b for b in buckets if b < max_len) + (max_len,)}')


def _count(value, least: int) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _vocabularies(tokenizer: Any, cfg: model.TransformerConfig) -> Tuple[str, Optional[str]]:
  """(the target's path, the source's or None) of `tokenizer`: one vocabulary (`_vocabulary`),
  or a `VocabPair`'s two, each checked against its side's size. One vocabulary for a model
  with two (`cfg.source_vocab_size`), or two for a model with one, is refused."""
  from t2t_jax.data import vocab_pair
  separate = cfg.source_vocab_size is not None
  if isinstance(tokenizer, vocab_pair.VocabPair) != separate:
    raise ExportError(
        f'{_CALL}: tokenizer is a {type(tokenizer).__name__}, but the model has '
        + (f'separate vocabularies (source_vocab_size={cfg.source_vocab_size}); expected a '
           't2t_jax.data.vocab_pair.VocabPair of the source and target models' if separate
           else 'one vocabulary for both sides; expected its SentencePiece model'))
  if not separate:
    return _vocabulary(tokenizer, cfg.vocab_size), None
  return (_vocabulary(tokenizer.target, cfg.vocab_size),
          _vocabulary(tokenizer.source, cfg.input_vocab_size, 'source_vocab_size'))


def _vocabulary(tokenizer: Any, vocab_size: int, name: str = 'vocab_size') -> str:
  """The path of the SentencePiece model `tokenizer` is (or was loaded from), after loading
  it: a missing or damaged file, ids other than t2t_jax's (pad 0, EOS 1, unk 2, no BOS), or a
  piece count other than the model's vocab_size (`check_vocabulary`) is refused in the
  caller's terms (the argument, not a workdir's vocabulary)."""
  from t2t_jax.data import tokenizer as tokenizer_lib
  if isinstance(tokenizer, tokenizer_lib.Tokenizer):
    tokenizer = tokenizer.path
  elif not isinstance(tokenizer, (str, os.PathLike)):
    raise ExportError(f'{_CALL}: tokenizer is a {type(tokenizer).__name__}; '
                      'expected the SentencePiece .model path or a t2t_jax.data.tokenizer.'
                      'Tokenizer (the artifact ships the model file)')
  path = os.fspath(tokenizer)
  if not os.path.isfile(path):
    raise tokenizer_lib.TokenizerError(
        f'{_CALL}: tokenizer={path}: no such file; expected the SentencePiece .model file '
        'the model was trained with')
  try:
    size = tokenizer_lib.Tokenizer(path).vocab_size
  except tokenizer_lib.TokenizerError as e:
    what = getattr(e, 'what', None) or str(e).removeprefix(f'{path}: ').rstrip('.')
    raise tokenizer_lib.TokenizerError(
        f'{_CALL}: tokenizer={path} is not a SentencePiece model t2t_jax can use '
        f'({what})') from None
  check_vocabulary(path, size, vocab_size, f'{_CALL}: ', name)
  return path
