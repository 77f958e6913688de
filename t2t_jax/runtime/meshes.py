"""Meshes beyond data parallelism (`--config.mesh='data:2,fsdp:2,tensor:2'`): the mesh axes,
the rules that map the parameters' logical axes (`model/logical_axes.py`) onto them, and the
shardings of the parameters that follow.

The axes, outermost first (devices along `tensor` are neighbours, as Megatron wants them):
  data    batch-parallel: the batch's rows are split, parameters replicated (§5.2);
  fsdp    ZeRO-3: the batch's rows are split too, and every parameter, its gradient and its
          optimizer state are split along the dimension named 'embed' (d_model); XLA gathers
          a layer's parameters where it computes with them;
  tensor  Megatron-style splits within a layer: attention heads, the feed-forward's inner
          width d_ff and the vocabulary (embedding rows, logits columns).

A mesh of the `data` axis alone is today's data-parallel step (`parallel.py`: a shard_map,
explicit all-reduces), bitwise; any other is one program partitioned by XLA (GSPMD) from the
parameters' and the batch's shardings (`sharded_step.py`).
"""

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from t2t_jax import choices
from t2t_jax.model import logical_axes as logical_lib, param_paths
from t2t_jax.model import transformer as model_lib
from t2t_jax.runtime.step_checks import DATA, MESH_AXES, check_mesh

AXES = MESH_AXES
FSDP, TENSOR = AXES[1], AXES[2]
BATCH_AXES = (DATA, FSDP)  # the mesh axes a batch's rows are split over

# Logical axis -> mesh axis (None: replicated). The one table; a rule naming an axis the mesh
# lacks, or one of size 1, splits nothing.
LOGICAL_AXIS_RULES: Tuple[Tuple[str, Optional[str]], ...] = (
    ('vocab', TENSOR),      # embedding rows and logits columns: vocabulary-parallel softmax
    ('heads', TENSOR),      # W^Q and W^O by head: each device attends with its own heads
    ('kv_heads', TENSOR),   # W^K, W^V; fewer kv heads than the axis: replicated (GQA, below)
    ('mlp', TENSOR),        # W1 by column, W2 by row: one all-reduce per feed-forward
    ('embed', FSDP),        # d_model: ZeRO-3's split of every matrix
    ('kv', None),           # a head's width stays whole
    ('position', None),     # learned positions are few: replicated
    ('norm', None),         # LayerNorm's scale and bias: tiny, replicated
)
# Logical axes left whole, not refused, when the mesh axis does not divide them: grouped-query
# attention may have fewer kv heads than the tensor axis (each device then holds them all).
REPLICATE_IF_INDIVISIBLE = frozenset({'kv_heads'})


class MeshError(choices.ConfigError):
  """A mesh that cannot be built or honoured; the message names the axis and the dimension."""


def axis_sizes(spec: str, device_count: Optional[int],
               where: str = "config key 'mesh'") -> Dict[str, int]:
  """{axis: size} of `spec` (`choices.parse_mesh`; `device_count` None: the mesh as written,
  '' and -1 then left unresolved), in `AXES` order, axes of size 1 left out but 'data'."""
  sizes = choices.parse_mesh(spec, device_count, where)
  return {a: n for a, n in sizes.items() if n != 1 or a == DATA}


def make(spec: str = '', devices: Optional[Sequence[jax.Device]] = None,
         where: str = "config key 'mesh'") -> Mesh:
  """The mesh of `spec` over `devices` (default: all of every process). Axes of size 1 are
  left out but 'data', so 'data:8' (or '') is exactly `parallel.make_mesh()`."""
  devices = list(jax.devices() if devices is None else devices)
  sizes = axis_sizes(spec, len(devices), where)
  return Mesh(np.asarray(devices).reshape(tuple(sizes.values())), tuple(sizes))


def is_data_parallel(mesh: Mesh) -> bool:
  """True when the mesh splits nothing but the batch (over 'data'): the shard_map step of
  `parallel.py`."""
  return DATA in mesh.axis_names and all(n == 1 for a, n in mesh.shape.items() if a != DATA)


def check_step_mesh(where: str, mesh: Mesh, shard_optimizer_state: bool) -> None:
  """ValueError for ZeRO-2 (`shard_optimizer_state`) on a mesh without 'fsdp', which would not
  honour it: on a mesh with 'fsdp' the optimizer state is split already (ZeRO-3)."""
  if shard_optimizer_state and mesh.shape.get(FSDP, 1) == 1:
    raise MeshError(f'{where}: shard_optimizer_state=True on the mesh {dict(mesh.shape)}; '
                     "expected a mesh with an 'fsdp' axis (which splits the optimizer state "
                     "with the parameters), or 'data' alone")


