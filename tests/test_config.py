"""Configs: presets hold the paper's values; bad keys and values fail naming the key."""

import re

import ml_collections
import pytest

from configs import (default, parsing_synthetic, quickstart, table3, wmt_base, wmt_big,
                     wmt_enfr_big, wsj_parsing)
from t2t_jax import config as config_lib
from t2t_jax.model import transformer as model


def test_presets_hold_the_paper_values():
  base, big, enfr = wmt_base.get_config(), wmt_big.get_config(), wmt_enfr_big.get_config()
  assert (base.d_model, base.d_ff, base.num_heads, base.num_layers) == (512, 2048, 8, 6)
  assert (base.dropout_rate, base.label_smoothing, base.warmup_steps) == (0.1, 0.1, 4000)
  assert (base.adam_b1, base.adam_b2, base.adam_eps) == (0.9, 0.98, 1e-9)
  assert (base.vocab_size, base.average_last, base.num_train_steps) == (37000, 5, 100_000)
  assert (big.d_model, big.d_ff, big.num_heads, big.dropout_rate) == (1024, 4096, 16, 0.3)
  assert (big.average_last, big.num_train_steps) == (20, 300_000)
  assert (enfr.dropout_rate, enfr.vocab_size, enfr.target_lang) == (0.1, 32000, 'fr')
  assert base.norm_position == 'post' and base.positional == 'sinusoidal'
  for c in (base, big, enfr, quickstart.get_config()):
    config_lib.validate(c)


def test_wsj_parsing_holds_the_papers_settings_for_wsj_only():
  c, base = wsj_parsing.get_config(), wmt_base.get_config()
  assert (c.dataset, c.num_layers, c.d_model, c.vocab_size) == ('treebank', 4, 1024, 16000)
  assert (c.beam_size, c.length_penalty_alpha, c.max_decode_extra) == (21, 0.3, 300)
  same = ('d_ff', 'num_heads', 'dropout_rate', 'label_smoothing', 'warmup_steps', 'adam_b2',
          'learning_rate_scale', 'average_last')
  assert {k: c[k] for k in same} == {k: base[k] for k in same}
  # input + 300 fits max_len for inputs up to 212 tokens; training keeps targets up to 512
  assert c.max_len == c.max_length == c.bucket_lengths[-1] == 512
  for preset in (c, parsing_synthetic.get_config()):
    assert config_lib.validate(preset).dataset == 'treebank'


@pytest.mark.parametrize('row,expected', [
    ('A1', dict(num_heads=1, d_k=512, d_v=512)), ('A4', dict(num_heads=32, d_k=16, d_v=16)),
    ('B1', dict(d_k=16, d_v=64)), ('C3', dict(num_layers=8)),
    ('C4', dict(d_model=256, d_k=32, d_v=32)), ('C7', dict(d_ff=4096)),
    ('D2', dict(dropout_rate=0.2)), ('D4', dict(label_smoothing=0.2)),
    ('E', dict(positional='learned')), ('big', dict(d_model=1024, num_heads=16)),
])
def test_table3_rows(row, expected):
  c = table3.get_config(row)
  config_lib.validate(c)
  cfg = model.TransformerConfig.from_config(c)
  for key, value in expected.items():
    assert getattr(cfg, key, c[key]) == value, key
    assert c[key] == value or key in ('d_k', 'd_v'), key


def test_unknown_table3_row_names_valid_rows():
  with pytest.raises(ValueError, match=r"'C9'.*A1.*B2.*E"):
    table3.get_config('C9')


def _with(**changes):
  # Built from a plain dict: ConfigDict's own type safety would refuse some bad values
  # earlier, and configs built by library users need not go through it.
  return ml_collections.ConfigDict({**default.get_config().to_dict(), **changes})


