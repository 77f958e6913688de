"""x W^Q, x W^K and x W^V (§3.2.2) as one matrix product, for decoding's cached step.

A decoding step multiplies a few rows (sentences x beams) by each projection, so each of the
three products costs mostly its own fixed overhead (a CPU GEMM call of 16 x 128 x 128 takes
about as long as one of 16 x 128 x 384). One product over the three kernels side by side
gives the same numbers: every output element is the same dot product over d_model, in the
same order (`tests/model/test_fused_projection.py` checks the values bit for bit, and
`benchmarks/peers/decode_ab.py` the translations of the bundled test set).
"""

from typing import Any, Mapping, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp

Array = jax.Array


def fused_head_projections(x: Array, params: Mapping[str, Any], names: Sequence[str],
                           dtype: Optional[Any] = None) -> Tuple[Array, ...]:
  """The head projections `names` of `params` applied to `x`, as one product.

  Args:
    x: `[..., d_model]` inputs.
    params: the attention layer's parameters: for each name a `kernel` `[d_model, heads,
      features]` (heads and features may differ between names: grouped-query attention's
      key and value heads) and, if the layer has them, a `bias` `[heads, features]`.
    names: e.g. ('query', 'key', 'value').
    dtype: the computation dtype (the layer's; None: the inputs' and kernels' promoted),
      as `flax.linen.DenseGeneral` casts them.

  Returns:
    One `[..., heads, features]` array per name, what `DenseGeneral` of each kernel gives.
  """
  kernels = [params[n]['kernel'] for n in names]
  biases = [params[n].get('bias') for n in names]
  if dtype is None:
    dtype = jnp.result_type(x, *kernels)
  widths = [k.shape[1] * k.shape[2] for k in kernels]
  kernel = jnp.concatenate([k.reshape(k.shape[0], -1) for k in kernels], axis=1)
  out = jax.lax.dot_general(x.astype(dtype), kernel.astype(dtype),
                            (((x.ndim - 1,), (0,)), ((), ())))
  parts = jnp.split(out, list(_offsets(widths)), axis=-1)
  results = []
  for part, k, b in zip(parts, kernels, biases):
    part = part.reshape(*part.shape[:-1], k.shape[1], k.shape[2])
    results.append(part if b is None else part + b.astype(dtype))
  return tuple(results)


def _offsets(widths: Sequence[int]) -> Tuple[int, ...]:
  """Where each but the first part begins: (w0, w0 + w1, ...)."""
  out, total = [], 0
  for w in widths[:-1]:
    total += w
    out.append(total)
  return tuple(out)


def can_fuse(params: Mapping[str, Any], names: Sequence[str], bias: bool) -> bool:
  """Whether `params` holds exactly a kernel (and, with `bias`, a bias) for every name: a
  layer whose projections are plain `DenseGeneral`s (a subclass with other projections, or
  adapters beside the kernels, keeps its own)."""
  want = {'kernel', 'bias'} if bias else {'kernel'}
  return all(n in params and hasattr(params[n], 'keys') and set(params[n].keys()) == want
             and jnp.ndim(params[n]['kernel']) == 3 for n in names)
