"""Data parallelism over a device mesh: sharded train and eval steps (§5.2); a mesh that also
has 'fsdp' or 'tensor' axes (`--config.mesh`, `meshes.py`) gets the same steps as one GSPMD
program instead (`sharded_step.py`), its parameters placed by their logical axes.

One `Mesh` with a 'data' axis over every device of every process. Per-device work is a
`jax.shard_map` over 'data' with explicit collectives: each device computes *sums* of the
loss, its gradient and the non-padding token count on its shard of the batch; the sums are
`psum`-ed and only then divided, so 8 devices give the same update as 1 device on the same
global batch. Parameters are replicated.

The optimizer state is replicated too, unless `shard_optimizer_state` (ZeRO stage 2): then
every Adam moment and every gradient is split over 'data' along one dimension (`zero_dim`),
gradients are reduce-scattered instead of all-reduced, Adam updates only the local slice, and
the new parameters are all-gathered. Same update; optimizer memory per device divided by the
number of devices, and a reduce-scatter + all-gather (together the bytes of one all-reduce)
in place of the all-reduce.

Auxiliary losses: a module that sows a scalar into flax's 'losses' collection
(`self.sow('losses', name, value)`, `losses.AUX_LOSSES`) has it added to the objective,
times `aux_loss_weight`, and reported as the metric `aux_<name>` by the train and eval steps
(`metric_sums`, `objective`). The paper's model sows none: its loss and gradients are those
of the cross entropy alone, bitwise.

The building blocks of the step are public: `metric_sums` (one shard's sums), `make_grad_fn`
(the sharded gradient of the summed objective), `apply_gradients` (the optimizer update with
its non-finite guard); `make_train_step` is `apply_gradients(make_grad_fn(...))` jitted.
"""

import functools
from typing import Callable, Dict, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from t2t_jax.model import losses, param_paths, transformer as model_lib
from t2t_jax.model.array_checks import check_real
from t2t_jax.runtime import meshes
from t2t_jax.runtime.step_checks import (  # noqa: F401  (re-exported)
    DATA, PACKING_KEYS, check_batch, check_mesh, check_metrics, check_optimizer, check_params,
    check_shard_arguments, check_update_arguments)
from t2t_jax.runtime.train_state import (  # noqa: F401  (re-exported)
    TrainState, _abstract_state, _leaf_shardings, create_train_state, replicated,
    train_state_shardings, zero_dim, zero_spec)
# The multi-process start-up, where every caller has always found it.
from t2t_jax.runtime.distributed import (  # noqa: F401  (re-exported)
    DistributedError, initialize_distributed)

Array = jax.Array
Batch = Dict[str, np.ndarray]


def make_mesh(devices=None, axes: str = '') -> Mesh:
  """A 1-D mesh named 'data' over `devices` (default: all devices of all processes); with
  `axes` (`--config.mesh`'s form, e.g. 'data:2,fsdp:2,tensor:2', one size may be -1) the mesh
  of those axes (`runtime/meshes.py`, docs/meshes.md)."""
  devices = jax.devices() if devices is None else devices
  bad = next((d for d in np.asarray(devices, dtype=object).flat
              if not isinstance(d, jax.Device)), None)
  if bad is not None:
    raise TypeError(f'make_mesh: devices holds a {type(bad).__name__} ({bad!r}); expected '
                    'jax devices (jax.devices(), or a slice of it)')
  if not len(devices):  # pylint: disable=g-explicit-length-test  (a list or an array)
    raise ValueError('make_mesh: devices is empty; expected one device or more '
                     '(None: all devices)')
  if axes:
    return meshes.make(axes, list(devices), where='make_mesh: axes')
  return Mesh(np.asarray(devices), (DATA,))


def data_sharded(mesh: Mesh) -> NamedSharding:
  """A batch's sharding: rows split over 'data' (and 'fsdp', `meshes.batch_spec`)."""
  return NamedSharding(mesh, meshes.batch_spec(mesh))


def replicate(tree, mesh: Mesh):
  """Places every leaf of `tree` on all devices of `mesh` (every process passes the same
  values; they go through host memory, so process-local device arrays are accepted)."""
  return jax.device_put(jax.tree_util.tree_map(np.asarray, tree), replicated(mesh))


