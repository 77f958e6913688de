"""The step's public building blocks check their arguments (issue 51, 3): `metric_sums`,
`objective`, `sown_losses`, `make_grad_fn`, `apply_gradients` refuse a wrong argument in one
line naming it, at the boundary, while tracing; what they accept they compute as before."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh

import t2t_jax
from t2t_jax.model import losses, transformer as model
from t2t_jax.runtime import parallel

VOCAB = 24
CFG = model.TransformerConfig(vocab_size=VOCAB, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                              num_layers=1, max_len=32, deterministic=True)
INPUTS = np.array([[3, 4, 5, 1], [6, 7, 1, 0]], np.int32)
TARGETS = np.array([[8, 9, 1, 0], [10, 11, 12, 1]], np.int32)


@pytest.fixture(scope='module')
def params():
  return model.init_params(CFG, jax.random.PRNGKey(0))


def _sums(params, inputs=INPUTS, targets=TARGETS, **kw):
  return t2t_jax.metric_sums(CFG, params, {'inputs': inputs, 'targets': targets}, None,
                             kw.pop('label_smoothing', 0.1), **kw)


def test_metric_sums_of_a_good_batch_are_the_losses_of_the_logits(params):
  sums = _sums(params)
  logits = model.Transformer(CFG).apply({'params': params}, INPUTS, TARGETS)
  want = losses.compute_metrics(logits, TARGETS, losses.padding_weights(TARGETS), 0.1)
  assert set(sums) == {'loss', 'nll', 'correct', 'weight'} and float(sums['weight']) == 7.0
  for key, value in want.items():
    np.testing.assert_allclose(sums[key], value, rtol=1e-6)


@pytest.mark.parametrize('batch,error,message', [
    # 1 source row, 2 target rows: finite sums of a broadcast batch, before.
    ({'inputs': INPUTS[:1], 'targets': TARGETS}, ValueError,
     "metric_sums: batch['inputs'] has 1 rows but batch['targets'] 2; expected one target row "
     'per source row'),
    ({'inputs': INPUTS}, ValueError, "metric_sums: batch has no 'targets' (its keys: inputs); "
     "expected a dict of 'inputs' and 'targets'"),
    ({'inputs': INPUTS, 'targets': TARGETS.astype(np.float32)}, TypeError,
     "metric_sums: batch['targets'] is dtype float32; expected an array of integers"),
    ({'inputs': INPUTS, 'targets': TARGETS[0]}, ValueError,
     "metric_sums: batch['targets'] has shape (4,); expected 2 dimensions [rows, length]"),
    # An id outside the vocabulary gave a NaN loss; a negative one was accepted.
    ({'inputs': INPUTS, 'targets': np.where(TARGETS == 10, VOCAB + 3, TARGETS)}, ValueError,
     f"metric_sums: batch['targets'] holds the id {VOCAB + 3}, outside the vocabulary "
     f'[0, {VOCAB})'),
    ({'inputs': np.where(INPUTS == 6, -2, INPUTS), 'targets': TARGETS}, ValueError,
     "metric_sums: batch['inputs'] holds the id -2, outside the vocabulary"),
    ({'inputs': INPUTS, 'targets': TARGETS, 'targets_segmentation': INPUTS[:, :3]}, ValueError,
     "metric_sums: batch['targets_segmentation'] has shape (2, 3); expected that of "
     "batch['targets'], (2, 4)"),
], ids=['rows', 'no-targets', 'float-targets', 'rank', 'oov', 'negative', 'packing'])
def test_metric_sums_refuses_a_bad_batch_naming_it(params, batch, error, message):
  with pytest.raises(error) as info:
    t2t_jax.metric_sums(CFG, params, batch, None, 0.1)
  assert str(info.value).startswith(message), str(info.value)


def test_metric_sums_refuses_swapped_arguments_and_a_bad_label_smoothing(params):
  batch = {'inputs': INPUTS, 'targets': TARGETS}
  with pytest.raises(ValueError, match=r"^metric_sums: batch has no 'inputs' \(its keys: "
                     r'decoder, encoder, shared_embedding\)'):
    t2t_jax.metric_sums(CFG, batch, params, None, 0.1)  # params and batch swapped
  with pytest.raises(TypeError, match=r"^metric_sums: params is a str"):
    t2t_jax.metric_sums(CFG, 'params', batch, None, 0.1)
  with pytest.raises(TypeError, match=r"^metric_sums: label_smoothing is a str \('x'\); "
                     r'expected a number in \[0, 1\)'):
    t2t_jax.metric_sums(CFG, params, batch, None, 'x')
  with pytest.raises(TypeError, match=r'^metric_sums: dropout_rng is None; expected a PRNG'):
    t2t_jax.metric_sums(CFG.replace(deterministic=False, dropout_rate=0.1), params, batch,
                        None, 0.1)


def test_under_jit_the_ids_values_are_not_read_but_shapes_are(params):
  """Inside `jit` only structure, shapes and dtypes are known: an id outside the vocabulary
  is not seen (the loss is not finite, which the train step skips), a shape is."""
  fn = jax.jit(lambda p, b: t2t_jax.metric_sums(CFG, p, b, None, 0.1))
  bad = np.where(TARGETS == 10, VOCAB + 3, TARGETS)
  assert not np.isfinite(float(fn(params, {'inputs': INPUTS, 'targets': bad})['loss']))
  with pytest.raises(ValueError, match=r"batch\['inputs'\] has 1 rows but batch\['targets'\] 2"):
    fn(params, {'inputs': INPUTS[:1], 'targets': TARGETS})


def test_objective_is_a_scalar_or_refused():
  sums = {'loss': jnp.float32(3.0), 'weight': jnp.float32(2.0), 'aux_l2': jnp.float32(0.5)}
  assert float(t2t_jax.objective(sums, 2.0)) == 4.0
  assert t2t_jax.objective({'loss': sums['loss']}) is sums['loss']
  with pytest.raises(ValueError, match=r"^objective: metrics\['aux_l2'\] has shape \(3,\); "
                     'expected a scalar sum'):
    t2t_jax.objective(dict(sums, aux_l2=jnp.ones(3)))  # was an objective of shape (3,)
  with pytest.raises(ValueError, match=r"^objective: metrics has no 'loss' \(its keys: nll\)"):
    t2t_jax.objective({'nll': 1.0})
  with pytest.raises(TypeError, match=r'^objective: metrics is a str'):
    t2t_jax.objective('loss')
  with pytest.raises(ValueError, match=r'^objective: aux_loss_weight=nan; expected a finite'):
    t2t_jax.objective(sums, float('nan'))


def test_sown_losses_checks_its_collection():
  assert t2t_jax.sown_losses({}) == {}
  got = t2t_jax.sown_losses({'a': {'l2': (1.0,)}, 'b': {'l2': (jnp.float32(2.0),)}})
  assert list(got) == ['l2'] and float(got['l2']) == 3.0
  with pytest.raises(TypeError, match=r"^sown_losses: collection is a str; expected the "
                     r"'losses' collection, a dict"):
    t2t_jax.sown_losses('loss')
  with pytest.raises(losses.SownLossError, match=r"^auxiliary loss encoder/layer_0/ffn/vec "
                     r"sown into 'losses' has shape \(3,\); sow a scalar"):
    t2t_jax.sown_losses({'ffn': {'vec': (jnp.ones(3),)}}, prefix='encoder/layer_0')
  with pytest.raises(ValueError, match=r"^auxiliary loss ffn/name sown into 'losses' is a "
                     r'str; sow a float scalar'):
    t2t_jax.sown_losses({'ffn': {'name': ('big',)}})
  # main.py reports a ConfigError in one line, as a variant's other mistakes.
  assert issubclass(losses.SownLossError, t2t_jax.ConfigError)


def test_make_grad_fn_refuses_a_mesh_without_data_and_label_smoothing_at_once(params):
  rows = Mesh(np.asarray(jax.devices()[:2]), ('rows',))
  with pytest.raises(ValueError, match=r"^make_grad_fn: mesh axis 'rows' \(of \('rows',\)\) is "
                     r"not one a step splits anything over; expected axes among \('data', "):
    t2t_jax.make_grad_fn(CFG, rows, 0.1)
  mesh = t2t_jax.make_mesh()
  with pytest.raises(TypeError, match=r"^make_grad_fn: label_smoothing is a str \('x'\)"):
    t2t_jax.make_grad_fn(CFG, mesh, 'x')  # refused when made, not when first called
  with pytest.raises(ValueError, match=r'^make_eval_step: label_smoothing must be in \[0, 1\), '
                     r'got 1.0'):
    t2t_jax.make_eval_step(CFG, mesh, label_smoothing=1.0)
  with pytest.raises(TypeError, match=r'^make_train_step: label_smoothing is a NoneType'):
    t2t_jax.make_train_step(CFG, optax.adam(1e-3), mesh, label_smoothing=None, seed=0)
  grad_fn = t2t_jax.make_grad_fn(CFG, mesh, 0.1)
  batch = {'inputs': np.tile(INPUTS, (3, 1))[:6], 'targets': np.tile(TARGETS, (3, 1))[:6]}
  with pytest.raises(ValueError, match=r"^make_grad_fn: batch has 6 rows; expected a multiple "
                     r"of the mesh's 8 'data' devices"):
    grad_fn(params, batch, jax.random.PRNGKey(0))


@pytest.fixture(scope='module')
def update(params):
  """(state, optimizer, grad sums, metric sums) of one good step on one device."""
  mesh = t2t_jax.make_mesh(jax.devices()[:1])
  tx = optax.adam(1e-3)
  state = t2t_jax.create_train_state(CFG, tx, 0, mesh)
  grads, sums = jax.jit(t2t_jax.make_grad_fn(CFG, mesh, 0.1))(
      state.params, {'inputs': INPUTS, 'targets': TARGETS}, jax.random.PRNGKey(0))
  return state, tx, grads, sums


def test_apply_gradients_refuses_gradients_of_other_shapes(update):
  state, tx, grads, sums = update
  new, metrics = jax.jit(t2t_jax.apply_gradients, static_argnums=1)(state, tx, grads, sums)
  assert int(new.step) == 1 and float(metrics['nonfinite']) == 0.0
  bias = grads['decoder']['layer_0']['ffn']['wi']['bias']
  bad = jax.tree_util.tree_map(lambda g: g, grads)
  bad['decoder']['layer_0']['ffn']['wi']['bias'] = bias[:1]  # broadcast into the update, before
  with pytest.raises(ValueError, match=r"^apply_gradients: grad_sums\['decoder'\]\['layer_0'\]"
                     r"\['ffn'\]\['wi'\]\['bias'\] has shape \(1,\), state.params \(32,\); "
                     r"expected gradients of state.params \(make_grad_fn's\)"):
    t2t_jax.apply_gradients(state, tx, bad, sums)
  del bad['decoder']
  with pytest.raises(ValueError, match=r"^apply_gradients: grad_sums\['decoder'\]\S* is "
                     r'missing \(state.params has it, of shape \([\d, ]+\)\) \(\d+ more differ\)'):
    t2t_jax.apply_gradients(state, tx, bad, sums)


def test_apply_gradients_refuses_bad_metrics_swapped_arguments_and_another_optimizer(update):
  state, tx, grads, sums = update
  with pytest.raises(ValueError, match=r"^apply_gradients: metrics has no 'weight' \(its keys: "
                     r'correct, loss, nll\)'):
    t2t_jax.apply_gradients(state, tx, grads, {k: v for k, v in sums.items() if k != 'weight'})
  with pytest.raises(ValueError, match=r"^apply_gradients: metrics has no 'loss' \(its keys: "
                     r'decoder, encoder, shared_embedding\)'):
    t2t_jax.apply_gradients(state, tx, sums, grads)  # grads and metrics swapped
  with pytest.raises(TypeError, match=r'^apply_gradients: state is a dict; expected a '
                     r'TrainState'):
    t2t_jax.apply_gradients(state.params, tx, grads, sums)
  with pytest.raises(ValueError, match=r"^apply_gradients: state.opt_state\S* \(of shape "
                     r'\(\)\) is not in optimizer.init\(params\) \(\d+ more differ\); expected '
                     r'the state of this optimizer'):
    t2t_jax.apply_gradients(state, optax.sgd(1e-3), grads, sums)
