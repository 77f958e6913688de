"""Validation of run configurations against `configs/default.py`.

Every check runs before any computation and raises `ConfigError` naming the key, what was
expected and what was given, so a typo in `--config.key=value` fails in milliseconds.
"""

import difflib
import math
import os
from typing import Any, Iterable, Optional, Sequence, Tuple, get_args

import ml_collections
from absl import logging

from t2t_jax.configs import default as default_config
from t2t_jax import choices, corpora_spec
from t2t_jax.choices import ConfigError  # noqa: F401  (config.ConfigError, as always)
from t2t_jax.choices import compile_pattern, parse_mesh  # noqa: F401  (config.parse_mesh)

# The splits every dataset has: train, dev (WMT's 'validation') and test. Defined here, at the
# bottom of the package, so that the config imports nothing from t2t_jax.data.
SPLITS = ('train', 'dev', 'test')


# The model's enumerations are `TransformerConfig`'s Literals (`choices`), written once.
CHOICES = {
    'positional': get_args(choices.Positional),
    'norm_position': get_args(choices.NormPosition),
    'activation': get_args(choices.Activation),
    'dtype': get_args(choices.DTypeName),
    'attention_impl': ('',) + get_args(choices.AttentionImpl),
    'decode_parallelism': ('auto', 'sharded', 'threads'),
    'remat_policy': get_args(choices.RematPolicy),
    'dataset': ('wmt14_translate/de-en', 'wmt14_translate/fr-en', 'local', 'treebank'),
    'train_split': SPLITS,
    'eval_split': SPLITS,
    'final_eval_split': ('',) + SPLITS,
    'lr_schedule': ('rsqrt', 'cosine', 'linear', 'constant'),
    'best_metric': ('loss', 'bleu'),
    'best_weights': ('params', 'ema'),
    'decode_strategy': ('beam', 'greedy', 'sample'),
    'length_penalty_rule': get_args(choices.LengthRule),
}
_POSITIVE = ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'num_layers', 'max_len',
             'max_length', 'tokens_per_batch', 'warmup_steps', 'grad_accum_steps',
             'keep_checkpoints', 'log_every_steps', 'average_last', 'beam_size',
             'decode_batch_sentences', 'vocab_sample_sentences', 'learning_rate_scale',
             'adam_eps', 'max_consecutive_nonfinite', 'num_train_steps', 'nbest',
             'temperature', 'serve_max_sentences', 'serve_max_tokens', 'serve_max_body_bytes',
             'serve_max_queue')
_NON_NEGATIVE = ('d_k', 'd_v', 'num_kv_heads', 'num_encoder_layers', 'num_decoder_layers',
                 'decoder_window', 'source_vocab_size', 'weight_decay', 'aux_loss_weight',
                 'checkpoint_every_steps', 'checkpoint_every_minutes', 'eval_every_steps',
                 'eval_batches', 'eval_bleu_sentences', 'length_penalty_alpha', 'max_decode_extra',
                 'decode_threads', 'learning_rate', 'min_learning_rate', 'clip_grad_norm',
                 'keep_best', 'early_stop_patience', 'average_best', 'top_k',
                 'no_repeat_ngram_size', 'sample_seed', 'decoder_start_id', 'serve_max_wait_ms')
_PROBABILITIES = ('dropout_rate', 'attention_dropout_rate', 'label_smoothing', 'adam_b1',
                  'adam_b2', 'ema_decay')


# `config.optimizer` by name; anything else is a 'module:factory' or 'path/file.py:factory'
# spec, loaded (and its errors reported) by `training/optim.py`.
OPTIMIZERS = ('adam', 'adamw', 'adafactor')


def _check_optimizer(value: str) -> None:
  where, sep, attr = value.rpartition(':')
  if value not in OPTIMIZERS and not (sep and where and attr):
    _fail('optimizer', "one of 'adam', 'adamw', 'adafactor', or 'module:factory' or "
          "'path/file.py:factory'", value)


