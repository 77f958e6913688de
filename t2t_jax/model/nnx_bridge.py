"""The Linen Transformer as a Flax NNX module (`flax.nnx.bridge.ToNNX`), for NNX users.

The Linen model stays the one implementation: `to_nnx` wraps `transformer.as_model(model)`
(the paper's model, or a variant with its extension points) in a stateful NNX module that
owns the parameters and the dropout RNG stream, so it trains with `nnx.Optimizer` under
`nnx.jit`; `linen_params` gives the plain parameter dict back, the tree `init_params` gives,
for everything that takes `params` (`decode_context`/`decode_step`/`beam_search`,
`Translator`, checkpoints, export). Training and evaluation mode are NNX's own:
`module.train()` / `module.eval()` set the wrapped config's `deterministic` flag (dropout on /
off); `to_nnx` keeps the mode of the model it is given. `module.generate(inputs)` beam-decodes
(§6.1) with the Linen decode path itself (`beam_decode`, what `Translator` runs).

    rngs = nnx.Rngs(params=0, dropout=1)       # 'dropout': a fresh key per training call
    module = to_nnx(cfg, rngs)                 # module(inputs, targets) -> logits
    optimizer = nnx.Optimizer(module, optax.adam(1e-3), wrt=nnx.Param)
    ...                                        # nnx.jit train steps
    module.eval()
    best, scores = module.generate(inputs)     # beam 4, alpha 0.6, input length + 50
    params = linen_params(module)              # -> decode_step, Translator, checkpoints

`flax.nnx` is imported inside the functions: it imports optax, and `t2t_jax.model` loads only
jax, flax and numpy.
"""

import functools
import math
import numbers
from typing import TYPE_CHECKING, Any, Optional

import jax
import jax.numpy as jnp

from t2t_jax.model import beam_decode, transformer
from t2t_jax.model.id_arrays import check_ids

if TYPE_CHECKING:
  from flax import nnx


@functools.cache
def _module_class() -> type:
  """`TransformerNNX`, defined on first use (it subclasses an `flax.nnx` class)."""
  from flax.nnx import bridge

  class TransformerNNX(bridge.ToNNX):
    """`bridge.ToNNX` of a `Transformer` whose `deterministic` follows NNX's modes.

    `module(inputs, targets)`: teacher-forced logits `[batch, tgt_len, vocab]` float32, as
    `Transformer.__call__` (packing keywords included); `module.encode(...)` and
    `module.decode(...)` as the Linen methods. Each call draws one key from every stream of
    the module's `nnx.Rngs` (dropout uses 'dropout'); `module.generate(inputs)` (beam search,
    `nnx_bridge.generate`) draws none. `deterministic` is a static attribute:
    `module.eval()` / `module.train()` (NNX's `set_attributes`) swap the wrapped model for
    the same model with `cfg.deterministic` changed; `nnx.jit` compiles once per mode.
    """

    @property
    def deterministic(self) -> bool:
      return self.to_nnx__module.cfg.deterministic

    def _setattr(self, name: str, value: Any) -> None:
      if name == 'deterministic':  # a static field of the Linen config, not an attribute
        name = 'to_nnx__module'
        value = transformer.as_model(self.to_nnx__module, deterministic=bool(value))
      super()._setattr(name, value)

    def generate(self, inputs: jax.Array, *, beam_size: int = 4, alpha: float = 0.6,
                 max_decode_extra: int = 50) -> tuple[jax.Array, jax.Array]:
      """Beam search (§6.1) of `inputs` `[batch, src_len]`: `nnx_bridge.generate(self, ...)`."""
      return generate(self, inputs, beam_size=beam_size, alpha=alpha,
                      max_decode_extra=max_decode_extra)

  TransformerNNX.__module__ = __name__
  TransformerNNX.__qualname__ = 'TransformerNNX'
  return TransformerNNX


