"""TransformerConfig checks itself: enumerations, sizes, rates and dtypes fail in one line
naming the field; every preset still builds; equal configs are one static jit argument."""

import dataclasses
import glob
import importlib.util
import os
import pydoc
import re
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import ROOT
from t2t_jax import config as config_lib
from t2t_jax.config import ConfigError
from t2t_jax.model import stack, transformer_config
from t2t_jax.model.transformer_config import TransformerConfig

TINY = TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                         num_layers=1, max_len=64)
SIZES = ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'd_k', 'd_v', 'num_layers', 'max_len')


def _refused(message, **changes):
  with pytest.raises(ConfigError) as raised:
    TransformerConfig(**changes)
  assert str(raised.value) == message
  with pytest.raises(ConfigError, match=f'^{re.escape(message)}$'):
    TINY.replace(**changes)


@pytest.mark.parametrize('field, bad, allowed', [
    ('positional', 'rope', "'sinusoidal', 'learned', 'sinusoidal_halves', 'sinusoidal_fairseq'"),
    ('positional', None, "'sinusoidal', 'learned', 'sinusoidal_halves', 'sinusoidal_fairseq'"),
    ('norm_position', 'banana', "'post', 'pre'"),
    ('norm_position', 'Pre', "'post', 'pre'"),
    ('remat_policy', 'everything', "'none', 'full', 'dots_saveable', "
                                   "'dots_with_no_batch_dims_saveable'"),
    ('remat_policy', None, "'none', 'full', 'dots_saveable', "
                           "'dots_with_no_batch_dims_saveable'"),
    ('attention_impl', 'flash', "'xla', 'cudnn', None"),
    ('attention_impl', '', "'xla', 'cudnn', None"),
    ('dtype', 'float16', "'float32', 'bfloat16'"),
    ('dtype', jnp.float64, "'float32', 'bfloat16'"),
    ('dtype', 'banana', "'float32', 'bfloat16'"),
    ('dtype', None, "'float32', 'bfloat16'"),
])
def test_enumerated_fields_refuse_a_bad_value_naming_it(field, bad, allowed):
  _refused(f'TransformerConfig.{field}={bad!r}: expected one of {allowed}', **{field: bad})


@pytest.mark.parametrize('field', SIZES)
@pytest.mark.parametrize('bad', [0, -1, 2.0, True, '8', None])
def test_sizes_are_positive_integers(field, bad):
  if bad is None and field in ('d_k', 'd_v'):
    pytest.skip('None: d_model // num_heads (test_head_widths_default_to_d_model_over_heads)')
  _refused(f'TransformerConfig.{field}={bad!r}: expected an integer > 0', **{field: bad})


def test_head_widths_default_to_d_model_over_heads():
  """Direct construction and `from_config` give one model: d_k = d_v = d_model / h unless set
  (Table 3 rows A and B set them)."""
  cfg = TransformerConfig(d_model=32, num_heads=4)
  assert (cfg.d_k, cfg.d_v) == (8, 8)
  assert (TransformerConfig().d_k, TransformerConfig().d_v) == (64, 64)  # the paper's base
  assert TransformerConfig(d_model=48, num_heads=6, d_v=7).d_k == 8  # d_model / h
  assert (TransformerConfig(d_model=32, num_heads=4, d_k=16, d_v=4).d_k,
          TransformerConfig(d_model=32, num_heads=4, d_k=16, d_v=4).d_v) == (16, 4)
  run = _load('default').get_config()
  run.d_model, run.d_ff, run.num_heads, run.vocab_size = 32, 64, 4, 40
  assert TransformerConfig.from_config(run) == TransformerConfig(
      vocab_size=40, d_model=32, d_ff=64, num_heads=4, max_len=run.max_len,
      dropout_rate=run.dropout_rate)
  # Resolved once: replace keeps the number unless d_k=None asks again.
  assert cfg.replace(d_model=64).d_k == 8 and cfg.replace(d_model=64, d_k=None).d_k == 16
  # h must divide d_model when a width is derived (as config.validate): no floored width.
  for d_model, heads in ((4, 8), (48, 5)):
    _refused(f"TransformerConfig.num_heads={heads}: expected a divisor of d_model={d_model} "
             "while d_k is None (None means d_model / num_heads); or set d_k and d_v",
             d_model=d_model, num_heads=heads, d_k=None)


