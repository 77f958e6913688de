"""`--mode=info`'s mesh part: for the configured `--config.mesh`, where each group of
parameters lives (its logical axes and their mesh axes, `runtime/meshes.py`) and the training
state's bytes per device, parameters plus optimizer state. Shapes only: nothing is placed, so
it describes a mesh of more devices than this machine has."""

import math
import re
from typing import Dict, List

import jax
import ml_collections
from jax.sharding import AbstractMesh, PartitionSpec as P

from t2t_jax.model import logical_axes, param_paths, transformer as model_lib, variant
from t2t_jax.runtime import meshes, train_state
from t2t_jax.training import optim


def _bytes(shape, dtype, spec: P, sizes: Dict[str, int]) -> int:
  """One device's bytes of a leaf split by `spec` over axes of `sizes`."""
  shard = list(shape)
  for dim, axes in enumerate(tuple(spec)):
    for axis in (axes,) if isinstance(axes, str) else (axes or ()):
      shard[dim] = -(-shard[dim] // sizes[axis])
  return math.prod(shard) * jax.numpy.dtype(dtype).itemsize


def _group(path: str) -> str:
  """'encoder/layer_3/ffn/wi/kernel' -> 'layer_*/ffn/wi/kernel': one line for every layer."""
  return re.sub(r'^(encoder|decoder)/layer_\d+/', 'layer_*/', path)


def _mib(n: int) -> str:
  return f'{n / 2 ** 20:.1f} MiB'


def _sizes(config: ml_collections.ConfigDict) -> Dict[str, int]:
  """{axis: size} of `config.mesh`, axes of size 1 left out but 'data'."""
  spec = str(config.mesh).strip()
  # '' or a -1: this machine's devices fill in; else the mesh as written, whatever this has.
  return meshes.axis_sizes(spec, jax.device_count() if not spec or '-1' in spec else None)


def _leaves(tree):
  return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, P))


def _placement_lines(net, shapes, specs, data_only: bool) -> List[str]:
  """Each parameter group's logical axes and PartitionSpec (not for data parallelism), the
  logical names no rule maps, and the parameters whose part declares none."""
  names = logical_axes.param_logical_axes(net)
  groups: Dict[str, tuple] = {}
  for (path, _), spec in zip(jax.tree_util.tree_leaves_with_path(shapes), _leaves(specs)):
    name = param_paths.path_name(path)
    groups.setdefault(_group(name), (names[name], spec))
  lines = [] if data_only else [f'  {group:<52} {str(axes):<28} {spec}'
                                for group, (axes, spec) in groups.items()]
  unruled = sorted({n for axes in names.values() for n in axes or ()
                    if n not in dict(meshes.LOGICAL_AXIS_RULES)})
  if unruled:  # a part's own names: meshes.LOGICAL_AXIS_RULES maps none of them
    lines.append(f'  logical axes without a rule, replicated: {", ".join(unruled)}')
  undeclared = dict.fromkeys(_group(p) for p in meshes.undeclared(net))
  if undeclared:
    lines.append(f'  replicated, their part declares no logical axes: {", ".join(undeclared)}')
  return lines


def _state_line(config, shapes, specs, sizes: Dict[str, int], data_only: bool) -> str:
  """The training state's bytes on one device: parameters plus optimizer state."""
  param_bytes = sum(_bytes(x.shape, x.dtype, s, sizes)
                    for x, s in zip(jax.tree_util.tree_leaves(shapes), _leaves(specs)))
  try:
    optimizer, _ = optim.make(config)
  except variant.VariantError as e:  # a recorded factory that cannot be loaded here
    return (f'  training state per device: parameters {_mib(param_bytes)}; optimizer state '
            f'unknown ({e.reason})')
  opt = jax.eval_shape(optimizer.init, shapes)
  if data_only:  # replicated, or ZeRO-2's split over 'data'
    zero = config.shard_optimizer_state
    opt_specs = jax.tree_util.tree_map(
        lambda x: train_state.zero_spec(x.shape, sizes['data']) if zero else P(), opt)
  else:
    opt_specs = train_state.match_params(opt, shapes, specs, P())
  opt_bytes = sum(_bytes(x.shape, x.dtype, s, sizes)
                  for x, s in zip(jax.tree_util.tree_leaves(opt), _leaves(opt_specs)))
  whole = sum(math.prod(x.shape) * x.dtype.itemsize
              for x in jax.tree_util.tree_leaves((shapes, opt)))
  return (f'  training state per device: parameters {_mib(param_bytes)} + optimizer state '
          f'{_mib(opt_bytes)} = {_mib(param_bytes + opt_bytes)} (of {_mib(whole)} in all)')


def describe(config: ml_collections.ConfigDict) -> str:
  """The lines (see the module docstring); a mesh the model cannot honour is a MeshError."""
  sizes = _sizes(config)
  net = variant.from_config(config)
  shapes = model_lib.param_shapes(net)
  specs = meshes.param_specs(net, AbstractMesh(tuple(sizes.values()), tuple(sizes)))
  data_only = all(n == 1 for a, n in sizes.items() if a != 'data')
  head = (f"mesh: {', '.join(f'{a}:{n}' for a, n in sizes.items())} "
          f'({math.prod(sizes.values())} devices)'
          + (' - data parallel: parameters replicated' if data_only else ''))
  return '\n'.join([head] + _placement_lines(net, shapes, specs, data_only)
                   + [_state_line(config, shapes, specs, sizes, data_only)])