# The seeds and the bits jax takes them in: a key of a C long; sampling folds its seed into
# each line's key as an int32 (translate.py).
_SEEDS = (('seed', 63), ('shuffle_seed', 63), ('sample_seed', 31))


def _fail(key: str, expected: str, got: Any) -> None:
  raise ConfigError(f'config key {key!r}: expected {expected}, got {got!r}')


def unknown_keys(keys: Iterable[str]) -> None:
  """Raises ConfigError for the first key that `configs/default.py` does not define."""
  known = set(default_config.get_config().keys())
  for key in keys:
    if key not in known:
      close = difflib.get_close_matches(key, sorted(known), n=3)
      hint = f'; did you mean {", ".join(close)}?' if close else ''
      raise ConfigError(f'unknown config key {key!r}{hint} Valid keys: {", ".join(sorted(known))}')


def tuple_keys() -> frozenset:
  """The keys whose default is a tuple (`bucket_lengths`): config_flags parses them apart."""
  return frozenset(key for key, value in default_config.get_config().items()
                   if isinstance(value, tuple))


def check_override_paths(paths: Iterable[str]) -> None:
  """Raises ConfigError for a `--config.PATH=...` that configs/default.py cannot take.

  `paths` are dotted (`num_layers`, `num_layers.x`); every default key holds one plain value,
  so a sub-key is refused naming the key and the type that has none.
  """
  paths = list(paths)
  unknown_keys(path.split('.', 1)[0] for path in paths)
  defaults = default_config.get_config()
  for path in paths:
    key, _, rest = path.partition('.')
    if rest and not isinstance(defaults[key], ml_collections.ConfigDict):
      raise ConfigError(f'config key {path!r}: {key!r} holds a single '
                        f'{type(defaults[key]).__name__} and has no sub-keys; '
                        f'write --config.{key}=VALUE')


def _is_finite(value: Any) -> bool:
  try:
    return math.isfinite(value)
  except OverflowError:  # an int too large for a float
    return False


def _check_type(key: str, value: Any, reference: Any) -> None:
  if isinstance(reference, bool):
    if not isinstance(value, bool):
      _fail(key, 'a bool', value)
  elif isinstance(reference, int):
    if isinstance(value, bool) or not isinstance(value, int):
      _fail(key, 'an integer', value)
  elif isinstance(reference, float):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      _fail(key, 'a number', value)
    # No float key has a meaning at nan or +-inf (a nan length penalty decodes every line
    # to nothing), and a range check such as `value < 0` lets nan through.
    if not _is_finite(value):
      _fail(key, 'a finite number', value)
  elif isinstance(reference, str):
    if not isinstance(value, str):
      _fail(key, 'a string', value)
  elif isinstance(reference, (tuple, list)):
    if not isinstance(value, (tuple, list)):
      _fail(key, 'a sequence', value)


def _check_buckets(buckets: Sequence[int], max_length: int) -> None:
  if not buckets or any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in buckets):
    _fail('bucket_lengths', 'a non-empty sequence of positive integers', buckets)
  if list(buckets) != sorted(set(buckets)):
    _fail('bucket_lengths', 'strictly increasing lengths', buckets)
  if buckets[-1] < max_length:
    _fail('bucket_lengths', f'a largest bucket >= max_length={max_length}', buckets)


def check_config_dict(where: str, config: Any) -> None:
  """TypeError unless `config` is a run config (an `ml_collections.ConfigDict`), for the
  public functions that take one (`validate`, `make_optimizer`, `make_plan`)."""
  if not isinstance(config, ml_collections.ConfigDict):
    raise TypeError(f'{where}: config is a {type(config).__name__}; expected an '
                    'ml_collections.ConfigDict (configs/default.py get_config(), or a preset)')


