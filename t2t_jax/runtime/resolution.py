"""A run's config resolved once, into the canonical form every mode uses.

`resolve` is the one step between what a user wrote (`configs/*.py` and `--config.KEY=VALUE`)
and everything that runs:

* every defaulted value is derived and written out, by the model's own rules
  (`TransformerConfig`): the encoder's and the decoder's depth, the key/value heads, the
  per-head widths d_k and d_v; `num_layers` is then the depth of both stacks when they agree,
  else the shorthand as given (compared nowhere: both depths are written out);
* a key that the run's other settings make ineffective (`weight_decay` with Adam) is refused
  when given on the command line, else warned about, and recorded at its default
  (`key_table.no_effect`);
* a `--config.model` factory's settings (a window, a head count it sets) are reconciled with the
  keys: a key the command line gives and the factory sets otherwise is an error naming both;
  one that a config file set is taken from the factory with a warning;
* the peak of a warmup-then-decay `lr_schedule` is written out as `learning_rate`, and
  `vocab_size` is a given `vocab_model`'s piece count (`source_vocab_size` a
  `source_vocab_model`'s; with `share_vocab=False` and none given, 0 becomes vocab_size),
  and separate vocabularies' keys are checked together (`_check_vocabularies`);
* paths are absolute (`config.absolute_paths`).

The result is what a training checkpoint records, what resuming compares (`checkpoint.py`),
what eval, decode, average, attention and export build from (`with_overrides`), and what
`--mode=info` prints, every key of it. Equivalent spellings resolve alike (`num_layers=1` and
`num_encoder_layers=1 num_decoder_layers=1`), so neither blocks the other's resume.
Resolving is idempotent; a saved config (`from_saved`, any version's) resolves without
warnings, and one whose factory cannot be loaded here keeps its recorded values (the mode that
needs the factory says why it cannot load it).
"""

from typing import Any, Dict, Iterable, List, Optional, Tuple

import ml_collections
from absl import logging
from etils import epath

from t2t_jax import config as config_lib
from t2t_jax import key_table
from t2t_jax.choices import ConfigError
from t2t_jax.configs import default as default_config
from t2t_jax.model import variant
from t2t_jax.model.transformer_config import TransformerConfig
from t2t_jax.storage import layout

# Derived keys (0 in a config: follow) and the keys they follow.
DERIVED = {
    'num_encoder_layers': ('num_layers',),
    'num_decoder_layers': ('num_layers',),
    'num_kv_heads': ('num_heads',),
    'd_k': ('d_model', 'num_heads'),
    'd_v': ('d_model', 'num_heads'),
}


def model_settings(cfg: TransformerConfig) -> Dict[str, Any]:
  """The config keys a model config fixes, as the canonical form writes them (derived values
  out; `num_layers` the depth of both stacks when they agree, else as given: the shorthand,
  which `differences` does not compare; no window 0, the backend's attention '')."""
  return dict(
      vocab_size=cfg.vocab_size, d_model=cfg.d_model, d_ff=cfg.d_ff, num_heads=cfg.num_heads,
      num_kv_heads=cfg.kv_heads, d_k=cfg.d_k, d_v=cfg.d_v,
      num_layers=(cfg.encoder_layers if cfg.encoder_layers == cfg.decoder_layers
                  else cfg.num_layers),
      num_encoder_layers=cfg.encoder_layers, num_decoder_layers=cfg.decoder_layers,
      decoder_window=cfg.decoder_window or 0, share_embeddings=cfg.share_embeddings,
      scale_embeddings=cfg.scale_embeddings, dropout_rate=cfg.dropout_rate,
      attention_dropout_rate=cfg.attention_dropout_rate, positional=cfg.positional,
      norm_position=cfg.norm_position, max_len=cfg.max_len, dtype=cfg.dtype.name,
      attention_impl=cfg.attention_impl or '', remat_policy=cfg.remat_policy,
      scan_layers=cfg.scan_layers, share_vocab=cfg.source_vocab_size is None,
      source_vocab_size=cfg.source_vocab_size or 0, activation=cfg.activation,
      attention_bias=cfg.attention_bias, logits_bias=cfg.logits_bias,
      layer_norm_epsilon=cfg.layer_norm_epsilon, decoder_start_id=cfg.decoder_start_id)


