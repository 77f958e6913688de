"""The N identical layers of the encoder or decoder stack (§3.1) as one `jax.lax.scan`.

Unrolled, XLA compiles each of the N layers of a stack as code of its own, and a training run
compiles one train step per bucket shape: compile time grows with N x shapes. Scanned, the
compiler sees one layer body per stack. The numbers and the stored parameters stay those of
the unrolled stack:

  * the parameter tree keeps one entry per layer (`layer_0` ... `layer_{N-1}`; checkpoints,
    exports, averaging and attention capture read it): `scan_layers` stacks the layers'
    leaves to `[N, ...]` inside the traced function only, so `jax.grad` unstacks the
    gradients back into the same tree;
  * dropout: flax derives a module's key from its path (`encoder/layer_3/ffn_block/
    Dropout_0`), which a scanned body does not have. `_LayerKeys` computes, for every layer,
    the key flax would give that module unrolled and hands the body its layer's one, through
    `nn.intercept_methods`, so the masks are the unrolled ones bit for bit.

What is not scanned runs unrolled: initialisation (it creates the per-layer parameters), the
decode-mode decoder (a per-layer key/value cache), attention capture (per-layer sown
weights) and `capture_intermediates` (per-layer outputs). tests/model/test_stack.py checks
the scanned stack against the unrolled one.

Measured (benchmarks/scale/compile_shapes.py, base in bfloat16 on v5e:2x4, libtpu 0.0.42.1, the
96 x 256 train step): 90-99 CPU seconds of compiling instead of 321, but 3.8 GiB of
temporaries per chip instead of 1.7 (the loop keeps each layer's saved activations as the
traced program has them, where the unrolled program lets XLA fuse and narrow them), and
XLA's cost analysis counts one layer per stack (`plan.report.loop_scale` puts the FLOPs back).
Off by default (`config.scan_layers`, `TransformerConfig.scan_layers`): the scanned program
is not bit-identical to the unrolled one (float tolerance) and needs more memory; turn it on
where compile time matters more (many bucket shapes, a large model on a TPU slice).
"""

import collections
import contextlib
import functools
from typing import Any, Callable, Dict, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.core.scope import LazyRng

from t2t_jax.model import layers, losses

Array = jax.Array