def validate(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Checks every key and value of `config`; returns it unchanged or raises ConfigError
  (TypeError for what is no ConfigDict at all)."""
  check_config_dict('validate', config)
  unknown_keys(config.keys())
  reference = default_config.get_config()
  for key in config.keys():
    _check_type(key, config[key], reference[key])
  for key, allowed in CHOICES.items():
    if config[key] not in allowed:
      _fail(key, 'one of ' + ', '.join(repr(c) for c in allowed), config[key])
  for key in _POSITIVE:
    if not config[key] > 0:
      _fail(key, 'a value > 0', config[key])
  for key in _NON_NEGATIVE:
    if config[key] < 0:
      _fail(key, 'a value >= 0', config[key])
  for key in _PROBABILITIES:
    if not 0.0 <= config[key] < 1.0:
      _fail(key, 'a value in [0, 1)', config[key])
  _check_model_options(config)
  if (not config.d_k or not config.d_v) and config.d_model % config.num_heads:
    _fail('d_model', f'a multiple of num_heads={config.num_heads} (or set d_k and d_v)',
          config.d_model)
  if config.num_kv_heads and config.num_heads % config.num_kv_heads:
    _fail('num_kv_heads', f'0 or a divisor of num_heads={config.num_heads}', config.num_kv_heads)
  if config.treebank_dir and config.dataset != 'treebank':
    # Most likely a forgotten --config.dataset=treebank: the run would train on other data.
    _fail('treebank_dir', f"'' unless dataset='treebank' (dataset is {config.dataset!r})",
          config.treebank_dir)
  corpora_spec.check(config)
  _check_best(config)
  _check_decoding(config)
  _check_schedule_and_seeds(config)
  if config.vocab_model and config.init_from:
    _fail('vocab_model', "'' with init_from, which takes the source run's vocabulary",
          config.vocab_model)
  _check_optimizer(config.optimizer)
  if config.trainable:
    compile_pattern(config.trainable)
  choices.check_run_syntax(config)  # mesh, profile_steps, writers
  _check_buckets(tuple(config.bucket_lengths), config.max_length)
  # One row of the largest bucket a run uses (the first >= max_length, as
  # `pipeline.bucket_rows` picks) must fit the batch, or the pipeline refuses it after the
  # data is prepared and the vocabulary trained; the device count is checked by `train`.
  largest = next(b for b in config.bucket_lengths if b >= config.max_length)
  if config.tokens_per_batch < largest:
    _fail('tokens_per_batch', f'at least {largest}, one row of the largest bucket used (the '
          f'first of bucket_lengths >= max_length={config.max_length})',
          config.tokens_per_batch)
  if config.bucket_lengths[-1] > config.max_len:
    _fail('max_len', f'>= the largest bucket length {config.bucket_lengths[-1]}', config.max_len)
  if any(isinstance(s, bool) or not isinstance(s, int) or s < 0
         for s in config.debug_nonfinite_steps):
    _fail('debug_nonfinite_steps', 'a tuple of step numbers >= 1 (or (0,) for none)',
          config.debug_nonfinite_steps)
  return config


def _check_model_options(config: ml_collections.ConfigDict) -> None:
  """The options of models made elsewhere (`attention_bias`, ...): an epsilon and a start id
  the model can take, a language-token pattern that names the language."""
  if not 0.0 < config.layer_norm_epsilon < 1.0:
    _fail('layer_norm_epsilon', 'a value in (0, 1)', config.layer_norm_epsilon)
  if config.decoder_start_id >= config.vocab_size:
    _fail('decoder_start_id', f'an id below vocab_size={config.vocab_size}',
          config.decoder_start_id)
  if config.language_tokens and config.language_tokens.count('{lang}') != 1:
    _fail('language_tokens', "'' or a pattern with one {lang}, e.g. '__{lang}__'",
          config.language_tokens)


def fit_buckets(config: ml_collections.ConfigDict) -> None:
  """Cuts `bucket_lengths` and `max_length` that the defaults left longer than the model's
  `max_len` (an imported or adopted model with fewer positions) to it, in place."""
  if config.bucket_lengths[-1] > config.max_len:
    config.bucket_lengths = tuple(b for b in config.bucket_lengths if b < config.max_len) + (
        config.max_len,)
    config.max_length = min(config.max_length, config.max_len)


def paper_peak(d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
  """The peak of the paper's schedule (§5.3, eq. 3, at step = warmup_steps):
  scale * (d_model * warmup_steps)^-0.5 (6.99e-4 for the base model)."""
  return float(scale) * (float(d_model) * float(warmup_steps)) ** -0.5


def _check_best(config: ml_collections.ConfigDict) -> None:
  """What keep_best and early stopping rank: a dev BLEU that is decoded, weights kept."""
  ranks = config.keep_best or config.early_stop_patience
  if (config.best_metric == 'bleu' and ranks and config.eval_every_steps
      and not config.eval_bleu_sentences):
    _fail('best_metric', "'loss', or 'bleu' with eval_bleu_sentences > 0 (no dev BLEU is "
          'decoded without it)', config.best_metric)
  if config.best_weights == 'ema' and ranks and not config.ema_decay:
    _fail('best_weights', "'params', or 'ema' with ema_decay > 0 (no moving average of the "
          'weights is kept without it)', config.best_weights)


def _check_schedule_and_seeds(config: ml_collections.ConfigDict) -> None:
  """A seed jax cannot take (an int32). (A warmup longer than the run is allowed with every
  schedule: a short trial of the embedded default, cosine since issue 65, only warms up, as
  eq. 3 does; the optimizer line says so.)"""
  for key, top in _SEEDS:
    if config[key] >= 2 ** top:
      _fail(key, f'a value below 2^{top}', config[key])


def _check_decoding(config: ml_collections.ConfigDict) -> None:
  """The decoding keys that cannot hold together: a list longer than the beam, a nucleus
  outside (0, 1]."""
  if not 0.0 < config.top_p <= 1.0:
    _fail('top_p', 'a value in (0, 1] (1.0: no nucleus cut)', config.top_p)
  if config.decode_strategy == 'beam' and config.nbest > config.beam_size:
    _fail('nbest', f'at most beam_size={config.beam_size} with beam search (a longer list '
          'needs a wider beam)', config.nbest)
  if config.decode_strategy == 'greedy' and config.nbest > 1:
    _fail('nbest', "1 with decode_strategy='greedy' (several samples: 'sample')", config.nbest)


# Keys that fix the parameter shapes (or what they compute: `model`, `decoder_window`): a
# checkpoint's values win and overrides are refused.
MODEL_KEYS = ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'num_kv_heads', 'd_k', 'd_v',
              'num_layers', 'num_encoder_layers', 'num_decoder_layers', 'share_embeddings',
              'scale_embeddings', 'positional', 'norm_position', 'max_len', 'decoder_window',
              'model', 'share_vocab', 'share_tokenizer', 'language_tokens', 'source_vocab_size', 'activation', 'attention_bias',
              'logits_bias', 'layer_norm_epsilon', 'decoder_start_id')


# The keys that name a local folder or file a run reads; `absolute_paths` resolves them.
PATH_KEYS = ('local_corpus_dir', 'treebank_dir', 'data_dir', 'vocab_model', 'source_vocab_model',
             'vocab_from')
# The keys that may name a factory 'path/to/file.py:factory'; its file is made absolute.
FACTORY_KEYS = ('model', 'optimizer')


def absolute_path(path: str) -> str:
  """`path` made absolute against the current folder ('~' expanded); '' and URIs (gs://...)
  as given."""
  if not path or '://' in path:
    return path
  return os.path.abspath(os.path.expanduser(path))


def absolute_model(spec: str) -> str:
  """`--config.model` with the file of a 'path/to/file.py:factory' spec made absolute; a
  module spec ('my_variants:f', found on sys.path) and '' as given."""
  where, sep, attr = spec.rpartition(':')
  if not sep or not (where.endswith('.py') or '/' in where or os.sep in where):
    return spec
  return f'{absolute_path(where)}:{attr}'


def init_from_parts(spec: str) -> Tuple[str, Optional[str]]:
  """(workdir, checkpoint) of `--config.init_from`: 'WORKDIR' (checkpoint None: its newest
  average, else its last checkpoint), 'WORKDIR:STEP', 'WORKDIR:best' or 'WORKDIR:ema'."""
  where, sep, which = spec.rpartition(':')
  if sep and where and (which.isdigit() or which in ('best', 'ema')):
    return where, which
  return spec, None


def absolute_value(key: str, value: Any) -> Any:
  """`value` of `key` as `absolute_paths` stores it (other keys' values as given)."""
  if key in PATH_KEYS and isinstance(value, str):
    return absolute_path(value)
  if key == 'corpora' and isinstance(value, str):
    return corpora_spec.absolute(value, absolute_path)
  if key == 'init_from' and isinstance(value, str) and value:
    where, which = init_from_parts(value)
    return absolute_path(where) + (f':{which}' if which else '')
  return absolute_model(value) if key in FACTORY_KEYS and isinstance(value, str) else value


def absolute_paths(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A copy of `config` whose `PATH_KEYS` and `model` file are absolute, as a run stores them
  when it starts: its checkpoints then name the files it read, and eval or decode run from
  another folder read those, not that folder's files of the same relative name."""
  config = ml_collections.ConfigDict(config.to_dict())
  config.writers = ','.join(choices.parse_writers(config.writers))  # as recorded: no spaces
  for key in PATH_KEYS + FACTORY_KEYS + ('init_from',):
    if key in config:
      config[key] = absolute_value(key, config[key])
  if config.get('corpora'):  # every entry's pair written out: a run's record of its mixture
    config.corpora = corpora_spec.absolute(config.corpora, absolute_path, config.source_lang,
                                           config.target_lang)
  return config


def obsolete_keys(values: dict) -> list:
  """The keys of a saved config (`values`) that `configs/default.py` no longer defines."""
  known = set(default_config.get_config().keys())
  return sorted(key for key in values if key not in known)


def warn_obsolete_keys(values: dict, source: str) -> None:
  """One warning naming `source` (a checkpoint) and the keys of its saved config this version
  does not define: they are ignored, by every mode alike (resume, eval, decode, ...)."""
  obsolete = obsolete_keys(values)
  if obsolete:
    logging.warning('%s: its saved config has %s %s, which this version does not define; '
                    'ignored (a key the code no longer reads cannot change the model)', source,
                    'keys' if len(obsolete) > 1 else 'key', ', '.join(map(repr, obsolete)))


def from_json(values: dict, source: str = 'the checkpoint') -> ml_collections.ConfigDict:
  """A validated config from the JSON a checkpoint stores (lists back to tuples).

  A key this version does not define (removed since the checkpoint was written; the user
  never typed it) is dropped with one warning naming `source`, as resuming does; a saved
  value this version refuses is a ConfigError naming `source`.
  """
  warn_obsolete_keys(values, source)
  config = default_config.get_config()
  for key, value in values.items():
    if key in config:
      config[key] = tuple(value) if isinstance(config[key], tuple) else value
  try:
    return validate(config)
  except ConfigError as e:
    raise ConfigError(f'{source}: its saved config: {e}') from None


def apply_overrides(base: ml_collections.ConfigDict, source: ml_collections.ConfigDict,
                    keys: Iterable[str]) -> ml_collections.ConfigDict:
  """Copies `keys` from `source` (the command line) onto `base` (a checkpoint's config).

  Refuses model-shape keys, which the checkpoint fixes.
  """
  for key in keys:
    if key in MODEL_KEYS and absolute_value(key, source[key]) != absolute_value(key, base[key]):
      raise ConfigError(f'config key {key!r} is fixed by the checkpoint ({base[key]!r}); '
                        f'got {source[key]!r}. Only inference and data keys can be overridden.')
    base[key] = source[key]
  return validate(base)