@pytest.mark.parametrize('vocab_size', [1, 2])
def test_vocab_size_holds_the_reserved_ids(vocab_size):
  _refused(f'TransformerConfig.vocab_size={vocab_size}: expected an integer >= 3 (ids 0 = '
           'padding and 1 = EOS/BOS are reserved, and one token more)', vocab_size=vocab_size)
  assert TINY.replace(vocab_size=3).vocab_size == 3


def test_sizes_take_numpy_integers_as_python_ints():
  cfg = TINY.replace(d_model=np.int64(32), num_heads=np.int32(4))
  assert (type(cfg.d_model), type(cfg.num_heads)) == (int, int)
  assert cfg == TINY and hash(cfg) == hash(TINY)


def test_key_value_heads_divide_the_query_heads():
  cfg = transformer_config.TransformerConfig(d_model=64, num_heads=8, num_kv_heads=2)
  assert (cfg.num_kv_heads, cfg.kv_heads) == (2, 2)
  for bad in (3, 0, 16, 2.0):
    with pytest.raises(ConfigError, match=r'^TransformerConfig\.num_kv_heads='):
      transformer_config.TransformerConfig(num_heads=8, num_kv_heads=bad)


def test_d_model_need_not_be_a_multiple_of_heads():
  # Heads project to d_k / d_v each (layers.py), so Table 3 rows A and B set them freely.
  assert TransformerConfig(d_model=500, num_heads=8, d_k=64, d_v=32).d_model == 500


@pytest.mark.parametrize('field', ['dropout_rate', 'attention_dropout_rate'])
@pytest.mark.parametrize('bad', [-0.1, 1.0, 1.5, float('nan'), float('inf'), True, None, '0.1'])
def test_rates_are_in_zero_one(field, bad):
  _refused(f'TransformerConfig.{field}={bad!r}: expected a number in [0, 1)', **{field: bad})


@pytest.mark.parametrize('rate', [0, 0.0, 0.3, np.float32(0.5), 0.999])
def test_rates_in_range_are_taken(rate):
  assert TINY.replace(dropout_rate=rate, attention_dropout_rate=rate).dropout_rate == rate


@pytest.mark.parametrize('field', ['deterministic', 'decode', 'capture_attention',
                                   'scan_layers'])
def test_flags_are_bools(field):
  _refused(f'TransformerConfig.{field}=1: expected True or False', **{field: 1})


@pytest.mark.parametrize('name, spellings', [
    ('float32', [jnp.float32, np.float32, np.dtype('float32'), jnp.dtype('float32'), 'float32']),
    ('bfloat16', [jnp.bfloat16, jnp.dtype('bfloat16'), 'bfloat16']),
])
def test_dtype_spellings_are_one_value(name, spellings):
  configs = [TINY.replace(dtype=d) for d in spellings]
  assert all(c.dtype == np.dtype(name) and c.dtype.name == name for c in configs)
  assert len(set(configs)) == 1 and len({hash(c) for c in configs}) == 1


def test_equal_configs_are_one_static_jit_argument():
  # The default (jnp.float32) and a run config's (np.dtype('float32')) compared equal before,
  # but hashed apart; a static argument must hash as it compares.
  paper = TransformerConfig()
  loaded = TransformerConfig.from_config(_load('wmt_base').get_config())
  assert paper == loaded and hash(paper) == hash(loaded)
  assert paper.replace(dtype='bfloat16').replace(dtype=jnp.float32) == paper

  width = jax.jit(lambda x, cfg: x * cfg.d_model, static_argnums=1)
  width(jnp.ones(()), paper)
  width(jnp.ones(()), loaded)
  width(jnp.ones(()), TINY.replace(dtype=np.dtype('float32')))
  width(jnp.ones(()), TINY.replace(dtype=jnp.float32))
  assert width._cache_size() == 2  # pylint: disable=protected-access


def test_replace_checks_and_leaves_the_original():
  with pytest.raises(ConfigError, match=r"^TransformerConfig\.positional='rope': "):
    TINY.replace(positional='rope')
  assert TINY.positional == 'sinusoidal'
  assert dataclasses.replace(TINY, d_k=16).d_k == 16


def test_config_error_is_the_run_configs_one_line_error():
  # main.py prints a ConfigError as one line `error: ...` (errors.user_errors).
  assert transformer_config.ConfigError is ConfigError and issubclass(ConfigError, ValueError)


