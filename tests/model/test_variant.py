"""`variant.load_factory` and `variant.from_config`: the model a run config's `model` key names
(`--config.model=module:factory` or `path/to/file.py:factory`), and the one line each wrong
spec gets."""

import os
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest

from variant_helpers import SWIGLU_MODULE

from t2t_jax import config as config_lib
from t2t_jax.configs import default
from t2t_jax.model import parts, transformer, variant
from t2t_jax.runtime import parallel

VARIANTS = SWIGLU_MODULE + '''
LOADS = []
LOADS.append(1)  # once per execution of this file
NOT_CALLABLE = 3


class Factories:
  swiglu = staticmethod(swiglu)


def wider(cfg):
  return t2t_jax.Transformer(cfg.replace(d_ff=2 * cfg.d_ff))


def config_only(cfg):
  return cfg


def two_arguments(cfg, other):
  return t2t_jax.Transformer(cfg)


def raising(cfg):
  raise KeyError('no_such_option')  # RAISES HERE
'''


def _config(**changes):
  config = default.get_config()
  config.update(dict(vocab_size=64, d_model=16, d_ff=32, num_heads=2, num_layers=1, max_len=32,
                     max_length=16, bucket_lengths=(8, 16)), **changes)
  return config_lib.validate(config)


@pytest.fixture
def folder(tmp_path, monkeypatch):
  """A folder holding the variants as the module `<unique>_variants` and as variants.py, with
  sys.path restored afterwards. Returns (folder, module name)."""
  name = f'{os.path.basename(tmp_path).replace("-", "_")}_variants'
  (tmp_path / f'{name}.py').write_text(VARIANTS)
  (tmp_path / 'sub').mkdir()
  (tmp_path / 'sub' / 'variants.py').write_text(VARIANTS)
  monkeypatch.setattr(sys, 'path', [p for p in sys.path if p not in ('', os.getcwd())])
  yield tmp_path, name
  sys.modules.pop(name, None)


def test_the_paper_model_is_built_as_before():
  config = _config()
  net = variant.from_config(config)
  cfg = transformer.TransformerConfig.from_config(config)
  assert type(net) is transformer.Transformer and net == transformer.Transformer(cfg)
  assert net.parts == parts.PAPER
  assert variant.from_config(config, deterministic=True).cfg == cfg.replace(deterministic=True)
  rng = jax.random.PRNGKey(0)
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(
      np.array_equal, transformer.init_params(net, rng), transformer.init_params(cfg, rng)))


def test_a_module_on_sys_path_or_in_the_current_folder(folder, monkeypatch):
  path, name = folder
  monkeypatch.chdir(path)  # not on sys.path: found as `python main.py` from here finds it
  net = variant.from_config(_config(model=f'{name}:swiglu'))
  module = sys.modules[name]
  assert net.feed_forward is module.SwiGLU and net.cfg == variant.from_config(_config()).cfg
  assert variant.load_factory(f'{name}:Factories.swiglu') is module.swiglu
  assert variant.load_factory(f'{name}:swiglu') is module.swiglu and module.LOADS == [1]
  params = transformer.init_params(net, jax.random.PRNGKey(0))
  assert set(params['encoder']['layer_0']['ffn']) == {'gate', 'up', 'down'}


def test_a_file_relative_to_the_current_folder_runs_once(folder, monkeypatch):
  path, _ = folder
  monkeypatch.chdir(path)
  factory = variant.load_factory('sub/variants.py:swiglu')
  module = sys.modules[factory.__module__]
  assert module.__file__ == str(path / 'sub' / 'variants.py') and module.LOADS == [1]
  monkeypatch.chdir(path / 'sub')  # the same file by another spelling: not run again
  assert variant.load_factory('variants.py:swiglu') is factory
  assert variant.load_factory(f'{path}/sub/./variants.py:swiglu') is factory
  assert module.LOADS == [1]
  assert variant.from_config(_config(model='variants.py:swiglu')).feed_forward is module.SwiGLU


def test_the_factory_may_change_the_config(folder):
  path, _ = folder
  net = variant.from_config(_config(model=f'{path}/sub/variants.py:wider'))
  assert net.cfg.d_ff == 64 and net.cfg.d_model == 16