def shard_batch(batch: Batch, mesh: Mesh) -> Dict[str, Array]:
  """Builds global arrays from this process's rows: `[local_rows, L]` -> `[global_rows, L]`.

  Each process passes only its own shard; rows must divide evenly over its local devices.
  """
  if not hasattr(batch, 'items'):
    raise TypeError(f'shard_batch: batch is a {type(batch).__name__}; expected a dict')
  check_mesh('shard_batch', mesh)
  sharding = data_sharded(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
          for k, v in batch.items()}


def metric_sums(model: model_lib.ModelLike, params, batch, dropout_rng,
                label_smoothing: float) -> Dict[str, Array]:
  """Per-device sums of loss, nll, correct tokens and token count for one shard, and of each
  auxiliary loss the model sows.

  `batch` holds `inputs` and `targets`, and for packed rows the `PACKING_KEYS` too. The model
  is applied with the 'losses' collection mutable: each name sown there
  (`losses.sown_losses`, summed over the modules that sow it) gives `aux_<name>`, the value
  times the shard's token count `weight`, so that it sums over devices and micro-batches as
  the cross entropy does and `aux_<name> / weight` is its token-weighted mean.
  Checked while tracing (`step_checks.check_batch`), ids against the vocabulary only when
  their values are known (not under `jit`, where they give a non-finite loss).
  """
  net = model_lib.as_model(model)
  check_shard_arguments('metric_sums', net.cfg, params, batch, dropout_rng)
  label_smoothing = losses.check_label_smoothing('metric_sums', label_smoothing)
  packing = {k: batch[k] for k in PACKING_KEYS if k in batch}
  logits, state = net.apply(
      {'params': params}, batch['inputs'], batch['targets'], **packing,
      rngs={} if dropout_rng is None else {'dropout': dropout_rng}, mutable=[losses.AUX_LOSSES])
  weights = losses.padding_weights(batch['targets'])
  metrics = losses.compute_metrics(logits, batch['targets'], weights, label_smoothing)
  for name, value in losses.sown_losses(state.get(losses.AUX_LOSSES, {})).items():
    metrics[losses.AUX_PREFIX + name] = value * metrics['weight']
  return metrics


def aux_keys(metrics: Dict[str, Array]) -> Tuple[str, ...]:
  """The auxiliary-loss metrics (`aux_<name>`) of a dict of metric sums, sorted."""
  return tuple(sorted(k for k in metrics if k.startswith(losses.AUX_PREFIX)))


def objective(metrics: Dict[str, Array], aux_loss_weight: float = 1.0) -> Array:
  """The summed loss the gradient is of: `loss` (label-smoothed cross entropy), plus
  `aux_loss_weight` times the sum of the `aux_<name>` sums; `loss` itself (the same array)
  when the model sows none. `metrics`: a dict of scalar sums holding 'loss'."""
  check_metrics('objective', metrics, ('loss',))
  check_real('objective', 'aux_loss_weight', aux_loss_weight)
  aux = aux_keys(metrics)
  if not aux:
    return metrics['loss']
  return metrics['loss'] + aux_loss_weight * sum(metrics[k] for k in aux)


def _reduce_scatter(grad: Array, num_devices: int) -> Array:
  """Inside the shard_map: this device's slice (along `zero_dim`) of the sum of `grad` over
  'data'; the whole sum for a leaf ZeRO keeps whole."""
  dim = zero_dim(grad.shape, num_devices)
  if dim is None:
    return jax.lax.psum(grad, DATA)
  return jax.lax.psum_scatter(grad, DATA, scatter_dimension=dim, tiled=True)


