"""Data parallelism: 8 devices give the same update as 1 device on the same global batch."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from configs import default
from t2t_jax import losses, model, optim, parallel

CFG = model.TransformerConfig(vocab_size=48, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                              num_layers=2, max_len=32, dropout_rate=0.0)


def _optimizer():
  c = default.get_config()
  c.d_model, c.warmup_steps = 32, 10
  return optim.make_optimizer(c)


def _batch(rows=16, length=12, seed=0):
  rng = np.random.RandomState(seed)
  inputs = rng.randint(2, 48, (rows, length)).astype(np.int32)
  targets = rng.randint(2, 48, (rows, length)).astype(np.int32)
  for r in range(rows):  # varied padding so devices hold different token counts
    inputs[r, rng.randint(3, length):] = 0
    targets[r, rng.randint(2, length):] = 0
  return {'inputs': inputs, 'targets': targets}


def _train(mesh, batches, steps=2):
  opt = _optimizer()
  state = parallel.create_train_state(CFG, opt, seed=0, mesh=mesh)
  step = parallel.make_train_step(CFG, opt, mesh, label_smoothing=0.1, seed=0)
  all_metrics = []
  for b in batches[:steps]:
    state, metrics = step(state, parallel.shard_batch(b, mesh))
    all_metrics.append(jax.device_get(metrics))
  return jax.device_get(state), all_metrics


def test_eight_devices_equal_one_device():
  assert jax.device_count() == 8
  batches = [_batch(seed=0), _batch(seed=1)]
  state8, metrics8 = _train(parallel.make_mesh(), batches)
  state1, metrics1 = _train(parallel.make_mesh(jax.devices()[:1]), batches)
  for a, b in zip(metrics8, metrics1):
    for k in a:
      np.testing.assert_allclose(a[k], b[k], rtol=1e-5)
  assert int(state8.step) == int(state1.step) == 2
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                         state8.params, state1.params)
  # The update moved the parameters (the comparison is not vacuous).
  init = model.init_params(CFG, jax.random.PRNGKey(0))
  moved = jax.tree_util.tree_map(lambda a, b: float(np.abs(a - b).max()), state8.params, init)
  assert max(jax.tree_util.tree_leaves(moved)) > 1e-4


def test_train_step_equals_plain_reference():
  """Sharded step == jax.grad of (loss sum / token count) on one device, then Adam."""
  batch = _batch(seed=3)
  mesh = parallel.make_mesh()
  state, metrics = _train(mesh, [batch], steps=1)
  params = model.init_params(CFG, jax.random.PRNGKey(0))

  def mean_loss(p):
    logits = model.Transformer(CFG.replace(deterministic=True)).apply(
        {'params': p}, batch['inputs'], batch['targets'])
    w = losses.padding_weights(jnp.asarray(batch['targets']))
    loss, weight = losses.label_smoothed_cross_entropy(logits, batch['targets'], w, 0.1)
    return loss / weight, weight
  (loss, weight), grads = jax.value_and_grad(mean_loss, has_aux=True)(params)
  opt = _optimizer()
  updates, _ = opt.update(grads, opt.init(params), params)
  expected = optax.apply_updates(params, updates)
  np.testing.assert_allclose(metrics[0]['loss'] / metrics[0]['weight'], loss, rtol=1e-5)
  assert metrics[0]['weight'] == weight == float((batch['targets'] != 0).sum())
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                         state.params, expected)


def test_gradient_accumulation_equals_the_big_batch():
  big = _batch(rows=16, seed=4)
  halves = [{k: v[:8] for k, v in big.items()}, {k: v[8:] for k, v in big.items()}]
  mesh = parallel.make_mesh()
  opt = _optimizer()
  full_state, _ = _train(mesh, [big], steps=1)
  state = parallel.create_train_state(CFG, opt, seed=0, mesh=mesh)
  grad_step, apply_step = parallel.make_accumulating_steps(CFG, opt, mesh, label_smoothing=0.1,
                                                           seed=0)
  grads = metrics = None
  for micro, half in enumerate(halves):
    g, m = grad_step(state.params, parallel.shard_batch(half, mesh), state.step, micro)
    grads = g if grads is None else jax.tree_util.tree_map(jnp.add, grads, g)
    metrics = parallel.add_metrics(metrics, m)
  state, _ = jax.device_get(apply_step(state, grads, metrics))
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                         state.params, full_state.params)


def test_eval_step_sums_over_devices():
  batch = _batch(seed=5)
  params = model.init_params(CFG, jax.random.PRNGKey(0))
  mesh = parallel.make_mesh()
  metrics = jax.device_get(parallel.make_eval_step(CFG, mesh, label_smoothing=0.1)(
      parallel.replicate(params, mesh), parallel.shard_batch(batch, mesh)))
  logits = model.Transformer(CFG.replace(deterministic=True)).apply(
      {'params': params}, batch['inputs'], batch['targets'])
  expected = losses.compute_metrics(logits, jnp.asarray(batch['targets']),
                                    losses.padding_weights(jnp.asarray(batch['targets'])), 0.1)
  for k in expected:
    np.testing.assert_allclose(metrics[k], expected[k], rtol=1e-5)


def test_nonfinite_step_is_skipped_and_counted():
  mesh = parallel.make_mesh()
  opt = _optimizer()
  state = parallel.create_train_state(CFG, opt, seed=0, mesh=mesh)
  initial = jax.device_get(state.params)
  step = parallel.make_train_step(CFG, opt, mesh, label_smoothing=0.1, seed=0,
                                  debug_nonfinite_steps=(1,))
  state, metrics = step(state, parallel.shard_batch(_batch(seed=0), mesh))
  metrics = jax.device_get(metrics)
  assert metrics['nonfinite'] == 1.0 and metrics['loss'] == 0.0 and metrics['weight'] == 0.0
  assert int(state.step) == 1
  jax.tree_util.tree_map(np.testing.assert_array_equal, jax.device_get(state.params), initial)
  assert int(jax.device_get(state.opt_state)[0].count) == 0  # Adam did not advance either
  state, metrics = step(state, parallel.shard_batch(_batch(seed=1), mesh))
  assert float(metrics['nonfinite']) == 0.0 and float(metrics['loss']) > 0
  moved = jax.tree_util.tree_map(lambda a, b: float(np.abs(a - b).max()),
                                 jax.device_get(state.params), initial)
  assert max(jax.tree_util.tree_leaves(moved)) > 1e-4