def _error(spec: str) -> str:
  with pytest.raises(variant.VariantError) as raised:
    variant.from_config(_config(model=spec))
  message = str(raised.value)
  assert isinstance(raised.value, config_lib.ConfigError) and raised.value.spec == spec
  assert '\n' not in message and message.startswith(f'--config.model={spec} cannot be used (')
  return message


def test_a_spec_of_the_wrong_form():
  form = "expected 'module:factory' or 'path/to/file.py:factory'"
  for spec in ('my_variants', ':swiglu', 'my_variants:', 'my_variants:not an attribute'):
    assert form in _error(spec)
  assert "'my variants' is neither a module name nor a .py file" in _error('my variants:f')
  assert 'dir/variants is not a .py file' in _error('dir/variants:f')


def test_what_cannot_be_found_names_it_and_the_remedy(folder, monkeypatch):
  path, name = folder
  remedy = ': run from the folder that has it, or put it on PYTHONPATH'
  assert _error('no_such_module_here:swiglu').endswith(
      "(No module named 'no_such_module_here')" + remedy)
  monkeypatch.chdir(path / 'sub')  # the module is in the folder above
  assert _error(f'{name}:swiglu').endswith(f"(No module named '{name}')" + remedy)
  assert _error('missing.py:swiglu').endswith(f'(no such file {path}/sub/missing.py)' + remedy)
  assert _error('variants.py:nope').endswith("(cannot import name 'nope' from variants.py)")
  assert _error('variants.py:NOT_CALLABLE').endswith(
      '(NOT_CALLABLE is a int, not a function of the model config)')


def test_a_module_that_fails_while_it_runs(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'broken.py').write_text('import t2t_jax\n\nundefined_name\n')
  (tmp_path / 'needs.py').write_text('import no_such_dependency_here\n')
  (tmp_path / 'syntax.py').write_text('def f(:\n')
  broken = tmp_path / 'broken.py'
  assert _error('broken.py:f').endswith(
      f"({broken} fails to import: NameError: name 'undefined_name' is not defined "
      f"({broken} line 3))")
  message = _error('needs.py:f')  # a dependency it lacks: not the remedy of a missing module
  assert "ModuleNotFoundError: No module named 'no_such_dependency_here'" in message
  assert 'PYTHONPATH' not in message
  assert _error('syntax.py:f').endswith(
      f"fails to import: SyntaxError: invalid syntax ({tmp_path}/syntax.py line 1))")
  assert not [m for m in sys.modules if m.startswith('_t2t_jax_variant_') and
              getattr(sys.modules[m], '__file__', '').startswith(str(tmp_path))]


def test_a_factory_that_builds_no_transformer(folder):
  path, _ = folder
  spec = f'{path}/sub/variants.py'
  assert _error(f'{spec}:config_only').endswith(
      '(the factory returned a TransformerConfig; expected a t2t_jax Transformer of a '
      'TransformerConfig, e.g. Transformer(cfg, feed_forward=...))')
  assert _error(f'{spec}:two_arguments').endswith(
      '(the factory must take one argument, the TransformerConfig)')


def test_a_factory_that_raises_names_the_factory_the_error_and_its_line(folder):
  path, _ = folder
  spec = f'{path}/sub/variants.py'
  line = next(i for i, text in enumerate(VARIANTS.splitlines(), 1) if 'RAISES HERE' in text)
  assert _error(f'{spec}:raising').endswith(
      f"(the factory raised KeyError: 'no_such_option' ({spec} line {line}))")
  # A callable that is no factory (functools.partial(cfg)): the error in one line, no frame
  # of the user's code to name.
  assert _error(f'{spec}:functools.partial').endswith(
      '(the factory raised TypeError: the first argument must be callable)')


