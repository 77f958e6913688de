"""The run's config resolved once (`runtime/resolution.py`): derived values written out, equal
models spelt alike, keys that do nothing and factory conflicts named, overrides on a saved run
checked against the model it fixes, a moved factory file accepted by its content."""

import logging
import os

import pytest

from t2t_jax import config as config_lib
from t2t_jax.configs import default
from t2t_jax.model import variant
from t2t_jax.runtime import checkpoint, resolution

WINDOW = 'import t2t_jax\n\ndef win(cfg):\n  return t2t_jax.Transformer(cfg.replace(decoder_window=8))\n'


def _config(**values):
  config = default.get_config()
  config.update(dict(vocab_size=64, d_model=32, d_ff=64, num_heads=4, max_len=64,
                     max_length=32, bucket_lengths=(16, 32), tokens_per_batch=256))
  config.update(values)
  return config


@pytest.fixture
def factory_file(tmp_path):
  path = tmp_path / 'myvar.py'
  path.write_text(WINDOW)
  return str(path)


def test_every_derived_value_is_written_out():
  resolved = resolution.resolve(_config(num_layers=3, num_decoder_layers=2, num_kv_heads=2))
  assert (resolved.num_encoder_layers, resolved.num_decoder_layers, resolved.num_layers) == (
      3, 2, 3)  # num_layers as given: the two depths differ
  assert (resolved.d_k, resolved.d_v, resolved.num_kv_heads) == (8, 8, 2)
  paper = resolution.resolve(_config())
  assert (paper.num_encoder_layers, paper.num_decoder_layers, paper.num_kv_heads) == (6, 6, 4)


@pytest.mark.parametrize('one, other', [
    (dict(num_layers=1), dict(num_encoder_layers=1, num_decoder_layers=1)),
    (dict(num_layers=2, num_decoder_layers=1), dict(num_encoder_layers=2, num_decoder_layers=1)),
    (dict(num_kv_heads=0), dict(num_kv_heads=4)),
    (dict(d_k=0, d_v=0), dict(d_k=8, d_v=8)),
])
def test_equivalent_spellings_resolve_alike_and_resume_each_other(one, other):
  a, b = resolution.resolve(_config(**one)), resolution.resolve(_config(**other))
  assert resolution.differences(a, b, a.keys()) == []  # num_layers, the shorthand, is not one
  assert checkpoint.incompatible_keys(checkpoint.config_to_json(_config(**one)),
                                      _config(**other)) == []


def test_resolving_is_idempotent_and_leaves_its_argument_alone():
  config = _config(num_layers=2, num_decoder_layers=1)
  once = resolution.resolve(config)
  assert resolution.resolve(once) == once
  assert config.num_encoder_layers == 0  # the caller's config is not changed


def test_a_factory_window_is_recorded_and_a_conflicting_key_is_refused(factory_file, caplog):
  config = _config(model=f'{factory_file}:win')
  resolved = resolution.resolve(config)
  assert resolved.decoder_window == 8
  assert variant.from_config(resolved).cfg.decoder_window == 8  # the record rebuilds it
  with pytest.raises(config_lib.ConfigError, match=(
      r'^--config.model=.*myvar.py:win sets decoder_window=8, but the command line gives '
      r'--config.decoder_window=16; drop one of the two$')):
    resolution.resolve(_config(model=f'{factory_file}:win', decoder_window=16),
                       explicit=['model', 'decoder_window'])
  # Set in a config file rather than typed: the factory's value, with a warning naming both.
  with caplog.at_level(logging.WARNING):
    assert resolution.resolve(_config(model=f'{factory_file}:win', decoder_window=16)
                              ).decoder_window == 8
  assert 'sets decoder_window=8 (the config: 16)' in caplog.text


def test_a_factory_that_changes_what_it_is_given_again_is_refused(tmp_path):
  (tmp_path / 'grow.py').write_text('import t2t_jax\n\ndef f(cfg):\n  return t2t_jax.Transformer('
                                    'cfg.replace(d_ff=cfg.d_ff * 2))\n')
  with pytest.raises(config_lib.ConfigError, match=r'changes what it is given again \(d_ff=128 '
                     r'becomes 256\)'):
    resolution.resolve(_config(model=f'{tmp_path}/grow.py:f'))
  # A checkpoint of one keeps its recorded values (the factory rebuilds what it trained).
  saved = resolution.resolve(_config(model=f'{tmp_path}/grow.py:f'), saved=True)
  assert saved.d_ff == 64


