"""t2t_jax.model.module_jit: jit with the module static, and a module that cannot be hashed
(a list attribute) compiled for its call instead of refused."""

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.model import incremental, module_jit, transformer as model

CFG = model.TransformerConfig(vocab_size=32, d_model=16, d_ff=32, num_heads=2, num_layers=1,
                              max_len=16, deterministic=True)
INPUTS = np.array([[5, 6, 7, 1, 0], [9, 10, 1, 0, 0]], np.int32)
TARGETS = np.array([[8, 9, 1, 0], [11, 1, 0, 0]], np.int32)


class _Listed(model.Transformer):
  """The paper's model with an attribute jit cannot hash."""
  notes: list = None


def test_a_module_with_a_list_attribute_initialises_and_checks_as_the_paper_model():
  listed = _Listed(CFG, notes=['unhashable'])
  params = model.init_params(listed, jax.random.PRNGKey(0))  # a ValueError from jit before
  jax.tree_util.tree_map(np.testing.assert_array_equal, params,
                         model.init_params(CFG, jax.random.PRNGKey(0)))
  assert incremental.check_incremental(listed, params, INPUTS, TARGETS) < 2e-5


def test_static_arguments_on_both_paths_and_one_program_for_equal_modules():
  traced = []

  @module_jit.jit_on_module(static_argnums=(2,), static_argnames=('double',))
  def embed(net, ids, scale, double=False):
    traced.append(net)
    out = net.apply({'params': params}, ids, method=model.Transformer.encode) * scale
    return out * 2 if double else out

  params = model.init_params(CFG, jax.random.PRNGKey(1))
  ids = jnp.asarray(INPUTS)
  want = model.Transformer(CFG).apply({'params': params}, ids, method=model.Transformer.encode)
  one = embed(model.Transformer(CFG), ids, 3.0)
  np.testing.assert_allclose(one, want * 3.0, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(embed(model.Transformer(CFG), ids, 3.0, double=True), one * 2)
  embed(model.Transformer(CFG), ids, 3.0)  # an equal module: the program of the first call
  assert len(traced) == 2
  np.testing.assert_allclose(embed(_Listed(CFG, notes=[]), ids, 3.0, double=True), one * 2)
  assert len(traced) == 3


def test_bind_shares_programs_of_equal_modules_and_compiles_an_unhashable_one_once():
  traced = []

  @module_jit.jit_on_module(static_argnums=(1,))
  def embed(net, scale, ids):
    traced.append(net)
    return net.apply({'params': params}, ids, method=model.Transformer.encode) * scale

  params = model.init_params(CFG, jax.random.PRNGKey(1))
  ids = jnp.asarray(INPUTS)
  want = model.Transformer(CFG).apply({'params': params}, ids, method=model.Transformer.encode)
  for net in (model.Transformer(CFG), model.Transformer(CFG)):  # equal: one program
    bound = embed.bind(net, 2.0)
    np.testing.assert_allclose(bound(ids), want * 2.0, rtol=1e-5, atol=1e-6)
    assert bound.lower(ids).compile() is not None
  assert len(traced) == 1
  listed = embed.bind(_Listed(CFG, notes=[]), 2.0)  # unhashable: its own program, once
  for _ in range(3):
    np.testing.assert_allclose(listed(ids), want * 2.0, rtol=1e-5, atol=1e-6)
  assert len(traced) == 2
