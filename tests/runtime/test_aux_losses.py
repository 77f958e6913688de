"""Auxiliary losses sown into flax's 'losses' collection: the paper's model is bitwise
unchanged, a sown loss is added to the objective times `aux_loss_weight` and reported by name
by the train and eval steps, through scanned stacks too; a non-scalar one is an error."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import t2t_jax
from t2t_jax.inference.evaluate import summarize
from t2t_jax.model import losses, parts, transformer as model
from t2t_jax.runtime import parallel

CFG = model.TransformerConfig(vocab_size=48, d_model=32, d_ff=64, num_heads=4, num_layers=2,
                              max_len=32, dropout_rate=0.1)


def _batch(rows=16, length=12, seed=0):
  rng = np.random.RandomState(seed)
  inputs = rng.randint(2, 48, (rows, length)).astype(np.int32)
  targets = rng.randint(2, 48, (rows, length)).astype(np.int32)
  for r in range(rows):
    inputs[r, rng.randint(3, length):] = 0
    targets[r, rng.randint(2, length):] = 0
  return {'inputs': inputs, 'targets': targets}


def _paper_grad_fn(net, mesh):
  """The gradient function as it was before auxiliary losses (apply without `mutable`)."""
  train_model = model.as_model(net, deterministic=False, decode=False)

  def per_device(params, batch, rng):
    rng = jax.random.fold_in(rng, jax.lax.axis_index('data'))
    def loss_fn(p):
      logits = train_model.apply({'params': p}, batch['inputs'], batch['targets'],
                                 rngs={'dropout': rng})
      metrics = losses.compute_metrics(logits, batch['targets'],
                                       losses.padding_weights(batch['targets']), 0.1)
      return metrics['loss'], metrics
    return jax.lax.psum(jax.grad(loss_fn, has_aux=True)(params), 'data')

  return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P('data'), P()),
                               out_specs=(P(), P()), check_vma=False))


def test_paper_model_loss_and_gradients_are_bitwise_unchanged():
  mesh = parallel.make_mesh()
  params = model.init_params(CFG, jax.random.PRNGKey(0))
  batch = parallel.shard_batch(_batch(), mesh)
  rng = jax.random.PRNGKey(3)
  grads, metrics = jax.jit(t2t_jax.make_grad_fn(CFG, mesh, 0.1))(params, batch, rng)
  want_grads, want_metrics = _paper_grad_fn(CFG, mesh)(params, batch, rng)
  assert set(metrics) == {'loss', 'nll', 'correct', 'weight'}  # nothing sown, nothing added
  for key in want_metrics:
    np.testing.assert_array_equal(metrics[key], want_metrics[key])
  jax.tree_util.tree_map(np.testing.assert_array_equal, grads, want_grads)




def _sowing_ffn(scale=1.0, shape=()):
  """A feed-forward part: the paper's FFN, sowing `scale * mean(kernel^2)` of its first dense
  layer as 'l2' (broadcast to `shape`)."""
  import flax.linen as nn  # pylint: disable=import-outside-toplevel

  class SowingFFN(nn.Module):
    cfg: model.TransformerConfig

    @nn.compact
    def __call__(self, x):
      ffn = parts.feed_forward(self.cfg, name='ffn')
      y = ffn(x)
      # Boxed with its logical axes while initialising (model/logical_axes.py): unbox it.
      kernel = nn.meta.unbox(ffn.variables['params']['wi']['kernel'])
      self.sow('losses', 'l2', jnp.broadcast_to(scale * jnp.mean(kernel ** 2), shape))
      return y

  return SowingFFN


def _l2_total(params):
  """The sum over every layer of mean(kernel^2): what the model sows in all."""
  return sum(float(jnp.mean(leaf ** 2)) for path, leaf in
             jax.tree_util.tree_leaves_with_path(params)
             if 'wi' in jax.tree_util.keystr(path) and 'kernel' in jax.tree_util.keystr(path))


@pytest.mark.parametrize('scan', [False, True], ids=['unrolled', 'scanned'])
def test_a_sown_loss_is_added_times_its_weight_and_reported(scan):
  mesh = parallel.make_mesh()
  net = model.Transformer(CFG.replace(scan_layers=scan), feed_forward=_sowing_ffn())
  params = model.init_params(net, jax.random.PRNGKey(0))
  assert 'ffn' in params['encoder']['layer_0']['ffn']  # the sowing part wraps the paper's
  batch = parallel.shard_batch(_batch(), mesh)
  rng = jax.random.PRNGKey(3)
  g0, m0 = jax.jit(parallel.make_grad_fn(net, mesh, 0.1, aux_loss_weight=0.0))(
      params, batch, rng)
  g2, m2 = jax.jit(parallel.make_grad_fn(net, mesh, 0.1, aux_loss_weight=2.0))(
      params, batch, rng)
  weight = float(m0['weight'])
  # Summed like the cross entropy: the value times each shard's token count, over devices.
  np.testing.assert_allclose(float(m0['aux_l2']) / weight, _l2_total(params), rtol=1e-5)
  np.testing.assert_array_equal(m0['loss'], m2['loss'])  # `loss` stays the cross entropy
  # d/dk [2 * weight * mean(k^2)] = 4 * weight * k / k.size, added to the weight-0 gradient.
  kernel = params['decoder']['layer_1']['ffn']['ffn']['wi']['kernel']
  added = (g2['decoder']['layer_1']['ffn']['ffn']['wi']['kernel']
           - g0['decoder']['layer_1']['ffn']['ffn']['wi']['kernel'])
  np.testing.assert_allclose(added, 4 * weight * kernel / kernel.size, rtol=2e-3, atol=1e-6)

  eval_sums = parallel.make_eval_step(net, mesh)(params, batch)
  assert summarize(eval_sums)['aux_l2'] == pytest.approx(_l2_total(params), rel=1e-5)


@pytest.mark.slow  # a whole run (or several compiles): the slow tier
def test_train_step_logs_and_guards_the_sown_loss():
  mesh = parallel.make_mesh()
  net = model.Transformer(CFG, feed_forward=_sowing_ffn())
  tx = optax.adam(1e-3)
  state = t2t_jax.create_train_state(net, tx, 0, mesh)
  step = t2t_jax.make_train_step(net, tx, mesh, label_smoothing=0.1, seed=0)
  state, metrics = step(state, parallel.shard_batch(_batch(), mesh))
  assert float(metrics['aux_l2']) > 0 and float(metrics['nonfinite']) == 0
  # A non-finite auxiliary loss skips the update like a non-finite cross entropy.
  bad = model.Transformer(CFG, feed_forward=_sowing_ffn(scale=jnp.nan))
  state = t2t_jax.create_train_state(bad, tx, 0, mesh)
  before = jax.device_get(state.params)
  step = t2t_jax.make_train_step(bad, tx, mesh, label_smoothing=0.1, seed=0)
  state, metrics = step(state, parallel.shard_batch(_batch(), mesh))
  assert float(metrics['nonfinite']) == 1
  jax.tree_util.tree_map(np.testing.assert_array_equal, jax.device_get(state.params), before)


@pytest.mark.parametrize('scan, layer', [(False, 'layer_0'), (True, r'layer_\*')],
                         ids=['unrolled', 'scanned'])
def test_a_non_scalar_sown_loss_is_an_error(scan, layer):
  mesh = parallel.make_mesh()
  net = model.Transformer(CFG.replace(scan_layers=scan), feed_forward=_sowing_ffn(shape=(3,)))
  params = model.init_params(net, jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match=rf"auxiliary loss (en|de)coder/{layer}/ffn/l2 sown into "
                     r"'losses' has shape \(3,\); sow a scalar"):
    # Refused while tracing (un-jitted, shard_map ran every operation eagerly: 17 s).
    jax.jit(parallel.make_grad_fn(net, mesh, 0.1))(params, parallel.shard_batch(_batch(), mesh),
                                                   jax.random.PRNGKey(0))


_VECTOR_VARIANT = '''
import flax.linen as nn
import jax.numpy as jnp
import t2t_jax
from t2t_jax.model import parts


class VecFFN(nn.Module):
  cfg: t2t_jax.TransformerConfig

  @nn.compact
  def __call__(self, x):
    y = parts.feed_forward(self.cfg, name='ffn')(x)
    self.sow('losses', 'vec', jnp.mean(y, axis=(0, 1))[:3])
    return y


def vec(cfg):
  return t2t_jax.Transformer(cfg, feed_forward=VecFFN)
'''


def test_a_non_scalar_sown_loss_through_main_is_one_line(corpus, tmp_path):
  """main.py reports it as a user's mistake (a ConfigError): one line naming the module path,
  no traceback, nothing trained."""
  from conftest import TINY, run_main  # pylint: disable=import-outside-toplevel
  variants = tmp_path / 'vector_loss.py'
  variants.write_text(_VECTOR_VARIANT)
  workdir = tmp_path / 'run'
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY,
                    f'--config.model={variants}:vec', '--config.num_train_steps=2',
                    '--config.eval_every_steps=0')
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert result.stderr.splitlines()[-1] == (
      "error: auxiliary loss decoder/layer_0/ffn/vec sown into 'losses' has shape (3,); sow a "
      'scalar (e.g. its mean over the batch)')
  assert not (workdir / 'checkpoints').exists() or not any((workdir / 'checkpoints').iterdir())
