"""`--config.trainable` (training/freezing.py, model/param_paths.py): frozen parameters bitwise
unchanged (-0.0 included), no optimizer state for them, gradients of the trained ones equal to
a plain jax.grad of the whole model, no caller array deleted by the donating step."""

import jax
import numpy as np
import optax
import pytest

from t2t_jax import config as config_lib
from t2t_jax.configs import default
from t2t_jax.model import param_paths, transformer, variant
from t2t_jax.runtime import parallel, resolution
from t2t_jax.training import freezing, optim


def _config(**values):
  config = default.get_config()
  config.update(dict(d_model=16, d_ff=32, num_heads=2, num_layers=1, vocab_size=64,
                     warmup_steps=4, dropout_rate=0.0))
  config.update(values)
  return resolution.resolve(config)


def _batch():
  rng = np.random.RandomState(0)
  return {'inputs': rng.randint(2, 64, (8, 6)).astype(np.int32),
          'targets': rng.randint(2, 64, (8, 7)).astype(np.int32)}


def test_the_mask_matches_whole_paths():
  config = _config()
  shapes = transformer.param_shapes(variant.from_config(config))
  mask = param_paths.trainable_mask(shapes, 'decoder/.*')
  named = {param_paths.path_name(p): m for p, m in jax.tree_util.tree_leaves_with_path(mask)}
  assert named['decoder/layer_0/ffn/wi/kernel'] and not named['encoder/layer_0/ffn/wi/kernel']
  assert not named['shared_embedding/embedding']  # tied to both stacks (§3.4): not 'decoder/'
  # fullmatch: 'ffn' alone matches no path; '.*ffn.*' matches both stacks' feed-forwards.
  assert param_paths.counts(shapes, 'ffn')[0] == 0
  trained, frozen = param_paths.counts(shapes, '.*/ffn/.*')
  assert trained == 2 * (16 * 32 + 32 + 32 * 16 + 16)
  assert trained + frozen == transformer.count_params(shapes)


@pytest.mark.parametrize('pattern, says', [
    ('decoder/(', "config key 'trainable': 'decoder/(' is not a regular expression"),
])
def test_a_bad_pattern_is_refused_in_one_line(pattern, says):
  with pytest.raises(config_lib.ConfigError, match=r'^' + says.replace('(', r'\(')):
    config_lib.validate(_config(trainable=pattern))


def test_a_pattern_that_matches_nothing_is_refused_naming_the_paths():
  shapes = transformer.param_shapes(variant.from_config(_config()))
  with pytest.raises(config_lib.ConfigError, match='matches no parameter path .*start with '
                     'decoder, encoder, shared_embedding'):
    freezing.check_matches(shapes, 'decoder')


@pytest.mark.parametrize('shard', [False, True])
def test_frozen_parameters_stay_bitwise_and_get_no_state(shard):
  config = _config(trainable='decoder/.*', clip_grad_norm=0.5, ema_decay=0.9,
                   shard_optimizer_state=shard)
  net = variant.from_config(config)
  tx, _ = optim.make(config)
  mesh = parallel.make_mesh()
  start = transformer.init_params(net, jax.random.PRNGKey(3))
  # A -0.0 in every leaf: a +0.0 update would flip it to +0.0.
  start = jax.tree_util.tree_map(lambda x: x.at[(0,) * x.ndim].set(-0.0), start)
  host = jax.device_get(start)
  state = parallel.create_train_state(net, tx, 0, mesh, params=start,
                                      shard_optimizer_state=shard)
  trained = [p for p, m in jax.tree_util.tree_leaves_with_path(
      param_paths.trainable_mask(start, 'decoder/.*')) if m]
  # Adam's two moments for each trained leaf, and nothing for the frozen ones.
  moments = [x for x in jax.tree_util.tree_leaves(state.opt_state.inner) if x.ndim > 0]
  assert len(moments) == 2 * len(trained)
  step = parallel.make_train_step(net, tx, mesh, label_smoothing=0.1, seed=0,
                                  trainable=config.trainable, shard_optimizer_state=shard)
  for _ in range(2):
    state, metrics = step(state, parallel.shard_batch(_batch(), mesh))
  new = jax.tree_util.tree_leaves(jax.device_get(state.params))
  for (path, before), after in zip(jax.tree_util.tree_leaves_with_path(host), new):
    same = np.array_equal(before.view(np.uint32), np.asarray(after).view(np.uint32))
    assert same == (not param_paths.path_name(path).startswith('decoder/')), path
  # The caller's arrays were copied, not donated: still readable, bit for bit as given. (Not
  # jnp.sum against np.sum: two reductions, whose summation orders, and so last bits, follow
  # the CPU's vector width.)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(
      np.asarray(a).view(np.uint32), b.view(np.uint32)), start, host)
  assert float(metrics['grad_norm']) > 0
  # The average of a frozen leaf is the leaf itself, bitwise (ema.py's e + (1 - d)(p - e)).
  averaged = jax.device_get(state.opt_state.ema['encoder'])
  jax.tree_util.tree_map(np.testing.assert_array_equal, averaged, host['encoder'])


def test_the_gradient_norm_is_of_the_trained_leaves_before_clipping():
  """`grad_norm` against jax.grad of the per-token loss of the decoder's leaves alone."""
  config = _config(trainable='decoder/.*', clip_grad_norm=1e-3)
  net = variant.from_config(config)
  tx, _ = optim.make(config)
  mesh = parallel.make_mesh()
  state = parallel.create_train_state(net, tx, 0, mesh)
  params = jax.device_get(state.params)
  batch = _batch()
  step = parallel.make_train_step(net, tx, mesh, label_smoothing=0.1, seed=0,
                                  trainable=config.trainable)
  _, metrics = step(state, parallel.shard_batch(batch, mesh))

  def loss(p):
    sums = parallel.metric_sums(transformer.Transformer(net.cfg), p, batch, None, 0.1)
    return sums['loss'] / sums['weight']
  grads = jax.jit(jax.grad(loss))(params)  # one compile, not one per operation
  expected = optax.tree.norm(grads['decoder'])
  np.testing.assert_allclose(float(metrics['grad_norm']), float(expected), rtol=1e-5)