def batch_spec(mesh: Mesh) -> P:
  """How a batch's rows are split: over 'data' and 'fsdp' (those the mesh has)."""
  axes = tuple(a for a in BATCH_AXES if a in mesh.axis_names)
  return P(axes[0] if len(axes) == 1 else axes)


def batch_devices(mesh: Mesh) -> int:
  """How many ways a batch's rows are split (rows must be a multiple of it)."""
  return math.prod(mesh.shape[a] for a in BATCH_AXES if a in mesh.axis_names)


def _rules(rules) -> Dict[str, Optional[str]]:
  return dict(LOGICAL_AXIS_RULES if rules is None else rules)


def spec_for(path: str, shape: Sequence[int], names: logical_lib.Axes, mesh: Mesh,
             rules=None) -> P:
  """The PartitionSpec of one parameter: each dimension's logical name through the rules,
  to a mesh axis the mesh has (size > 1) and that is not used by an earlier dimension.
  MeshError naming the axis, the parameter and the dimension when the axis does not divide
  it (but for `REPLICATE_IF_INDIVISIBLE`, left whole)."""
  if names is None:
    return P()
  table, used, out = _rules(rules), set(), []
  for dim, (name, size) in enumerate(zip(names, shape)):
    axis = table.get(name)
    if axis is None or axis not in mesh.axis_names or mesh.shape[axis] == 1 or axis in used:
      out.append(None)
      continue
    if size % mesh.shape[axis]:
      if name in REPLICATE_IF_INDIVISIBLE:
        out.append(None)
        continue
      raise MeshError(f"mesh axis '{axis}' ({mesh.shape[axis]} devices) does not divide "
                      f"dimension {dim} ('{name}', {size}) of {path} {tuple(shape)}; expected "
                      f"a size that divides {size}, or a mesh without '{axis}'")
    used.add(axis)
    out.append(axis)
  while out and out[-1] is None:
    out.pop()
  return P(*out)


def param_specs(model: model_lib.ModelLike, mesh: Mesh, rules=None) -> Any:
  """The PartitionSpec of every parameter of `model` on `mesh`: a tree shaped as
  `init_params`'."""
  shapes = model_lib.param_shapes(model)
  names = logical_lib.param_logical_axes(model)
  return jax.tree_util.tree_map_with_path(
      lambda path, x: spec_for(param_paths.path_name(path), x.shape,
                               names.get(param_paths.path_name(path)), mesh, rules), shapes)


def param_shardings(model: model_lib.ModelLike, mesh: Mesh, rules=None) -> Any:
  """Where each parameter of `model` lives on `mesh`: a tree of NamedShardings shaped as
  `init_params`', from the parts' logical axes (`param_logical_axes`) through `rules`
  ((logical axis, mesh axis or None) pairs; None: `LOGICAL_AXIS_RULES`). MeshError naming the
  axis, the parameter and the dimension for a mesh axis that does not divide what it splits."""
  check_mesh('param_shardings', mesh)
  return jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), param_specs(model, mesh, rules),
                                is_leaf=lambda x: isinstance(x, P))


def step_param_shardings(model: model_lib.ModelLike, mesh: Mesh, rules=None) -> Any:
  """The parameters' shardings a training step places them by: None on a data-parallel mesh
  (replicated, the shard_map step), `param_shardings` on any other."""
  return None if is_data_parallel(mesh) else param_shardings(model, mesh, rules)


def place_params(params: Any, model: model_lib.ModelLike, mesh: Mesh) -> Any:
  """`params` (any placement; every process passes the same values) on `mesh` as a step reads
  them: replicated on a data-parallel mesh, split by `param_shardings` on any other."""
  placed = step_param_shardings(model, mesh)
  host = jax.tree_util.tree_map(np.asarray, params)
  if placed is None:
    return jax.device_put(host, NamedSharding(mesh, P()))
  return jax.device_put(host, placed)


def undeclared(model: model_lib.ModelLike) -> Tuple[str, ...]:
  """The parameters whose part declares no logical axes (replicated on every mesh)."""
  return tuple(p for p, n in logical_lib.param_logical_axes(model).items() if n is None)


def bytes_per_device(tree: Any, shardings: Any) -> int:
  """Bytes one device holds of `tree` (arrays or shape structs) placed by `shardings`."""
  total = 0
  for x, s in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(
      shardings, is_leaf=lambda v: isinstance(v, NamedSharding))):
    shard = s.shard_shape(tuple(x.shape)) if x.shape else ()
    total += int(np.prod(shard, dtype=np.int64)) * np.dtype(x.dtype).itemsize
  return total