@pytest.mark.parametrize('values, key, why', [
    (dict(weight_decay=0.1), 'weight_decay', "only optimizer='adamw'"),
    (dict(optimizer='adafactor', adam_b2=0.99), 'adam_b2', "optimizer='adafactor' uses"),
    (dict(local_corpus_dir='/x'), 'local_corpus_dir', "only dataset='local'"),
    (dict(eval_every_steps=0, eval_bleu_sentences=10), 'eval_bleu_sentences', 'eval_every_'),
    (dict(decode_parallelism='sharded', decode_threads=3), 'decode_threads', "'sharded'"),
])
def test_a_key_that_does_nothing_is_refused_on_the_command_line_else_reset(values, key, why,
                                                                            caplog):
  with pytest.raises(config_lib.ConfigError, match=rf"^config key '{key}'=.* has no effect: "
                     rf".*{why}.*; drop it$"):
    resolution.resolve(_config(**values), explicit=[key])
  if len(values) > 1:  # typed with the key that makes it ineffective: warned, not refused
    assert resolution.resolve(_config(**values), explicit=list(values))[key] == (
        default.get_config()[key])
  with caplog.at_level(logging.WARNING):
    resolved = resolution.resolve(_config(**values))
  assert resolved[key] == default.get_config()[key]
  assert f"config key '{key}'" in caplog.text and 'has no effect' in caplog.text
  assert resolution.resolve(_config(**values), saved=True)[key] == default.get_config()[key]


def test_overrides_of_a_saved_run_may_respell_the_model_but_not_change_it():
  saved = resolution.resolve(_config(num_layers=2, num_decoder_layers=1))
  same = _config(num_encoder_layers=2, num_decoder_layers=1, beam_size=2)
  config = resolution.with_overrides(saved, same, ['num_encoder_layers', 'num_decoder_layers',
                                                   'beam_size'])
  assert (config.num_decoder_layers, config.beam_size) == (1, 2)
  # num_layers as the run was trained with: the depths stay the checkpoint's.
  assert resolution.with_overrides(saved, _config(num_layers=2), ['num_layers']
                                   ).num_decoder_layers == 1
  with pytest.raises(config_lib.ConfigError, match=(
      r"^config key 'num_layers' would change the model fixed by the checkpoint "
      r'\(num_encoder_layers: checkpoint 2, command line 3; num_decoder_layers: checkpoint 1, '
      r'command line 3\)')):
    resolution.with_overrides(saved, _config(num_layers=3), ['num_layers'])
  with pytest.raises(config_lib.ConfigError, match=r'num_kv_heads: checkpoint 4, command line 2'):
    resolution.with_overrides(saved, _config(num_kv_heads=2), ['num_kv_heads'])


def test_a_factory_file_moved_with_its_content_is_the_same_model(tmp_path, factory_file):
  saved = resolution.resolve(_config(model=f'{factory_file}:win'))
  record = variant.source_record(saved.model)
  os.makedirs(tmp_path / 'new')
  moved = str(tmp_path / 'new' / 'myvar.py')
  os.rename(factory_file, moved)
  config = resolution.with_overrides(saved, _config(model=f'{moved}:win'), ['model'], record)
  assert config.model == f'{moved}:win' and config.decoder_window == 8
  json = checkpoint.config_to_json(saved)
  assert checkpoint.incompatible_keys(json, _config(model=f'{moved}:win'),
                                      model_source=record) == []
  with open(moved, 'a') as f:
    f.write('# edited\n')
  assert checkpoint.incompatible_keys(json, _config(model=f'{moved}:win'), model_source=record
                                      ) == [('model', saved.model, f'{moved}:win')]
  with pytest.raises(config_lib.ConfigError, match=r"^config key 'model' would change"):
    resolution.with_overrides(saved, _config(model=f'{moved}:win'), ['model'], record)


def test_a_moved_corpus_compares_by_content_when_both_sides_have_fingerprints():
  saved = checkpoint.config_to_json(_config(dataset='local', local_corpus_dir='/a/corpus'))
  moved = _config(dataset='local', local_corpus_dir='/b/corpus')
  assert checkpoint.incompatible_keys(saved, moved) == [
      ('local_corpus_dir', '/a/corpus', '/b/corpus')]
  assert checkpoint.incompatible_keys(saved, moved, paths_by_content=True) == []


