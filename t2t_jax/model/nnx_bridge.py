"""The Linen Transformer as a Flax NNX module (`flax.nnx.bridge.ToNNX`), for NNX users.

The Linen model stays the one implementation: `to_nnx` wraps `transformer.as_model(model)`
(the paper's model, or a variant with its extension points) in a stateful NNX module that
owns the parameters and the dropout RNG stream, so it trains with `nnx.Optimizer` under
`nnx.jit`; `linen_params` gives the plain parameter dict back, the tree `init_params` gives,
for everything that takes `params` (`decode_context`/`decode_step`/`beam_search`,
`Translator`, checkpoints, export). Training and evaluation mode are NNX's own:
`module.train()` / `module.eval()` set the wrapped config's `deterministic` flag (dropout on /
off); `to_nnx` keeps the mode of the model it is given.

    rngs = nnx.Rngs(params=0, dropout=1)       # 'dropout': a fresh key per training call
    module = to_nnx(cfg, rngs)                 # module(inputs, targets) -> logits
    optimizer = nnx.Optimizer(module, optax.adam(1e-3), wrt=nnx.Param)
    ...                                        # nnx.jit train steps
    module.eval()
    params = linen_params(module)              # -> decode_step, Translator, checkpoints

`flax.nnx` is imported inside the functions: it imports optax, and `t2t_jax.model` loads only
jax, flax and numpy.
"""

import functools
from typing import TYPE_CHECKING, Any, Optional

import jax
import jax.numpy as jnp

from t2t_jax.model import transformer

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
    the module's `nnx.Rngs` (dropout uses 'dropout'). `deterministic` is a static attribute:
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
  net = transformer.as_model(model, decode=False)
  if params is None:
    params = transformer.init_params(net, rngs.params(), batch, length)
  dummy = jnp.ones((batch, length), jnp.int32)
  cls = _module_class()
  # Shapes only (nothing computed): the bridge's variables, then the given arrays put in.
  abstract = nnx.eval_shape(lambda: cls(transformer.as_model(net, deterministic=True)).lazy_init(
      dummy, dummy, rngs=jax.random.key(0)))
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
  """The module's parameters as the plain nested dict `init_params` gives (same names,
  same tree, the module's current arrays, not copies): what `Transformer.apply({'params':
  ...})`, `decode_context`/`decode_step`, `Translator`, checkpoints and export take."""
  from flax import nnx
  return nnx.to_pure_dict(nnx.state(module, nnx.Param))
