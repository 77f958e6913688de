"""The training state and where its leaves live on the mesh (§5.2): `TrainState`, its
initialisation (`create_train_state`) and placement (`train_state_shardings`, ZeRO's
`zero_spec` for `shard_optimizer_state`).

Parameters are replicated over the 'data' axis; the optimizer state is replicated too, or with
`shard_optimizer_state` (ZeRO stage 2) split leaf by leaf along one dimension (`zero_dim`).
"""

import dataclasses
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from t2t_jax.model import transformer as model_lib
from t2t_jax.runtime import meshes
from t2t_jax.runtime.step_checks import DATA, check_mesh, check_optimizer

Array = jax.Array


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


@dataclasses.dataclass(frozen=True)
class TrainState:
  """What a training step changes: step count, parameters, optimizer state (a pytree)."""
  step: Array
  params: Any
  opt_state: Any


jax.tree_util.register_dataclass(TrainState, data_fields=['step', 'params', 'opt_state'],
                                 meta_fields=[])


def zero_dim(shape: Sequence[int], num_devices: int) -> Optional[int]:
  """The dimension ZeRO splits a leaf of `shape` along: the largest one `num_devices` divides
  (the first of equals), or None (kept whole on every device), e.g. for scalars."""
  dims = [d for d, n in enumerate(shape) if n > 0 and n % num_devices == 0]
  return max(dims, key=lambda d: shape[d]) if dims else None


def zero_spec(shape: Sequence[int], num_devices: int) -> P:
  """The PartitionSpec of a ZeRO-sharded leaf: 'data' at `zero_dim`, P() if there is none."""
  dim = zero_dim(shape, num_devices)
  return P() if dim is None else P(*(DATA if d == dim else None for d in range(len(shape))))


def _leaf_shardings(tree, mesh: Mesh, shard: bool):
  """NamedShardings for every leaf of `tree` (arrays or ShapeDtypeStructs): ZeRO or replicated."""
  return jax.tree_util.tree_map(
      lambda x: NamedSharding(mesh, zero_spec(x.shape, mesh.shape[DATA]) if shard else P()),
      tree)


def match_params(tree, params, values, default):
  """For every leaf of `tree` (an optimizer state: Adam's moments, an average of the weights,
  a mask's leaves), the leaf of `values` (shaped as `params`: shardings or PartitionSpecs)
  of the parameter it mirrors: the parameter whose path ends the leaf's path, with the same
  shape; `default` for the others (counts, factored moments)."""
  from t2t_jax.model import param_paths  # pylint: disable=import-outside-toplevel
  by_path = {}
  for (path, x), v in zip(jax.tree_util.tree_leaves_with_path(params),
                          jax.tree_util.tree_leaves(values, is_leaf=lambda v: isinstance(
                              v, (NamedSharding, P)))):
    by_path[tuple(param_paths.path_name(path).split('/'))] = (tuple(x.shape), v)

  def leaf(path, x):
    keys = tuple(param_paths.path_name(path).split('/'))
    for start in range(len(keys)):
      hit = by_path.get(keys[start:])
      if hit is not None and hit[0] == tuple(x.shape):
        return hit[1]
    return default
  return jax.tree_util.tree_map_with_path(leaf, tree)


def like_params(tree, params, param_shardings, mesh: Mesh):
  """`match_params` of shardings: a mirrored parameter's sharding, else replicated."""
  return match_params(tree, params, param_shardings, replicated(mesh))


def train_state_shardings(state: TrainState, mesh: Mesh, *,
                          shard_optimizer_state: bool, param_shardings: Any = None) -> TrainState:
  """Where each leaf of `state` (arrays or `jax.ShapeDtypeStruct`s) lives: a TrainState of
  NamedShardings. Step and parameters replicated; optimizer state replicated, or with
  `shard_optimizer_state` split over 'data' leaf by leaf (`zero_spec`).

  `param_shardings` (`meshes.param_shardings`, a mesh beyond data parallelism): parameters
  placed by them and every optimizer leaf that mirrors a parameter placed as it (`like_params`).
  """
  if not isinstance(state, TrainState):
    raise TypeError(f'train_state_shardings: state is a {type(state).__name__}; expected a '
                    'TrainState')
  check_mesh('train_state_shardings', mesh)
  if param_shardings is not None:
    return TrainState(replicated(mesh), param_shardings,
                      like_params(state.opt_state, state.params, param_shardings, mesh))
  return TrainState(replicated(mesh), _leaf_shardings(state.params, mesh, False),
                    _leaf_shardings(state.opt_state, mesh, shard_optimizer_state))


def _init_fn(model: model_lib.ModelLike, optimizer: optax.GradientTransformation,
             seed: int) -> Callable[[], TrainState]:
  def init():
    params = model_lib.init_params(model, jax.random.PRNGKey(seed))
    return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))
  return init


def _abstract_state(model: model_lib.ModelLike,
                    optimizer: optax.GradientTransformation) -> TrainState:
  """The state's shapes and dtypes (`jax.ShapeDtypeStruct`s), computing nothing."""
  return jax.eval_shape(_init_fn(model, optimizer, 0))


def create_train_state(model: model_lib.ModelLike, optimizer: optax.GradientTransformation,
                       seed: int, mesh: Mesh, *, shard_optimizer_state: bool = False,
                       params: Any = None) -> TrainState:
  """Initial state, placed by `train_state_shardings`; parameters come from `seed` (same on
  every process), or are `params` (a fine-tune's start: shaped as the model's, any dtype and
  placement). The optimizer state is `optimizer.init` of them either way (an average of the
  weights starts at them, `training/ema.py`).

  Given `params` are copied, never aliased: the train step donates the state it is given,
  and a caller's arrays must outlive it ("Array has been deleted" otherwise).
  """
  check_optimizer('create_train_state', optimizer)
  check_mesh('create_train_state', mesh)
  init = _init_fn(model, optimizer, seed)
  shardings = train_state_shardings(jax.eval_shape(init), mesh,
                                    shard_optimizer_state=shard_optimizer_state,
                                    param_shardings=meshes.step_param_shardings(model, mesh))
  if params is None:
    return jax.jit(init, out_shardings=shardings)()
  expected = jax.tree_util.tree_structure(shardings.params)
  if jax.tree_util.tree_structure(params) != expected:
    raise ValueError('create_train_state: params is not shaped as the model\'s parameter tree '
                     f'({jax.tree_util.tree_structure(params)} against {expected})')

  def given(p):
    p = jax.tree_util.tree_map(lambda x, s: jnp.array(x, dtype=s.dtype, copy=True), p,
                               jax.eval_shape(init).params)
    return TrainState(jnp.zeros((), jnp.int32), p, optimizer.init(p))
  # Through host memory, as `replicate` does: process-local arrays and numpy both work.
  host = jax.tree_util.tree_map(np.asarray, params)
  return jax.jit(given, out_shardings=shardings)(host)