# What a rematerialised layer keeps from its forward pass for the backward pass; everything
# else is recomputed. 'full': only the layer's inputs (about one more forward pass of FLOPs);
# the dots policies keep matmul outputs and recompute the cheap elementwise ops between them.
REMAT_POLICIES = {
    'full': None,
    'dots_saveable': jax.checkpoint_policies.dots_saveable,
    'dots_with_no_batch_dims_saveable': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@functools.lru_cache(maxsize=None)
def _remat(layer_cls, policy: str):
  # Cached: one remat'ed class per (layer, policy), not a new class per layer instance.
  return nn.remat(layer_cls, policy=REMAT_POLICIES[policy])


def layer_class(cfg: Any, layer_cls: type) -> type:
  """`layer_cls`, or its `nn.remat` twin under `cfg.remat_policy`: same parameter names and
  values, activations recomputed on the backward pass. Decode mode (one position per call, no
  backward pass, a mutable cache) always gets the plain layer."""
  if cfg.remat_policy == 'none' or cfg.decode:
    return layer_cls
  _check_policy(cfg.remat_policy)
  return _remat(layer_cls, cfg.remat_policy)


def _check_policy(policy: str) -> None:
  if policy not in REMAT_POLICIES:
    raise ValueError(f'remat_policy {policy!r} is not one of '
                     f"'none', {', '.join(map(repr, REMAT_POLICIES))}")


def _body_remat(cfg: Any) -> Optional[Callable[[Callable], Callable]]:
  """`layer_class`'s rematerialisation for a scanned stack's layer body (None: none)."""
  if cfg.remat_policy == 'none':
    return None
  _check_policy(cfg.remat_policy)
  return functools.partial(jax.checkpoint, policy=REMAT_POLICIES[cfg.remat_policy])


def scannable(module: nn.Module, cfg: Any, num_layers: Optional[int] = None) -> bool:
  """Whether `module`'s stack of `num_layers` layers (None: `cfg.num_layers`; the encoder's
  and decoder's may differ) may run as one scan now (see the module docstring for what stays
  unrolled)."""
  n = cfg.num_layers if num_layers is None else num_layers
  return (cfg.scan_layers and n > 1 and not cfg.decode and
          not cfg.capture_attention and not module.is_initializing() and
          not _capturing_intermediates())


def _capturing_intermediates() -> bool:
  """Inside `apply(..., capture_intermediates=...)`: every layer's output is then recorded
  under its own name, which only the unrolled stack has. (Flax keeps the flag in its module
  context, not on the module.)"""
  from flax.linen import module as linen_module  # pylint: disable=import-outside-toplevel
  stack = getattr(linen_module._context, 'capture_stack', None)  # noqa: SLF001
  return bool(stack and stack[-1])  # apply pushes its argument, False included


class _LayerKeys:
  """The dropout keys of a scanned layer: those flax gives `<stack>/layer_i/<path>` unrolled.

  Flax's key for a `make_rng(collection)` call is the collection's root key folded with a
  hash of the caller's whole path and its call count (`LazyRng.as_jax_rng`); the hash is
  static, so the N candidates are computed while tracing and the scan index picks one.
  """

  def __init__(self, stack: nn.Module, num_layers: int):
    self._rngs = stack.scope.rngs  # {collection: LazyRng} of the stack's own scope
    self._num_layers = num_layers

  def _key(self, collection: str, path: Tuple[str, ...], count: int, index: Array) -> Array:
    keys = [LazyRng.create(self._rngs[collection], f'layer_{i}', *path, count).as_jax_rng()
            for i in range(self._num_layers)]
    return jnp.stack(keys)[index]

  def interceptor(self, index: Array) -> Callable:
    """An `nn.intercept_methods` interceptor for the body of layer `index` (traced)."""
    counts: Dict[Tuple[str, Tuple[str, ...]], int] = collections.Counter()

    def key(module: nn.Module, collection: str) -> Array:
      # Counted per module and collection, as flax's rng counters are.
      counts[collection, module.path] += 1
      return self._key(collection, module.path, counts[collection, module.path], index)

    def intercept(next_fun, args, kwargs, context):
      module, method = context.module, context.method_name
      if isinstance(module, nn.Dropout) and method == '__call__':
        deterministic = kwargs.get('deterministic', module.deterministic)
        if 0.0 < module.rate < 1.0 and not deterministic and kwargs.get('rng') is None:
          kwargs = dict(kwargs, rng=key(module, module.rng_collection))
        return next_fun(*args, **kwargs)
      if isinstance(module, layers.MultiHeadAttention) and method == '_dropout_key':
        return key(module, 'dropout')
      return next_fun(*args, **kwargs)
    return intercept


def scan_layers(stack: nn.Module, layer_cls: type, cfg: Any, parts: Any, x: Array,
                *args, num_layers: Optional[int] = None) -> Array:
  """`x` through `layer_cls(cfg, parts, name=f'layer_{i}')(x, *args)` for i = 0 .. N-1,
  scanned.

  Args:
    stack: the Encoder or Decoder module calling this (its params hold `layer_i`).
    layer_cls: EncoderLayer or DecoderLayer, unwrapped (the body is rematerialised under
      `cfg.remat_policy` as `layer_class` would).
    cfg: the model config (`deterministic`, `remat_policy`).
    parts: the model's extension points (`parts.Parts`).
    x: `[batch, length, d_model]`, the first layer's input.
    *args: the same for every layer (masks, the encoder output).
    num_layers: the stack's layers (None: `cfg.num_layers`; `cfg.encoder_layers` and
      `cfg.decoder_layers` may differ).

  Returns:
    `[batch, length, d_model]`, the last layer's output: the unrolled stack's, to float
    rounding.
  """
  n = cfg.num_layers if num_layers is None else num_layers
  params = stack.variables['params']
  stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves),
                                   *[params[f'layer_{i}'] for i in range(n)])
  keys = None if cfg.deterministic else _LayerKeys(stack, n)

  def layer(p, y, index):
    intercepting = (contextlib.nullcontext() if keys is None else
                    nn.intercept_methods(keys.interceptor(index)))
    with intercepting:  # the auxiliary losses a layer sows come out of the scan, sown below
      y, state = layer_cls(cfg, parts).apply({'params': p}, y, *args,
                                             mutable=[losses.AUX_LOSSES])
    return y, losses.sown_losses(state.get(losses.AUX_LOSSES, {}),
                                 '/'.join((*stack.path, 'layer_*')))

  remat = _body_remat(cfg)
  if remat is not None:
    layer = remat(layer)

  def body(y, xs):
    return layer(xs[0], y, xs[1])

  y, sown = jax.lax.scan(body, x, (stacked, jnp.arange(n)))
  for name, per_layer in sown.items():  # [num_layers] each; the unrolled stack's sum
    stack.sow(losses.AUX_LOSSES, name, jnp.sum(per_layer))
  return y
