"""Logical axis names of the parameters (maxtext's and t5x's scheme): each part declares, for
each dimension of each parameter it creates, what the dimension *is* ('embed', 'vocab',
'heads', 'kv_heads', 'kv', 'mlp', 'position', 'norm'); `runtime/meshes.py` maps the names
to mesh axes by one table of rules. The model never names a mesh axis.

A part declares them with flax's `nn.with_logical_partitioning` around a parameter's
initializer, e.g. `nn.Dense(d_ff, kernel_init=nn.with_logical_partitioning(init, ('embed',
'mlp')))`: the initial values are unchanged (the wrapper only boxes them), and
`init_params` returns them unboxed. A parameter whose part declares nothing has `None` here
and is replicated on every mesh (`--mode=info` lists such parameters).

The paper's parameters and their names (`[shape]`, §3):
  embedding (and projection, source_embedding) `[vocab, d_model]`: ('vocab', 'embed')
  query kernel `[d_model, heads, d_k]`: ('embed', 'heads', 'kv'); key and value kernels:
    ('embed', 'kv_heads', 'kv'); out kernel `[heads, d_v, d_model]`: ('heads', 'kv', 'embed')
  ffn wi kernel `[d_model, d_ff]`: ('embed', 'mlp'), bias ('mlp',); wo kernel ('mlp', 'embed'),
    bias ('embed',)
  LayerNorm scale and bias `[d_model]`: ('norm',); learned positions: ('position', 'embed')
"""

from typing import Dict, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from t2t_jax.model import param_paths
from t2t_jax.model.transformer import ModelLike, as_model

Axes = Optional[Tuple[str, ...]]


def param_logical_axes(model: ModelLike) -> Dict[str, Axes]:
  """{'encoder/layer_0/ffn/wi/kernel': ('embed', 'mlp'), ...}: every parameter of `model`
  (the paths and order of `param_paths.shapes_by_path(init_params(model, ...))`), with the
  logical name of each of its dimensions, or None where its part declares none. Computes
  nothing (`jax.eval_shape`)."""
  net = as_model(model, deterministic=True, decode=False)
  dummy = jnp.ones((1, 8), jnp.int32)
  boxed = jax.eval_shape(lambda: net.init(jax.random.PRNGKey(0), dummy, dummy)['params'])
  is_box = lambda x: isinstance(x, nn.Partitioned)  # noqa: E731
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(boxed, is_leaf=is_box):
    names = tuple(leaf.names) if is_box(leaf) else None
    if names is not None and len(names) != len(leaf.value.shape):
      raise ValueError(f'{param_paths.path_name(path)}: {len(names)} logical axes {names} '
                       f'for a parameter of shape {tuple(leaf.value.shape)}; expected one '
                       'name (or None) per dimension')
    out[param_paths.path_name(path)] = names
  return out