def make_grad_fn(model: model_lib.ModelLike, mesh: Mesh, label_smoothing: float, *,
                 shard_gradients: bool = False, aux_loss_weight: float = 1.0,
                 trainable: str = '') -> Callable:
  """(params, batch, rng) -> (summed gradients, summed metrics), reduced over all devices.

  Gradients are of the summed `objective` (the loss sum, plus `aux_loss_weight` times the
  sown auxiliary losses' sums); divide by `metrics['weight']` (after accumulating all
  micro-batches) to get the gradient of the per-token mean. `batch` is sharded over 'data'
  (`shard_batch`); `rng` is the step's dropout key, folded with each device's index. The
  gradients are replicated, or with `shard_gradients` reduce-scattered to the ZeRO sharding
  (`zero_spec`) of each leaf. `metrics` are `metric_sums` summed over devices.
  `trainable` (`--config.trainable`, a regular expression over parameter paths,
  `param_paths.trainable_mask`): the other leaves are constants of the loss, so their
  gradients are zero and XLA drops the work that only they need ('': every leaf).
  """
  check_mesh('make_grad_fn', mesh)
  label_smoothing = losses.check_label_smoothing('make_grad_fn', label_smoothing)
  check_real('make_grad_fn', 'aux_loss_weight', aux_loss_weight)
  train_model = model_lib.as_model(model, deterministic=False, decode=False)
  loss_fn = summed_objective(train_model, label_smoothing, aux_loss_weight, trainable)
  if not meshes.is_data_parallel(mesh):
    from t2t_jax.runtime import sharded_step  # pylint: disable=import-outside-toplevel
    meshes.check_step_mesh('make_grad_fn', mesh, shard_gradients)
    return sharded_step.grad_fn(train_model, mesh, loss_fn)
  num_devices = mesh.shape[DATA]

  def per_device(params, batch, rng):
    # Different dropout masks on every device, reproducible from (rng, device index).
    rng = jax.random.fold_in(rng, jax.lax.axis_index(DATA))
    grads, metrics = jax.grad(loss_fn, has_aux=True)(params, batch, rng)
    if not shard_gradients:
      return jax.lax.psum((grads, metrics), DATA)
    return (jax.tree_util.tree_map(lambda g: _reduce_scatter(g, num_devices), grads),
            jax.lax.psum(metrics, DATA))

  def grad_fn(params, batch, rng):
    check_params('make_grad_fn', params)
    check_batch('make_grad_fn', batch, train_model.cfg.vocab_size, row_multiple=num_devices,
                source_vocab_size=train_model.cfg.input_vocab_size)
    # The gradients' out_specs follow the parameter shapes, known once `params` is traced.
    grad_specs = (jax.tree_util.tree_map(lambda p: zero_spec(p.shape, num_devices), params)
                  if shard_gradients else P())
    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(DATA), P()),
                         out_specs=(grad_specs, P()), check_vma=False)(params, batch, rng)

  return grad_fn


def summed_objective(train_model: model_lib.Transformer, label_smoothing: float,
                     aux_loss_weight: float, trainable: str) -> Callable:
  """(params, batch, dropout key) -> (`objective` of the batch's `metric_sums`, the sums): what
  every step differentiates, on a device's shard or on the whole batch. The leaves `trainable`
  does not match are constants of it (`make_grad_fn`)."""
  def loss_fn(p, batch, rng):
    if trainable:
      p = jax.tree_util.tree_map(lambda keep, x: x if keep else jax.lax.stop_gradient(x),
                                 param_paths.trainable_mask(p, trainable), p)
    metrics = metric_sums(train_model, p, batch, rng, label_smoothing)
    return objective(metrics, aux_loss_weight), metrics
  return loss_fn