def test_eval_step_label_smoothing_defaults_to_the_papers(folder):
  path, _ = folder
  net = variant.from_config(_config(model=f'{path}/sub/variants.py:swiglu'))
  params = transformer.init_params(net, jax.random.PRNGKey(0))
  mesh = parallel.make_mesh()
  ids = np.random.default_rng(0).integers(2, 64, size=(8, 8)).astype(np.int32)
  batch = parallel.shard_batch({'inputs': ids, 'targets': ids}, mesh)
  sums = [jax.device_get(parallel.make_eval_step(net, mesh, **kwargs)(params, batch))
          for kwargs in ({}, {'label_smoothing': 0.1}, {'label_smoothing': 0.0})]
  assert sums[0] == sums[1] and sums[0]['loss'] != sums[2]['loss']


class _EmbedWithoutTransposed(nn.Module):
  """An embedding of a user's own: a table, looked up and attended, no `transposed()`."""
  cfg: transformer.TransformerConfig

  def setup(self):
    self.table = self.param('table', nn.initializers.normal(0.02),
                            (self.cfg.vocab_size, self.cfg.d_model))

  def __call__(self, ids):
    return self.table[ids]

  def attend(self, x, transposed=None):
    return x @ self.table.T


class _OwnEmbedding(transformer.Transformer):
  """A subclass whose `setup` builds its embedding itself: the parts' checks never see it."""

  def setup(self):
    self.shared_embedding = _EmbedWithoutTransposed(self.cfg, name='shared_embedding')
    self.encoder = transformer.Encoder(self.cfg, self.shared_embedding, self.parts, None)
    self.decoder = transformer.Decoder(self.cfg, self.shared_embedding, self.parts, None)


def test_a_model_that_decoding_or_export_would_fail_on_is_refused_before_training():
  cfg = transformer.TransformerConfig.from_config(_config(), deterministic=True)
  variant.check_later_methods(transformer.Transformer(cfg))  # the paper's passes
  net = _OwnEmbedding(cfg)
  params = transformer.init_params(net, jax.random.PRNGKey(0))
  logits = net.apply({'params': params}, np.ones((1, 4), np.int32), np.ones((1, 3), np.int32))
  assert logits.shape == (1, 3, 64)  # it trains...
  with pytest.raises(variant.VariantError) as e:  # ...but decoding would fail, after training
    variant.check_later_methods(net, 'f.py:own')
  assert str(e.value).startswith(
      '--config.model=f.py:own cannot be used (the model it builds fails in vocab_transposed(), '
      'which decoding, scoring and export call: AttributeError: ')
  assert 'has no attribute "transposed"' in str(e.value) and '\n' not in str(e.value)


def test_a_factory_file_that_has_gone_loads_from_its_recorded_source(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'F').mkdir()
  (tmp_path / 'F' / 'mine.py').write_text('import t2t_jax\nWIDE = 3\n\ndef wide(cfg):\n'
                                         '  return t2t_jax.Transformer(cfg.replace(d_ff=48))\n')
  record = variant.source_record('F/mine.py:wide')
  assert record['text'].startswith('import t2t_jax\nWIDE = 3') and record['sha256']
  os.rename(tmp_path / 'F', tmp_path / 'G')
  with pytest.raises(variant.VariantError, match='no such file'):
    variant.load_factory(f'{tmp_path}/H/mine.py:wide')  # never recorded: still an error
  variant.remember(record, typed='F/mine.py:wide')
  cfg = transformer.TransformerConfig.from_config(_config())
  assert variant.build(f'{tmp_path}/F/mine.py:wide', cfg).cfg.d_ff == 48
  assert variant.source_record(f'{tmp_path}/F/mine.py:wide')['sha256'] == record['sha256']
  # The moved file is the same model by content; the gone one by its record.
  assert variant.same_source(record, 'F/mine.py:wide', 'G/mine.py:wide')
  assert variant.same_source(record, 'F/mine.py:wide', 'F/mine.py:wide')
  (tmp_path / 'G' / 'mine.py').write_text('# edited\n')
  assert not variant.same_source(record, 'F/mine.py:wide', 'G/mine.py:wide')
  # Another name typed at a gone place is not taken for the record.
  variant.remember(record, typed='X/other.py:wide')
  with pytest.raises(variant.VariantError, match='no such file'):
    variant.load_factory('X/other.py:wide')