def test_describe_prints_every_key():
  text = resolution.describe(resolution.resolve(_config()))
  lines = text.splitlines()
  assert lines[0] == 'config (resolved):'
  assert len(lines) == 1 + len(default.get_config().keys())
  assert '  decoder_window' in text and "  model                     = ''" in text


PRESETS = ['quickstart', 'wmt_base', 'wmt_big', 'wmt_enfr_big', 'parsing_synthetic',
           'wsj_parsing'] + [f'table3:{row}' for row in ('A1', 'B1', 'C1', 'D1', 'E')]


@pytest.mark.parametrize('preset', PRESETS)
def test_every_preset_resolves_to_the_model_it_always_built(preset):
  """The canonical form changes what a checkpoint records, never the model: the
  `TransformerConfig` (hence parameters, programs and numbers) is the raw config's."""
  import importlib  # pylint: disable=import-outside-toplevel
  from t2t_jax.model.transformer_config import TransformerConfig  # pylint: disable=import-outside-toplevel
  name, _, row = preset.partition(':')
  module = importlib.import_module(f't2t_jax.configs.{name}')
  config = module.get_config(row) if row else module.get_config()
  resolved = resolution.resolve(config)
  assert TransformerConfig.from_config(resolved) == TransformerConfig.from_config(config)
  derived = ['d_k', 'd_v', 'num_decoder_layers', 'num_encoder_layers', 'num_kv_heads']
  if config.lr_schedule != 'rsqrt':  # a warmup-decay schedule records its peak (the same rate)
    derived += ['learning_rate', 'learning_rate_scale']
    assert resolved.learning_rate == pytest.approx(config_lib.paper_peak(
        config.d_model, config.warmup_steps, config.learning_rate_scale), rel=1e-12)
  assert [k for k in config.keys() if config[k] != resolved[k]] == [
      k for k in sorted(derived, key=list(config.keys()).index) if config[k] != resolved[k]]


def test_separate_vocabularies_resolve_their_source_size_and_refuse_what_does_nothing(
    tmp_path):
  separate = resolution.resolve(_config(share_vocab=False, share_embeddings=False))
  assert (separate.share_vocab, separate.source_vocab_size) == (False, 64)  # vocab_size's
  assert resolution.resolve(separate) == separate  # idempotent
  assert resolution.resolve(_config()).source_vocab_size == 0  # one vocabulary: as ever
  with pytest.raises(config_lib.ConfigError, match=r"^--config.share_vocab=False needs "
                     r"--config.share_embeddings=False: one matrix cannot embed two"):
    resolution.resolve(_config(share_vocab=False))
  for key, value in (('source_vocab_size', 300), ('source_vocab_model', '/x.model')):
    with pytest.raises(config_lib.ConfigError, match=rf"^config key '{key}'=.* has no effect: "
                       r'share_vocab=True(: | and share_tokenizer=True: ).*; drop it$'):
      resolution.resolve(_config(**{key: value}), explicit=[key])
  bad = tmp_path / 'notes.model'
  bad.write_text('not a model')
  with pytest.raises(config_lib.ConfigError, match=rf'^--config.source_vocab_model={bad} is '
                     r'not a SentencePiece model t2t_jax can use \(11 bytes that are not'):
    resolution.resolve(_config(share_vocab=False, share_embeddings=False,
                               vocab_model=_spm(tmp_path, 40), source_vocab_model=str(bad)))