@pytest.mark.parametrize('changes,message', [
    (dict(d_model=500, num_heads=8), r"'d_model'.*multiple of num_heads=8"),
    (dict(num_kv_heads=3), r"'num_kv_heads': expected 0 or a divisor of num_heads=8, got 3"),
    (dict(num_kv_heads=-1), r"'num_kv_heads'"),
    (dict(dropout_rate=-0.1), r"'dropout_rate'.*\[0, 1\)"),
    (dict(label_smoothing=1.0), r"'label_smoothing'"),
    (dict(positional='sine'), r"'positional'.*'sinusoidal', 'learned'.*'sine'"),
    (dict(norm_position='middle'), r"'norm_position'.*'post', 'pre'"),
    (dict(dtype='float16'), r"'dtype'.*'float32', 'bfloat16'"),
    (dict(num_layers=0), r"'num_layers'.*> 0"),
    # Not 0: a run would prepare the data and train a vocabulary for nothing, then find no
    # checkpoint to average.
    (dict(num_train_steps=0), r"^config key 'num_train_steps': expected a value > 0, got 0$"),
    (dict(vocab_size=3.5), r"'vocab_size'.*integer"),
    (dict(bucket_lengths=(8, 64, 32)), r"'bucket_lengths'.*increasing"),
    (dict(max_length=300), r"'bucket_lengths'.*max_length=300"),
    # Issue 43 item 3.15: refused only after data preparation and the vocabulary's training.
    (dict(tokens_per_batch=10), r"^config key 'tokens_per_batch': expected at least 256, one "
     r"row of the largest bucket used \(the first of bucket_lengths >= max_length=256\), got "
     r"10$"),
    (dict(max_length=20, tokens_per_batch=23), r"'tokens_per_batch': expected at least 24,"),
    (dict(final_eval_split='validation'),
     r"'final_eval_split'.*one of '', 'train', 'dev', 'test', got 'validation'"),
    (dict(eval_split='valid'), r"'eval_split'.*one of 'train', 'dev', 'test', got 'valid'"),
    (dict(dataset='treebank2'), r"'dataset'.*'local', 'treebank', got 'treebank2'"),
    (dict(treebank_dir='/data/wsj'), r"^config key 'treebank_dir': expected '' unless "
     r"dataset='treebank' \(dataset is 'wmt14_translate/de-en'\), got '/data/wsj'$"),
    (dict(remat_policy='ful'), r"^config key 'remat_policy': expected one of 'none', 'full', "
     r"'dots_saveable', 'dots_with_no_batch_dims_saveable', got 'ful'$"),
    (dict(shard_optimizer_state='true'),
     r"^config key 'shard_optimizer_state': expected a bool, got 'true'$"),
    (dict(shard_optimizer_state=1),
     r"^config key 'shard_optimizer_state': expected a bool, got 1$"),
    (dict(source_vocab_size=-1), r"^config key 'source_vocab_size': expected a value >= 0"),
])
def test_invalid_values_name_the_key(changes, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    config_lib.validate(_with(**changes))


def test_memory_levers_are_off_by_default_and_reach_the_model():
  assert model.TransformerConfig.from_config(default.get_config()).remat_policy == 'none'
  assert default.get_config().shard_optimizer_state is False
  assert model.TransformerConfig.from_config(_with(remat_policy='full')).remat_policy == 'full'
  assert set(config_lib.CHOICES['remat_policy']) == {'none', *model.REMAT_POLICIES}


def test_d_k_and_d_v_free_d_model_from_heads():
  c = _with(d_model=500, num_heads=8, d_k=64, d_v=64)
  assert model.TransformerConfig.from_config(c).d_k == 64


def test_unknown_key_is_refused_with_a_suggestion():
  c = default.get_config()
  c.d_modle = 3
  with pytest.raises(config_lib.ConfigError, match=r"unknown config key 'd_modle'; did you mean d_model"):
    config_lib.validate(c)


def test_override_paths_refuse_unknown_keys_and_sub_keys():
  config_lib.check_override_paths(['d_model', 'bucket_lengths'])
  with pytest.raises(config_lib.ConfigError, match=r"unknown config key 'd_modle'"):
    config_lib.check_override_paths(['d_modle.x'])
  with pytest.raises(config_lib.ConfigError, match=r"^config key 'dtype.x': 'dtype' holds a "
                     r"single str and has no sub-keys; write --config.dtype=VALUE$"):
    config_lib.check_override_paths(['beam_size', 'dtype.x'])


_FLOAT_KEYS = sorted(k for k, v in default.get_config().items() if isinstance(v, float))


@pytest.mark.parametrize('value', [float('nan'), float('inf'), float('-inf')])
@pytest.mark.parametrize('key', _FLOAT_KEYS)
def test_float_keys_must_be_finite(key, value):
  with pytest.raises(config_lib.ConfigError) as e:
    config_lib.validate(_with(**{key: value}))
  assert str(e.value) == f'config key {key!r}: expected a finite number, got {value!r}'


def test_every_float_key_is_checked():
  # The parametrisation above is read from configs/default.py; an empty list would pass.
  assert {'length_penalty_alpha', 'checkpoint_every_minutes', 'learning_rate_scale'} <= set(
      _FLOAT_KEYS)


@pytest.mark.parametrize('key, value, expected', [
    ('layer_norm_epsilon', 0.0, 'a value in (0, 1)'),
    ('decoder_start_id', 37000, 'an id below vocab_size=37000'),
    ('language_tokens', '__en__', "'' or a pattern with one {lang}"),
    ('activation', 'tanh', "one of 'relu', 'swish', 'gelu'"),
])
def test_the_options_of_imported_models_refuse_a_bad_value_in_one_line(key, value, expected):
  config = default.get_config()
  config[key] = value
  with pytest.raises(config_lib.ConfigError, match=rf"^config key '{key}': expected "
                     rf"{re.escape(expected)}"):
    config_lib.validate(config)