def apply_gradients(state: TrainState, optimizer: optax.GradientTransformation, grad_sums,
                    metrics: Dict[str, Array]) -> Tuple[TrainState, Dict[str, Array]]:
  """One optimizer update with gradients normalised by the global token count.

  Guarded: if the loss, an auxiliary loss or any gradient is not finite, parameters and
  optimizer state stay as they were (the step counter still advances past the batch), the
  step's metric sums are zeroed and `metrics['nonfinite']` is 1. `metrics['grad_norm']` is the
  global L2 norm of the per-token gradients, before the optimizer clips them (if it does). `grad_sums` and `metrics`
  are what `make_grad_fn` returns (summed over micro-batches, if any); `state` is a
  `TrainState` of `optimizer`: each is checked while tracing (`check_update_arguments`:
  gradients shaped as the parameters, the optimizer state as `optimizer.init` makes it).
  """
  check_update_arguments('apply_gradients', state, TrainState, optimizer, grad_sums, metrics)
  grads = jax.tree_util.tree_map(lambda g: g / jnp.maximum(metrics['weight'], 1.0), grad_sums)
  finite = jnp.isfinite(metrics['loss']) & jnp.all(jnp.stack(
      [jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
  for key in aux_keys(metrics):
    finite = finite & jnp.isfinite(metrics[key])

  def update():
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), opt_state

  # One branch on one flag. A per-leaf `where(finite, new, old)` lets XLA fuse the whole chain
  # of per-leaf checks into every leaf's select: O(leaves^2) ops (25k at 3+3 layers), and a
  # third of the step's compile time.
  params, opt_state = jax.lax.cond(finite, update, lambda: (state.params, state.opt_state))
  state = TrainState(state.step + 1, params, opt_state)
  metrics = dict(metrics, grad_norm=optax.tree.norm(grads))
  metrics = {k: jnp.where(finite, v, 0.0) for k, v in metrics.items()}
  metrics['nonfinite'] = 1.0 - finite.astype(jnp.float32)
  return state, metrics


def _inject_nonfinite(metrics: Dict[str, Array], step: Array,
                      steps: Sequence[int]) -> Dict[str, Array]:
  """Test hook (`config.debug_nonfinite_steps`): a NaN loss at the given 1-based steps."""
  steps = tuple(int(s) for s in steps if s > 0)
  if not steps:
    return metrics
  hit = jnp.any(step + 1 == jnp.asarray(steps, jnp.int32))
  return dict(metrics, loss=jnp.where(hit, jnp.nan, metrics['loss']))


def dropout_rng(seed: int, step: Array) -> Array:
  """The dropout key of a step: a function of (seed, step) alone, so resume is exact."""
  return jax.random.fold_in(jax.random.PRNGKey(seed + 1), step)


def make_train_step(model: model_lib.ModelLike, optimizer: optax.GradientTransformation,
                    mesh: Mesh, *, label_smoothing: float, seed: int,
                    debug_nonfinite_steps: Sequence[int] = (),
                    shard_optimizer_state: bool = False,
                    aux_loss_weight: float = 1.0, trainable: str = '') -> Callable:
  """Jitted (state, batch) -> (state, metrics): one update on one global batch.

  `batch` holds `inputs` and `targets` `[global_rows, length]` int32 sharded over 'data'
  (and, packed, the `PACKING_KEYS` of the same shape).
  The state buffers are donated; the new state is placed by `train_state_shardings` (with
  `shard_optimizer_state`: gradients reduce-scattered, Adam on the slices, parameters
  all-gathered). `metrics` are global sums (loss, nll, correct, weight, and `aux_<name>` for
  each auxiliary loss the model sows, added to the objective times `aux_loss_weight`),
  `grad_norm` and `nonfinite` (1 if the update was skipped, see `apply_gradients`).
  `trainable`: see `make_grad_fn` (the optimizer freezes the others: `training.freezing`).
  """
  check_optimizer('make_train_step', optimizer)
  check_mesh('make_train_step', mesh)
  losses.check_label_smoothing('make_train_step', label_smoothing)
  grad_fn = make_grad_fn(model, mesh, label_smoothing, shard_gradients=shard_optimizer_state,
                         aux_loss_weight=aux_loss_weight, trainable=trainable)
  state_shardings = train_state_shardings(
      _abstract_state(model, optimizer), mesh, shard_optimizer_state=shard_optimizer_state,
      param_shardings=meshes.step_param_shardings(model, mesh))

  def step(state: TrainState, batch):
    grads, metrics = grad_fn(state.params, batch, dropout_rng(seed, state.step))
    metrics = _inject_nonfinite(metrics, state.step, tuple(debug_nonfinite_steps))
    return apply_gradients(state, optimizer, grads, metrics)

  return jax.jit(step, donate_argnums=(0,), out_shardings=(state_shardings, replicated(mesh)))


def make_accumulating_steps(model: model_lib.ModelLike, optimizer: optax.GradientTransformation,
                            mesh: Mesh, *, label_smoothing: float, seed: int,
                            debug_nonfinite_steps: Sequence[int] = (),
                            shard_optimizer_state: bool = False,
                            aux_loss_weight: float = 1.0, trainable: str = ''):
  """For gradient accumulation: (grad_step, apply_step) jitted functions.

  grad_step(params, batch, step, micro) -> (grad sums, metric sums) for one micro-batch;
  apply_step(state, grad sums, metric sums) -> (state, metrics). Summing token-weighted gradients over
  micro-batches and dividing once by the total token count is exactly the gradient of the
  big batch (unlike averaging per-micro-batch means). With `shard_optimizer_state` the grad
  sums come (and are summed) in the ZeRO sharding: each device holds 1/devices of them.
  """
  check_optimizer('make_accumulating_steps', optimizer)
  check_mesh('make_accumulating_steps', mesh)
  losses.check_label_smoothing('make_accumulating_steps', label_smoothing)
  grad_fn = make_grad_fn(model, mesh, label_smoothing, shard_gradients=shard_optimizer_state,
                         aux_loss_weight=aux_loss_weight, trainable=trainable)
  abstract = _abstract_state(model, optimizer)
  placed = meshes.step_param_shardings(model, mesh)
  state_shardings = train_state_shardings(abstract, mesh, param_shardings=placed,
                                          shard_optimizer_state=shard_optimizer_state)
  grad_shardings = (placed if placed is not None
                    else _leaf_shardings(abstract.params, mesh, shard_optimizer_state))

  def grad_step(params, batch, step, micro):
    return grad_fn(params, batch, jax.random.fold_in(dropout_rng(seed, step), micro))

  def apply_step(state, grads, metrics):
    metrics = _inject_nonfinite(metrics, state.step, tuple(debug_nonfinite_steps))
    return apply_gradients(state, optimizer, grads, metrics)

  return (jax.jit(grad_step, out_shardings=(grad_shardings, replicated(mesh))),
          jax.jit(apply_step, donate_argnums=(0,),
                  out_shardings=(state_shardings, replicated(mesh))))


def make_eval_step(model: model_lib.ModelLike, mesh: Mesh, *,
                   label_smoothing: float = 0.1) -> Callable:
  """Jitted (params, batch) -> global metric sums, teacher-forced, no dropout; with the
  `aux_<name>` sums of the auxiliary losses the model sows (`metric_sums`).

  `label_smoothing`: epsilon_ls of the reported `loss` (`nll` has none); the default is the
  paper's 0.1 (§5.4, `configs/default.py`), the run's value is `config.label_smoothing`.
  Equal models on one mesh with one epsilon get the same step, so its compiled programs
  serve them all.
  """
  check_mesh('make_eval_step', mesh)
  label_smoothing = losses.check_label_smoothing('make_eval_step', label_smoothing)
  eval_model = model_lib.as_model(model, deterministic=True, decode=False)
  try:
    return _shared_eval_step(eval_model, mesh, label_smoothing)
  except TypeError:  # a model jit cannot hash (a list attribute): a step of its own
    return _eval_step(eval_model, mesh, label_smoothing)


def _eval_step(eval_model: model_lib.Transformer, mesh: Mesh, label_smoothing: float
               ) -> Callable:
  """`make_eval_step`'s jitted function, built."""
  if not meshes.is_data_parallel(mesh):  # one program over the whole batch, GSPMD
    return jax.jit(lambda params, batch: metric_sums(
        eval_model, params, batch, jax.random.PRNGKey(0), label_smoothing),
        out_shardings=replicated(mesh))

  def per_device(params, batch):
    metrics = metric_sums(eval_model, params, batch, jax.random.PRNGKey(0), label_smoothing)
    return jax.lax.psum(metrics, DATA)

  sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(DATA)), out_specs=P(),
                          check_vma=False)
  return jax.jit(sharded, out_shardings=replicated(mesh))


# Equal models on one mesh share one eval step, hence its compiled programs: the final test
# eval after training reuses the dev evals' programs of the same shapes (on the H200 each
# took 2.4-5.2 s to compile).
_shared_eval_step = functools.lru_cache(maxsize=16)(_eval_step)


def programs_one_at_a_time(mesh: Mesh) -> bool:
  """Whether independent collective programs (eval batches, accumulated micro-batches) must
  be waited for one by one on `mesh`: on XLA:CPU, two all-reducing programs in flight over
  several devices can deadlock in the collectives' rendezvous (XLA aborts the process after
  40 s). Accelerators run a device's programs in order, so they keep the overlap."""
  return mesh.size > 1 and mesh.devices.flat[0].platform == 'cpu'


def add_metrics(a: Optional[Dict[str, Array]], b: Dict[str, Array]) -> Dict[str, Array]:
  """Adds two dicts of metric sums (None acts as zero); stays on device."""
  return b if a is None else jax.tree_util.tree_map(jnp.add, a, b)