def __getattr__(name: str):
  if name == 'TransformerNNX':  # PEP 562: the class without importing flax.nnx up front
    return _module_class()
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def to_nnx(model: transformer.ModelLike, rngs: 'nnx.Rngs', *, params: Optional[Any] = None,
           batch: int = 1, length: int = 8) -> 'nnx.Module':
  """An NNX module (`TransformerNNX`) of `model` (a `Transformer`, a variant, or a config).

  Args:
    model: passed through `transformer.as_model` (extension points kept); its
      `cfg.deterministic` is the module's initial mode (`module.eval()` / `.train()` change
      it), `cfg.decode` is forced off (incremental decoding goes through `linen_params`).
    rngs: an `nnx.Rngs`. Without `params`, one key is drawn from its 'params' stream and the
      parameters are exactly `init_params(model, key)`; the module keeps a fork of it for
      its calls (give it a 'dropout' stream to train with dropout:
      `nnx.Rngs(params=0, dropout=1)`).
    params: Linen parameters to start from instead (`init_params`'s tree, e.g. a restored
      checkpoint); the arrays are used as they are.
    batch, length: the dummy `[batch, length]` int32 inputs the parameters are shaped from
      (as `init_params`; sizes do not depend on them).

  Returns:
    The module: `module(inputs [b, s] int32, targets [b, t] int32)` -> `[b, t, vocab]`
    float32 logits; its `nnx.Param`s are the Linen tree (`linen_params`).
  """
  from flax import nnx
  if not isinstance(rngs, nnx.Rngs):
    raise TypeError(f'to_nnx: rngs is a {type(rngs).__name__}; expected an nnx.Rngs, e.g. '
                    'nnx.Rngs(params=0, dropout=1)')
  try:
    net = transformer.as_model(model, decode=False)
  except TypeError as e:
    raise TypeError(f'to_nnx: {e}') from None
  if params is None:
    params = transformer.init_params(net, rngs.params(), batch, length)
  dummy = jnp.ones((batch, length), jnp.int32)
  cls = _module_class()
  # Shapes only (nothing computed): the bridge's variables, then the given arrays put in.
  # The parts' logical axes (`logical_axes.py`) become variable metadata; placing by them is
  # `runtime/meshes.py`'s job, so nnx must not try to shard eagerly (it needs a mesh then).
  with nnx.use_eager_sharding(False):
    abstract = nnx.eval_shape(lambda: cls(transformer.as_model(
        net, deterministic=True)).lazy_init(dummy, dummy, rngs=jax.random.key(0)))
  graphdef, state = nnx.split(abstract)
  _check_tree(nnx.to_pure_dict(state), params)
  nnx.replace_by_pure_dict(state, params)
  module = nnx.merge(graphdef, state)
  module.to_nnx__rngs = nnx.data(rngs.fork())  # was None (static) in the abstract module
  module.deterministic = net.cfg.deterministic
  return module


def _shapes(tree) -> dict:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path): tuple(jnp.shape(x)) for path, x in leaves}


def _check_tree(expected, params) -> None:
  """ValueError naming the first parameter that `params` lacks, adds or shapes differently."""
  want, got = _shapes(expected), _shapes(params)
  for path in sorted(want.keys() | got.keys()):
    if want.get(path) != got.get(path):
      raise ValueError(f'to_nnx: params{path} is {got.get(path, "missing")}, the model '
                       f'needs {want.get(path, "nothing there")}')


def linen_params(module: 'nnx.Module') -> dict:
  """The module's parameters as the plain nested dict `init_params` gives (same names, same
  tree): what `Transformer.apply({'params': ...})`, `decode_context`/`decode_step`,
  `Translator`, checkpoints and export take.

  A snapshot that copies nothing: its leaves are the very `jax.Array`s the module's
  `nnx.Param`s hold now. jax arrays are immutable, so an update of the module (an optimizer
  step, an assignment) puts new arrays in the module and leaves this dict as it was, and
  changing the dict does not change the module; call `linen_params` again for the new values.
  """
  from flax import nnx
  if not isinstance(module, nnx.Module):
    raise TypeError(f'linen_params: module is a {type(module).__name__}; expected an nnx '
                    'module (what to_nnx returns)')
  return nnx.to_pure_dict(nnx.state(module, nnx.Param))