def _copy(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(config.to_dict())


def _drop_no_effect(config: ml_collections.ConfigDict, explicit: set, quiet: bool) -> None:
  defaults = default_config.get_config()
  for key, because, why in key_table.no_effect(config):
    # Refused when typed against the config's own settings; only warned about when the key
    # that makes it ineffective was typed too (common flags, and one that turns a feature off).
    if key in explicit and not explicit & set(because):
      raise ConfigError(f'config key {key!r}={config[key]!r} has no effect: {why}; drop it')
    if not quiet:
      logging.warning('config key %r=%r has no effect (%s); the run records its default %r',
                      key, config[key], why, defaults[key])
    config[key] = defaults[key]


def _vocab_size_of_model(config: ml_collections.ConfigDict, explicit: set,
                         model_key: str = 'vocab_model', size_key: str = 'vocab_size',
                         provenance: bool = False) -> None:
  """`vocab_size` follows a given `vocab_model` (`source_vocab_size` a `source_vocab_model`):
  its piece count, unless the command line gives another (an error naming both).
  `provenance`: the run has a checkpoint, whose workdir holds the vocabulary: a file no longer
  where it was is no error (the size is the recorded one)."""
  if not config[model_key]:
    return
  from t2t_jax.data import tokenizer  # pylint: disable=import-outside-toplevel  (sentencepiece)
  given = f'--config.{model_key}={config[model_key]}'
  try:
    pieces = tokenizer.Tokenizer(config[model_key]).vocab_size
  except FileNotFoundError:
    if provenance:
      return
    raise ConfigError(f'{given} cannot be read (no such file)') from None
  except OSError as e:
    raise ConfigError(f'{given} cannot be read ({type(e).__name__}: {e})') from None
  except tokenizer.TokenizerError as e:  # not the advice to a workdir's owner: a given file
    raise ConfigError(f'{given} is not a SentencePiece model t2t_jax can use '
                      f'({getattr(e, "what", None) or e})') from None
  if pieces != config[size_key] and size_key in explicit:
    raise ConfigError(f'{given} has {pieces} pieces, but the command line gives '
                      f'--config.{size_key}={config[size_key]}; drop one of the two')
  config[size_key] = pieces


def _take_vocab_from(config: ml_collections.ConfigDict) -> None:
  """`vocab_from=W` is `vocab_model=W/vocab/spm.model` (with `share_vocab=False`, also
  `source_vocab_model=W/vocab/source_spm.model`): another run's vocabulary, taken as it is. A
  `vocab_model` or `init_from` beside it is refused unless it is what W gives (a recorded
  config has both; once W has moved or gone, the recorded copy in the workdir serves)."""
  if not config.get('vocab_from'):
    return
  if config.init_from:
    raise ConfigError(f'--config.vocab_from={config.vocab_from} with --config.init_from, which '
                      "takes its source run's vocabulary: drop vocab_from")
  run = layout.of(config.vocab_from)
  if not epath.Path(run.vocab).is_file():
    if config.vocab_model:  # a recorded run's: its workdir holds the vocabulary
      return
    raise ConfigError(f'--config.vocab_from={config.vocab_from}: {run.vocab} cannot be read (no '
                      'such file): expected the workdir of a run with a vocabulary')
  given = {'vocab_model': run.vocab}
  if not config.share_vocab:
    given['source_vocab_model'] = run.source_vocab
  for key, path in given.items():
    if config[key] and config[key] != path:
      raise ConfigError(f'--config.vocab_from={config.vocab_from} gives {key}={path}; '
                        f'--config.{key}={config[key]} says otherwise: drop one')
  config.update(given)


def _check_vocabularies(config: ml_collections.ConfigDict) -> None:
  """Separate vocabularies (`share_vocab=False`): untied embeddings, and the two given models
  together or neither (one given and one trained would be two vocabularies of other data);
  likewise the two models of one vocabulary (`share_tokenizer=False`)."""
  if config.share_vocab and config.share_tokenizer:
    return
  if not config.share_vocab and config.share_embeddings:
    raise ConfigError('--config.share_vocab=False needs --config.share_embeddings=False: one '
                      'matrix cannot embed two vocabularies (§3.4 ties source, target and '
                      'pre-softmax weights of one shared vocabulary)')
  if config.source_vocab_model and config.init_from:
    raise ConfigError("config key 'source_vocab_model': expected '' with init_from, which "
                      f"takes the source run's vocabularies, got {config.source_vocab_model!r}")
  if bool(config.vocab_model) != bool(config.source_vocab_model):
    key, other = (('vocab_model', 'source_vocab_model') if config.source_vocab_model
                  else ('source_vocab_model', 'vocab_model'))
    raise ConfigError(f'config key {key!r}: expected a SentencePiece .model with share_vocab='
                      f'False and --config.{other} (the two sides are given together, or both '
                      f'trained), got {config[key]!r}')


def _derive_peak(config: ml_collections.ConfigDict) -> None:
  """Writes out the peak of a warmup-then-decay schedule: `learning_rate` 0 is the paper's
  peak, whose `learning_rate_scale` is then folded in (recorded as 1.0)."""
  if config.lr_schedule == 'rsqrt':
    return
  if not config.learning_rate:
    config.learning_rate = config_lib.paper_peak(config.d_model, config.warmup_steps,
                                                 config.learning_rate_scale)
    config.learning_rate_scale = 1.0
  if config.min_learning_rate > config.learning_rate:
    raise ConfigError(f'config key \'min_learning_rate\': expected at most the peak '
                      f'learning_rate={config.learning_rate:g}, got {config.min_learning_rate!r}')


def _factory_settings(config: ml_collections.ConfigDict) -> Dict[str, Any]:
  """`model_settings` of the model `config.model`'s factory builds from `config`."""
  return model_settings(variant.build(config.model, TransformerConfig.from_config(config)).cfg)


def _adopt_factory(config: ml_collections.ConfigDict, explicit: set, quiet: bool,
                   written: set) -> None:
  """Takes the settings `config.model`'s factory sets into `config` (see the module doc);
  `written`: the keys the config set to other than their default (only these are warned
  about when the factory changes them)."""
  spec = config.model
  settings = _factory_settings(config)
  changed = {k: v for k, v in settings.items() if v != config[k]}
  if not changed:
    return
  given = sorted(k for k in changed if k in explicit)
  if given:
    theirs = ', '.join(f'{k}={changed[k]!r}' for k in given)
    ours = ' '.join(f'--config.{k}={config[k]!r}' for k in given)
    raise ConfigError(f'--config.model={spec} sets {theirs}, but the command line gives {ours}; '
                      'drop one of the two')
  overruled = sorted(k for k in changed if k in written)
  if overruled and not quiet:
    logging.warning('--config.model=%s sets %s; the run records the factory\'s values', spec,
                    ', '.join(f'{k}={changed[k]!r} (the config: {config[k]!r})'
                              for k in overruled))
  for key, value in changed.items():
    config[key] = value
  again = _factory_settings(config)
  moved = {k: v for k, v in again.items() if v != config[k]}
  if moved:
    detail = ', '.join(f'{k}={config[k]!r} becomes {v!r}' for k, v in sorted(moved.items()))
    raise ConfigError(f'--config.model={spec} changes what it is given again ({detail}): a '
                      'factory must set fixed values (cfg.replace(num_heads=16)), not ones '
                      'computed from the same field, so that the recorded config rebuilds the '
                      'trained model')


def resolve(config: ml_collections.ConfigDict, explicit: Iterable[str] = (), *,
            saved: bool = False, recorded: bool = False) -> ml_collections.ConfigDict:
  """The canonical form of a run config (see the module doc); `config` is not changed.

  Args:
    config: a run config (`configs/default.py` keys).
    explicit: the keys the command line gave (`--config.KEY=VALUE`); only these are refused
      for having no effect or for disagreeing with the model factory.
    saved: `config` was read from a checkpoint: nothing is warned about, and a factory that
      cannot be loaded (or resolved) here leaves the recorded model keys as they are.
    recorded: `config` is a run's that has a checkpoint: a checkpoint's with the command
      line's `explicit` keys put in (`with_overrides`), or a command line resuming one. As
      `saved` for the files it names (a `vocab_model` is read only when given again, and is
      no error when gone: the workdir holds the vocabulary), as a command line's for keys.

  Raises:
    ConfigError: an invalid value, a command-line key that has no effect or that the model
      factory sets otherwise, or a factory that names no usable model (`VariantError`).
  """
  config_lib.check_config_dict('resolve', config)
  config = config_lib.absolute_paths(config_lib.validate(config))
  _take_vocab_from(config)
  _check_vocabularies(config)
  explicit = set(explicit)
  _drop_no_effect(config, explicit, quiet=saved)
  defaults = default_config.get_config()
  written = {k for k in config.keys() if config[k] != defaults[k]}
  # A recorded run's sizes are its record; the vocabulary files it names are provenance,
  # read only when the command line names one again.
  for model_key, size_key in (('vocab_model', 'vocab_size'),
                              ('source_vocab_model', 'source_vocab_size')):
    if (model_key == 'vocab_model' or not (config.share_vocab and config.share_tokenizer)) and (
        not (saved or recorded) or model_key in explicit):
      _vocab_size_of_model(config, explicit, model_key, size_key, saved or recorded)
  config.update(model_settings(TransformerConfig.from_config(config)))
  _derive_peak(config)
  if config.model:
    recorded = _copy(config)
    try:
      _adopt_factory(config, explicit, quiet=saved, written=written)
    except ConfigError:
      if not saved:
        raise
      return recorded
  return config_lib.validate(config)


def from_saved(values: Dict[str, Any], source: str = 'the checkpoint'
               ) -> ml_collections.ConfigDict:
  """The canonical form of the config JSON a checkpoint stores (`config.from_json`)."""
  return resolve(config_lib.from_json(values, source), saved=True)


def same_model(saved: str, spec: str, model_source: Optional[Dict[str, Any]]) -> bool:
  """Whether `--config.model` values `saved` (a checkpoint's) and `spec` name the same model:
  the same spec, or the same factory in a file moved with its content (`model_source`, the
  checkpoint's record of it, has the sha256 of the file `spec` names)."""
  if config_lib.absolute_model(saved) == config_lib.absolute_model(spec):
    return True
  return variant.same_source(model_source, saved, spec)


def differences(base: ml_collections.ConfigDict, config: ml_collections.ConfigDict,
                keys: Iterable[str], model_source: Optional[Dict[str, Any]] = None
                ) -> List[Tuple[str, Any, Any]]:
  """[(key, base's value, config's value)] for each of `keys` that differs between two
  canonical configs; `model` compares by content (`same_model`)."""
  out = []
  for key in keys:
    if key == 'num_layers':  # the shorthand: both depths are written out and compared
      continue
    a, b = base[key], config[key]
    if key == 'model':
      if not same_model(a, b, model_source):
        out.append((key, a, b))
    elif config_lib.absolute_value(key, a) != config_lib.absolute_value(key, b):
      out.append((key, a, b))
  return out


# Keys whose change makes an existing checkpoint unusable for this run: the parameter shapes,
# the optimizer (its state is another tree), or the data order and batch shapes the saved
# iterator position refers to.
RESUME_KEYS = config_lib.MODEL_KEYS + (
    'optimizer', 'dataset', 'source_lang', 'target_lang', 'local_corpus_dir', 'treebank_dir', 'train_split',
    'max_length', 'tokens_per_batch', 'bucket_lengths', 'shuffle_seed', 'pack_examples',
    'grad_accum_steps', 'trainable', 'ema_decay',
    # best/ holds the K best by this metric of these weights; another would rank them against
    # other numbers.
    'best_metric', 'best_weights')
# Keys whose change on resume is allowed but changes what the resumed steps do: named in a
# warning (the learning-rate schedule from here on is not the one the run started with).
SCHEDULE_KEYS = ('lr_schedule', 'learning_rate', 'learning_rate_scale', 'warmup_steps',
                 'min_learning_rate')


def incompatible_keys(saved: Dict[str, Any], config: ml_collections.ConfigDict,
                      keys=RESUME_KEYS, model_source: Optional[Dict[str, Any]] = None,
                      paths_by_content: bool = False) -> List[Tuple[str, Any, Any]]:
  """[(key, saved value, current value)] for every `keys` entry that differs between the
  canonical forms (`resolve`) of `saved` (a checkpoint's config JSON, any version's:
  a key it lacks has its default) and `config`, so that equivalent spellings agree.

  A `--config.model` file moved with its content is the same model (`model_source`: the
  checkpoint's record of it). `paths_by_content`: the data folders (`config.PATH_KEYS`) are
  left out, as the data fingerprint compares what they hold; a corpus moved byte-identical
  then resumes.
  """
  obsolete = set(config_lib.obsolete_keys(saved))  # warned about by the caller (`_refusal`)
  saved_config = from_saved({k: v for k, v in saved.items() if k not in obsolete},
                                       'the checkpoint')
  current = resolve(config, saved=True)
  if paths_by_content:
    keys = [k for k in keys if k not in config_lib.PATH_KEYS]
  return differences(saved_config, current, keys, model_source)


def warn_schedule_change(saved: Dict[str, Any], config: ml_collections.ConfigDict,
                         step: int) -> None:
  """One warning naming each `SCHEDULE_KEYS` key a resumed run changes from its checkpoint's
  (`saved`, at `step`): the rate from here on is not the one the run started with."""
  changed = incompatible_keys(saved, config, keys=SCHEDULE_KEYS)
  if changed:
    logging.warning('the learning-rate schedule changes at step %d: %s', step, '; '.join(
        f'{k}: {a!r} then, {b!r} now' for k, a, b in changed))


def with_overrides(saved: ml_collections.ConfigDict, source: ml_collections.ConfigDict,
                   keys: Iterable[str], model_source: Optional[Dict[str, Any]] = None
                   ) -> ml_collections.ConfigDict:
  """`saved` (a checkpoint's canonical config) with the command line's `keys` taken from
  `source`, resolved: what eval, decode, average, attention, export and info run.

  A derived key follows a key the command line gives (`--config.num_layers=2` sets both
  depths), unless given too. The model the checkpoint fixes (`config.MODEL_KEYS`) cannot
  change: a `--config.model` file moved with its content is accepted (`same_model`).

  Raises:
    ConfigError: naming the command-line keys that would change the model, with the
      checkpoint's value and theirs; or as `resolve`.
  """
  keys = list(dict.fromkeys(keys))
  base = resolve(saved, saved=True)
  candidate = _copy(base)
  for key in keys:
    candidate[key] = source[key]
  for key, follows in DERIVED.items():  # follows a key given anew (not one given as it was)
    if key not in keys and any(k in keys and candidate[k] != base[k] for k in follows):
      candidate[key] = 0
  resolved = resolve(candidate, explicit=keys, recorded=True)
  changed = differences(base, resolved, config_lib.MODEL_KEYS, model_source)
  if changed:
    names = {k for k, _, _ in changed}
    # The keys given that changed, or that a changed derived key follows.
    given = [k for k in keys if k in names or any(k in DERIVED.get(n, ()) for n in names)]
    given = given or sorted(names)
    detail = '; '.join(f'{k}: checkpoint {a!r}, command line {b!r}'
                       + (_content(model_source, b) if k == 'model' else '')
                       for k, a, b in changed)
    raise ConfigError(f'config key{"s" if len(given) > 1 else ""} '
                      f'{", ".join(map(repr, given))} would change the model fixed by the '
                      f'checkpoint ({detail}). Only inference and data keys can be overridden.')
  return resolved


def _content(model_source: Optional[Dict[str, Any]], spec: str) -> str:
  """' (...)' saying that a `--config.model` file differs from the recorded one by content
  (both sha256), when both are known: what makes it another model, not its new place."""
  recorded = (model_source or {}).get('sha256')
  now = variant.file_sha256(spec)
  if not recorded or not now or now == recorded:
    return ''
  return f' (its file holds other code: sha256 {recorded[:12]}... recorded, {now[:12]}... now)'


def describe(config: ml_collections.ConfigDict) -> str:
  """Every key of a canonical config, one `key = value` line each (sorted, as ConfigDict
  keeps them): what `--mode=info` prints (`configs/default.py` says what each means)."""
  width = max(map(len, config.keys()))
  return 'config (resolved):\n' + '\n'.join(f'  {key:<{width}} = {config[key]!r}'
                                            for key in sorted(config.keys()))
