"""An exponential moving average of the parameters (`--config.ema_decay`; fairseq's
`--store-ema`, OpenNMT's `-average_decay`), kept in the optimizer state.

After each update, with `n` the number of updates so far (1 after the first):

    decay_n = min(ema_decay, (1 + n) / (10 + n))
    ema     = decay_n * ema + (1 - decay_n) * params

The cap `(1 + n) / (10 + n)` is TensorFlow's `ExponentialMovingAverage(num_updates=...)`
rule, which tensor2tensor used: early on the average follows the fast-moving weights instead
of staying near the random initialisation for ~1/(1 - decay) steps. The average starts at
the parameters the run starts from (a fine-tune's source, `init_from`).

Kept as the outermost optimizer wrapper (`with_ema`), its state is `EmaState(count, ema,
inner)`: it is checkpointed, resumed and sharded (`shard_optimizer_state` splits it as it
splits the Adam moments) with the optimizer state, the training state's shape is unchanged,
and a skipped non-finite step leaves it as it was. The checkpoint holds it at
`opt_state/ema` (`runtime.checkpoint.EMA_PATH`), which `--checkpoint=ema` reads.
"""

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from t2t_jax.runtime import checkpoint


class EmaState(NamedTuple):
  """The update count, the average (shaped as the parameters, float32) and the inner
  optimizer's state."""
  count: jax.Array
  ema: Any
  inner: Any


assert checkpoint.EMA_PATH == ('opt_state', EmaState._fields[1])  # what --checkpoint=ema reads


def decay_at(decay: float, count: jax.Array) -> jax.Array:
  """The decay of the update that makes `count` updates (module docstring)."""
  count = count.astype(jnp.float32)
  return jnp.minimum(jnp.float32(decay), (1.0 + count) / (10.0 + count))


def with_ema(tx: optax.GradientTransformation, decay: float) -> optax.GradientTransformation:
  """`tx`, with the average of the parameters it produces kept in its state; `decay` 0
  returns `tx` itself (the same state tree as a run without the key)."""
  if not decay:
    return tx
  if not 0.0 < decay < 1.0:
    raise ValueError(f'with_ema: decay is {decay!r}; expected a value in (0, 1)')

  def init(params):
    ema = jax.tree_util.tree_map(lambda p: jnp.asarray(p, jnp.float32), params)
    return EmaState(jnp.zeros((), jnp.int32), ema, tx.init(params))

  def update(updates, state, params=None):
    if params is None:
      raise ValueError('with_ema: the update needs the parameters (optimizer.update(grads, '
                       'state, params))')
    updates, inner = tx.update(updates, state.inner, params)
    count = state.count + 1
    d = decay_at(decay, count)
    # e + (1 - d)(p - e), the same average: a parameter that stays put (frozen,
    # `trainable`) keeps an average bitwise equal to it, which d*e + (1 - d)*p does not.
    ema = jax.tree_util.tree_map(
        lambda e, p, u: e + (1.0 - d) * ((p + u).astype(jnp.float32) - e),
        state.ema, params, updates)
    return updates, EmaState(count, ema, inner)

  return optax.GradientTransformation(init, update)


def moving_average(opt_state: Any) -> Any:
  """The average `with_ema` keeps in `opt_state` (float32, shaped as the parameters), or None
  for a run without `ema_decay`."""
  return opt_state.ema if isinstance(opt_state, EmaState) else None


@functools.lru_cache(maxsize=4)
def _placer(treedef: Any, shardings: tuple) -> Callable[[Any, Any], Any]:
  return jax.jit(lambda average, params: jax.tree_util.tree_map(
      lambda a, p: a.astype(p.dtype), average, params),
                 out_shardings=jax.tree_util.tree_unflatten(treedef, shardings))


def as_parameters(average: Any, params: Any) -> Any:
  """`average` (`moving_average`) in the dtypes and shardings of `params`, to be evaluated
  in their place by the programs compiled for them (`shard_optimizer_state` splits the
  average over the data axis as it splits the Adam moments; the parameters are not)."""
  shardings, treedef = jax.tree_util.tree_flatten(
      jax.tree_util.tree_map(lambda p: p.sharding, params))
  return _placer(treedef, tuple(shardings))(average, params)