@pytest.mark.parametrize('values, message', [
    (dict(vocab_model='/a.model'), r"^config key 'source_vocab_model': expected a "
     r'SentencePiece .model with share_vocab=False and --config.vocab_model \(the two sides '
     r"are given together, or both trained\), got ''$"),
    (dict(source_vocab_model='/a.model'), r"^config key 'vocab_model': expected a "
     r'SentencePiece .model with share_vocab=False and --config.source_vocab_model'),
    (dict(source_vocab_model='/a.model', init_from='/runs/a'), r"^config key "
     r"'source_vocab_model': expected '' with init_from, which takes the source run's "
     r"vocabularies, got '/a.model'$"),
])
def test_given_vocabularies_of_separate_sides_come_together(values, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    resolution.resolve(_config(share_vocab=False, share_embeddings=False, **values))


def _spm(folder, pieces):
  """A SentencePiece model of `pieces` pieces trained in `folder`; returns its path."""
  from t2t_jax.data import tokenizer  # pylint: disable=import-outside-toplevel
  words = 'the quick brown fox jumps over a lazy dog while seven zebras vex him'.split()
  text = [' '.join(words[i:] + words[:i]) for i in range(len(words))] * 4
  return tokenizer.train(text, pieces, os.path.join(folder, f'{pieces}.model')).path


def test_a_given_source_model_sets_source_vocab_size(tmp_path):
  values = dict(share_vocab=False, share_embeddings=False, vocab_model=_spm(tmp_path, 40),
                source_vocab_model=_spm(tmp_path, 45))
  assert resolution.resolve(_config(**values)).source_vocab_size == 45
  with pytest.raises(config_lib.ConfigError, match=r'has 45 pieces, but the command line '
                     r'gives --config.source_vocab_size=300; drop one of the two$'):
    resolution.resolve(_config(source_vocab_size=300, **values),
                       explicit=['source_vocab_size'])


def test_a_resume_with_another_best_metric_is_refused_and_a_schedule_change_is_named():
  saved = default.get_config()
  saved.update(dict(keep_best=1, eval_bleu_sentences=8))
  now = saved.copy_and_resolve_references()
  now.best_metric = 'bleu'  # best/ holds the best by loss
  assert [k for k, _, _ in resolution.incompatible_keys(saved.to_dict(), now)] == ['best_metric']
  now = saved.copy_and_resolve_references()
  now.warmup_steps = 8000
  assert resolution.incompatible_keys(saved.to_dict(), now) == []
  assert resolution.incompatible_keys(saved.to_dict(), now, keys=resolution.SCHEDULE_KEYS) == [
      ('warmup_steps', 4000, 8000)]


def test_a_recorded_vocab_model_that_has_gone_is_provenance(tmp_path):
  """A run's record names a vocab_model that is no longer there: its size is the record's,
  and only a command line naming it again reads it (issue 60, 1)."""
  recorded = default.get_config()
  recorded.update(dict(vocab_model=str(tmp_path / 'gone.model'), vocab_size=400))
  assert resolution.resolve(recorded, saved=True).vocab_size == 400
  assert resolution.resolve(recorded, ['vocab_model'], recorded=True).vocab_size == 400
  with pytest.raises(config_lib.ConfigError, match=r'gone\.model cannot be read \(no such file\)'):
    resolution.resolve(recorded, ['vocab_model'])  # a new run: the file is needed


def test_vocab_from_takes_another_runs_vocabulary_files_as_vocab_model(tmp_path):
  run = tmp_path / 'W'
  os.makedirs(run / 'vocab')
  os.replace(_spm(tmp_path, 40), run / 'vocab' / 'spm.model')
  os.replace(_spm(tmp_path, 45), run / 'vocab' / 'source_spm.model')
  resolved = resolution.resolve(_config(vocab_from=str(run)))
  assert resolved.vocab_model == str(run / 'vocab' / 'spm.model') and resolved.vocab_size == 40
  assert resolved.source_vocab_model == ''  # one shared vocabulary: W's target model
  separate = resolution.resolve(_config(vocab_from=str(run), share_vocab=False,
                                        share_embeddings=False))
  assert (separate.source_vocab_model, separate.source_vocab_size) == (
      str(run / 'vocab' / 'source_spm.model'), 45)
  assert resolution.resolve(resolved).vocab_model == resolved.vocab_model  # its record again
  for values, says in (
      (dict(init_from=str(run)), r'with --config.init_from, which takes its source run'),
      (dict(vocab_model='/other.model'), r'gives vocab_model=.*; --config.vocab_model=/other'),
  ):
    with pytest.raises(config_lib.ConfigError, match=says):
      resolution.resolve(_config(vocab_from=str(run), **values))
  # W moved away: the recorded config resolves from its own record (the workdir holds a copy).
  os.rename(run, tmp_path / 'W2')
  assert resolution.resolve(resolved, recorded=True).vocab_model == resolved.vocab_model
  with pytest.raises(config_lib.ConfigError,
                     match=rf'^--config.vocab_from={tmp_path}: .*spm.model cannot be read'):
    resolution.resolve(_config(vocab_from=str(tmp_path)))