def generate(module: 'nnx.Module', inputs: jax.Array, *, beam_size: int = 4,
             alpha: float = 0.6, max_decode_extra: int = 50) -> tuple[jax.Array, jax.Array]:
  """Beam search (§6.1) with the module's current parameters: each row's best translation.

  The Linen decode path itself (`beam_decode.beam_decode`: `decode_context` / `decode_step`
  / `init_cache` + `search.beam_search`, the search `Translator` and the StableHLO export
  run), on `linen_params(module)`: a batch padded as `Translator` pads it decodes to its
  outputs exactly. Dropout off whatever the module's mode; draws no key. Compiled once per
  (model, beam_size, alpha, max_decode_extra, input shape); under `nnx.jit` too
  (`nnx.jit(lambda m, x: m.generate(x))`).

  Args:
    module: a `to_nnx` module.
    inputs: `[batch, src_len]` int32 source ids, each row EOS-terminated then padded with 0,
      src_len <= cfg.max_len. A row of padding only decodes to EOS alone (as the empty rows
      `Translator` adds to fill a batch).
    beam_size: K (4 in the paper). alpha: the GNMT length penalty (0.6 in the paper).
    max_decode_extra: L = min(src_len + max_decode_extra, cfg.max_len); each row outputs at
      most min(its length (non-padding ids) + max_decode_extra, L) tokens, EOS included (the
      paper: input length + 50).

  Returns:
    (sequences `[batch, L]` int32: the best hypothesis, EOS-terminated then 0s (cut at its
    maximum length); scores `[batch]` float32: its log probability / `search.length_penalty(
    its length with EOS, alpha)`, what the search ranks by).

  Raises (before any work; each naming the argument): TypeError for `inputs` that are not
  integer ids; ValueError for `inputs` not `[batch, src_len]` with batch, src_len >= 1 and
  src_len <= max_len, ids outside [0, vocab_size) (checked when the values are known, not
  under `jit`), `beam_size` < 1 or `max_decode_extra` < 0.
  """
  net = transformer.as_model(module.to_nnx__module, deterministic=True, decode=False)
  check_ids('generate', 'inputs', inputs, net.cfg.input_vocab_size)
  for name, value, least in (('beam_size', beam_size, 1), ('max_decode_extra',
                                                           max_decode_extra, 0)):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
      raise ValueError(f'generate: {name}={value!r}; expected an integer >= {least}')
  if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha):
    raise ValueError(f'generate: alpha={alpha!r}; expected a finite number (0.6 in the paper)')
  inputs = jnp.asarray(inputs)
  if inputs.shape[1] > net.cfg.max_len:
    raise ValueError(f'generate: inputs of shape {inputs.shape}; expected [batch, src_len] '
                     f'with src_len <= max_len={net.cfg.max_len}')
  return _best(net, beam_size, alpha, max_decode_extra, linen_params(module), inputs)


# alpha static, as `Translator`'s (a constant of the compiled search): the same program.
@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _best(net: transformer.Transformer, beam_size: int, alpha: float, max_decode_extra: int,
          params, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
  """`generate`'s search, jitted: the per-row maximum lengths as `Translator` sets them
  (`portable.batches`: length + extra, capped at L; 1 for a row of padding), the best beam."""
  max_decode_len = min(inputs.shape[1] + max_decode_extra, net.cfg.max_len)
  count = (inputs != transformer.PAD_ID).sum(-1).astype(jnp.int32)
  max_lengths = jnp.where(count > 0, jnp.minimum(count + max_decode_extra, max_decode_len), 1)
  sequences, scores = beam_decode.beam_decode(net, beam_size, alpha, params, inputs,
                                              max_lengths, max_decode_len, best_only=True)
  return sequences[:, 0], scores[:, 0]
