"""Each part's contract is checked when the model is built (issue 51, 3): an embedding part
written before `transposed()` existed is refused by `Transformer(...)`, naming the method and
the docs section, not after training when decoding first calls it; every part of the paper and
of examples/variants.py passes."""

import os

import flax.linen as nn
import jax
import pytest

from conftest import ROOT
from t2t_jax.model import layers, parts, transformer as model, variant

CFG = model.TransformerConfig(vocab_size=24, d_model=16, d_ff=32, num_heads=2, num_layers=1,
                              max_len=32)


class UntiedEmbedding(nn.Module):
  """An embedding part of before `transposed()`: __call__, attend and tables only."""
  cfg: model.TransformerConfig

  @nn.compact
  def __call__(self, ids):
    return nn.Embed(self.cfg.vocab_size, self.cfg.d_model, name='input')(ids)

  def attend(self, x, transposed=None):
    return x

  def tables(self):
    return None


def test_an_embedding_part_without_transposed_is_refused_when_built():
  with pytest.raises(TypeError) as info:
    model.Transformer(CFG, embedding=UntiedEmbedding)
  assert str(info.value) == (
      'Transformer: the embedding part UntiedEmbedding: its module (UntiedEmbedding) has no '
      'transposed(); the model calls __call__(), attend(), transposed(), tables() '
      '(docs/extension_points.md, "Depth and embeddings")')


def test_the_docs_sections_named_exist():
  with open(os.path.join(ROOT, 'docs', 'extension_points.md'), encoding='utf-8') as f:
    assert '\n## Depth and embeddings\n' in f.read()
  with open(os.path.join(ROOT, 'docs', 'architecture.md'), encoding='utf-8') as f:
    assert '\n## A new model variant\n' in f.read()


class NoCall(nn.Module):
  cfg: model.TransformerConfig


@pytest.mark.parametrize('part,value,message', [
    ('feed_forward', NoCall, 'Transformer: the feed_forward part NoCall: its module (NoCall) '
     'has no __call__(); the model calls __call__() (docs/architecture.md, "A new model '
     'variant")'),
    ('feed_forward', lambda cfg: None, "Transformer: the feed_forward part <lambda> cannot be "
     "called as factory(cfg, name='ffn') (got an unexpected keyword argument 'name'); expected "
     'that call (docs/architecture.md, "A new model variant")'),
    ('residual', parts.layer_norm, "Transformer: the residual part layer_norm cannot be called "
     "as factory(cfg, norm, name='residual') (too many positional arguments); expected that "
     'call (docs/architecture.md, "A new model variant")'),
    ('norm', 'layer_norm', 'Transformer: the norm part is a str; expected a factory called as '
     "factory(cfg, name='norm') (docs/architecture.md, \"A new model variant\")"),
    ('attention_fn', None, 'Transformer: attention_fn is a NoneType; expected a function '
     '(docs/architecture.md, "A new model variant")'),
], ids=['no-call', 'no-name', 'residual-signature', 'not-callable', 'attention-fn'])
def test_a_part_that_breaks_its_contract_is_named(part, value, message):
  with pytest.raises(TypeError) as info:
    model.Transformer(CFG, **{part: value})
  assert str(info.value) == message


def test_the_papers_parts_and_every_example_variant_pass():
  assert model.Transformer(CFG).parts == parts.PAPER
  full = model.Transformer(CFG, embedding=parts.embedding, positions=None,
                           qk_transform=lambda x, positions, *, kind, role: x)
  assert isinstance(full, model.Transformer)
  examples = os.path.join(ROOT, 'examples', 'variants.py')
  for name in ('gqa', 'rotary', 't5_bias', 'pre_rmsnorm', 'swiglu', 'switch_moe',
               'sliding_window'):
    assert isinstance(variant.build(f'{examples}:{name}', CFG.replace(num_heads=4)),
                      model.Transformer)


def test_an_embedding_subclass_keeps_its_methods_and_binding_skips_the_check():
  class Doubled(layers.SharedEmbedding):
    def __call__(self, ids):
      return super().__call__(ids) * 2

  net = model.Transformer(CFG, embedding=lambda cfg, *, name: Doubled(
      cfg.vocab_size, cfg.d_model, cfg.dtype, name=name))
  params = model.init_params(net, jax.random.PRNGKey(0))
  assert set(params['shared_embedding']) == {'embedding'}


def test_a_variant_through_the_command_line_path_names_the_part(tmp_path):
  """`--config.model` builds through `variant.build`: the contract's message in its one line."""
  path = tmp_path / 'untied.py'
  path.write_text(
      'import flax.linen as nn\nimport t2t_jax\n\n\n'
      'class UntiedEmbedding(nn.Module):\n  cfg: t2t_jax.TransformerConfig\n\n'
      '  def __call__(self, ids):\n    return ids\n\n  def attend(self, x, transposed=None):\n'
      '    return x\n\n  def tables(self):\n    return None\n\n\n'
      'def untied(cfg):\n  return t2t_jax.Transformer(cfg, embedding=UntiedEmbedding)\n')
  with pytest.raises(variant.VariantError) as info:
    variant.build(f'{path}:untied', CFG)
  message = str(info.value)
  assert message.startswith(f'--config.model={path}:untied cannot be used (the factory raised '
                            'TypeError: Transformer: the embedding part UntiedEmbedding: its '
                            'module (UntiedEmbedding) has no transposed();'), message
  assert '\n' not in message
