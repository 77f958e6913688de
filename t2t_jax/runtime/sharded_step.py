"""The gradient on a mesh beyond data parallelism (`meshes.py`: 'fsdp' and 'tensor' axes): one
jitted program over the global batch that XLA partitions (GSPMD) from the shardings of the
parameters (`meshes.param_shardings`, from the parts' logical axes) and of the batch (rows
over 'data' and 'fsdp'), as maxtext and t5x do. No shard_map and no hand-written collective:
XLA gathers an fsdp-split layer where it computes with it, reduce-scatters its gradient, and
all-reduces a tensor-split layer's partial sums.

The result is one device's: the objective is the sum over the whole batch (`parallel.
summed_objective`), and the dropout key is the one device 0 of the data-parallel step folds
(`fold_in(key, 0)`); with jax's partitionable threefry, the masks do not depend on the mesh.
So every mesh gives one device's update up to float summation order.
"""

from typing import Callable

import jax
from jax.sharding import Mesh, NamedSharding

from t2t_jax.model import transformer as model_lib
from t2t_jax.runtime import meshes
from t2t_jax.runtime.step_checks import check_batch, check_params


def grad_fn(train_model: model_lib.Transformer, mesh: Mesh, loss_fn: Callable) -> Callable:
  """(params, batch, rng) -> (summed gradients placed as the parameters, summed metrics
  replicated): `parallel.make_grad_fn` on `mesh`. `loss_fn`: `parallel.summed_objective`."""
  shardings = meshes.param_shardings(train_model, mesh)
  rows = NamedSharding(mesh, meshes.batch_spec(mesh))
  row_multiple = meshes.batch_devices(mesh)

  def gradients(params, batch, rng):
    check_params('make_grad_fn', params)
    check_batch('make_grad_fn', batch, train_model.cfg.vocab_size, row_multiple=row_multiple,
                source_vocab_size=train_model.cfg.input_vocab_size)
    params = jax.lax.with_sharding_constraint(params, shardings)
    batch = jax.lax.with_sharding_constraint(batch, rows)
    grads, metrics = jax.grad(loss_fn, has_aux=True)(params, batch, jax.random.fold_in(rng, 0))
    return jax.lax.with_sharding_constraint(grads, shardings), metrics

  return gradients