def _annotation_values(field):
  hint = typing.get_type_hints(TransformerConfig)[field]
  args = typing.get_args(hint)
  return args if typing.get_origin(hint) is typing.Literal else typing.get_args(args[0])


def test_each_enumeration_is_written_once():
  # The run config's validation takes the model's enumerations from the same Literals.
  choices = config_lib.CHOICES
  for field in ('positional', 'norm_position', 'remat_policy'):
    assert choices[field] == _annotation_values(field)
  assert choices['attention_impl'] == ('',) + _annotation_values('attention_impl')
  assert set(choices['remat_policy']) == {'none', *stack.REMAT_POLICIES}
  # attention_impl takes what jax.nn.dot_product_attention's `implementation` takes.
  jax_hint = typing.get_type_hints(jax.nn.dot_product_attention)['implementation']
  jax_literal, none = typing.get_args(jax_hint)
  assert none is type(None)
  assert set(typing.get_args(jax_literal)) == set(_annotation_values('attention_impl'))
  assert choices['dtype'] == ('float32', 'bfloat16')


def test_help_describes_every_field():
  text = pydoc.render_doc(TransformerConfig, renderer=pydoc.plaintext)
  for field in dataclasses.fields(TransformerConfig):
    assert re.search(rf'\n\s*\|?\s*{field.name}: \S', text), field.name
  assert 'd_k: per-head query/key width (§3.2.2; 64 in the base model)' in text


def _load(name):
  """configs/<name>.py as a module, by path (not as an installed `configs` package)."""
  spec = importlib.util.spec_from_file_location(f'_t2t_jax_test_config_{name}',
                                                os.path.join(ROOT, 'configs', f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _presets():
  for path in sorted(glob.glob(os.path.join(ROOT, 'configs', '*.py'))):
    name = os.path.basename(path)[:-3]
    if name == '__init__':
      continue
    module = _load(name)
    if name.startswith('table3'):  # table3.py and table3_small.py: get_config(row)
      yield from ((f'{name}:{row}', module.get_config(row)) for row in _load('table3').ROWS)
    else:
      yield name, module.get_config()


def test_every_preset_builds_a_model_config():
  built = {name: TransformerConfig.from_config(c) for name, c in _presets()}
  assert {'default', 'quickstart', 'wmt_big', 'table3:E', 'table3_small:B1'} <= set(built)
  assert built['wmt_base'] == built['table3:base'] == TransformerConfig()  # the paper's base
  assert built['table3:E'].positional == 'learned' and built['table3:B1'].d_k == 16
  big = built['wmt_big']
  assert (big.d_model, big.d_ff, big.num_heads, big.d_k, big.dropout_rate) == (
      1024, 4096, 16, 64, 0.3)


def test_a_source_vocabulary_of_its_own_needs_untied_embeddings():
  assert TINY.source_vocab_size is None and TINY.input_vocab_size == TINY.vocab_size
  assert TINY.replace(source_vocab_size=0) == TINY  # 0 is None: one vocabulary for both
  untied = TINY.replace(share_embeddings=False)
  same_size = untied.replace(source_vocab_size=TINY.vocab_size)  # still an encoder table
  assert same_size.source_vocab_size == same_size.input_vocab_size == 40 and same_size != untied
  separate = untied.replace(source_vocab_size=50)
  assert (separate.input_vocab_size, separate.vocab_size) == (50, 40)
  side = separate.source_side()  # what the encoder's embedding part is built with
  assert (side.vocab_size, side.source_vocab_size, side.share_embeddings) == (50, None, True)
  _refused('TransformerConfig.source_vocab_size=50: expected None while share_embeddings=True '
           '(one matrix cannot embed two vocabularies); or set share_embeddings=False',
           source_vocab_size=50)
  _refused('TransformerConfig.source_vocab_size=2: expected an integer >= 3 (ids 0 = padding '
           'and 1 = EOS/BOS are reserved, and one token more)', source_vocab_size=2,
           share_embeddings=False)


def test_share_vocab_false_builds_the_source_side_of_its_own():
  config = config_lib.validate(_run_config(share_vocab=False, share_embeddings=False))
  assert TransformerConfig.from_config(config).source_vocab_size == config.vocab_size
  config.source_vocab_size = 300
  assert TransformerConfig.from_config(config).input_vocab_size == 300
  assert TransformerConfig.from_config(_run_config(source_vocab_size=300)).source_vocab_size is None


def _run_config(**changes):
  c = _load('default').get_config()
  c.update(changes)
  return c
