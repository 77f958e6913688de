"""Training and evaluation losses: label-smoothed cross entropy and friends (§5.4).

Every function here is a pure `jax.numpy` function that can be called inside
`jit`/`shard_map`. All of them return *sums* over the non-padding target
positions, never means: the train step sums them across devices (and across
gradient-accumulation micro-batches) and only then divides by the global
number of target tokens, so that 8 devices give the same update as 1 device on
the same global batch.

Conventions: `targets` are `[batch, length]` int32 token ids with padding id 0;
`logits` are `[batch, length, vocab]` in any float dtype (float32 or bfloat16);
`weights` are `[batch, length]` float32, 1.0 on real tokens and 0.0 on padding.
Everything is computed in float32, whatever the dtype of the logits.
"""

import numbers
from typing import Any, Dict, Mapping, NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.choices import ConfigError
from t2t_jax.model.array_checks import check_array, check_number

Array = jax.Array
ArrayLike = Union[jax.Array, float]


def padding_weights(targets: Array, pad_id: int = 0) -> Array:
  """Per-token weights that mask out padding.

  Args:
    targets: `[batch, length]` int32 target token ids.
    pad_id: the padding id (0 in this project).

  Returns:
    `[batch, length]` float32: 1.0 where `targets != pad_id`, else 0.0.
  """
  check_array('padding_weights', 'targets', targets, kind='int')
  return (targets != pad_id).astype(jnp.float32)


class _Logits(NamedTuple):
  """What every loss here needs of `[batch, length, vocab]` logits, each `[batch, length]`.

  No `[batch, length, vocab]` log-probabilities are materialised: log p_k = z_k - lse, so
  every loss is a function of these three reductions (half the time of a float32 log-softmax
  and its gradient over a 37000-entry vocabulary on CPU, and the same numbers).
  """
  lse: Array        # log-sum-exp of the logits (the log normaliser), float32.
  target: Array     # the target's logit z_t, float32.
  total: Array      # sum_k z_k over the vocabulary, float32.
  top: Array        # max_k z_k, float32 (the same reduction log-sum-exp starts with).
  vocab: int


def _check(where: str, logits: Array, targets: Array, weights: Array) -> None:
  """The arguments every loss here takes, checked statically (shapes and dtypes, at trace
  time): `[batch, length, vocab]` float logits, `[batch, length]` integer targets and
  `[batch, length]` numeric weights."""
  shape = check_array(where, 'logits', logits, kind='float', rank=3,
                      layout='[batch, length, vocab]')
  for name, x, kind in (('targets', targets, 'int'), ('weights', weights, 'number')):
    got = check_array(where, name, x, kind=kind, rank=2, layout='[batch, length]')
    if got != shape[:2]:
      raise ValueError(f'{where}: {name} has shape {got} but logits {shape}; expected '
                       f'{name} of shape [batch, length] = {shape[:2]}')


def _reduce_logits(logits: Array, targets: Array) -> _Logits:
  """The reductions of `_Logits`, in float32 even for bfloat16 logits: a bfloat16
  log-sum-exp over a 37000-entry vocabulary loses most of its mantissa."""
  z = logits.astype(jnp.float32)
  target = jnp.take_along_axis(z, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  return _Logits(jax.nn.logsumexp(z, axis=-1), target, jnp.sum(z, axis=-1),
                 jnp.max(z, axis=-1), z.shape[-1])


def _masked_sum(values: Array, weights: Array) -> Array:
  """Sum of `values * weights` where padded positions contribute exactly 0.

  `jnp.where` (rather than a bare multiplication) keeps a non-finite value at a
  padded position (e.g. an inf logit there) from turning the sum into NaN,
  since `0 * inf` is NaN.
  """
  weights = weights.astype(jnp.float32)
  return jnp.sum(jnp.where(weights != 0.0, values * weights, 0.0))


def check_label_smoothing(where: str, label_smoothing: Any) -> float:
  """epsilon_ls as a Python float, refused unless a number in [0, 1) (static: under `jit` it
  is a Python value, a constant of the program). `where`: the function, for the message.

  Raises:
    TypeError: not a number (a string, None, a bool).
    ValueError: outside [0, 1), or not finite.
  """
  at = f'{where}: ' if where else ''
  if (isinstance(label_smoothing, (bool, np.bool_))
      or not isinstance(label_smoothing, (numbers.Real, np.ndarray, jax.Array))
      or not jnp.issubdtype(jnp.result_type(label_smoothing), jnp.number)
      or jnp.ndim(label_smoothing) != 0):
    raise TypeError(f'{at}label_smoothing is a {type(label_smoothing).__name__} '
                    f'({label_smoothing!r}); expected a number in [0, 1) (0.1 in the paper)')
  eps = float(label_smoothing)
  if not 0.0 <= eps < 1.0:
    raise ValueError(f'{at}label_smoothing must be in [0, 1), got {eps}')
  return eps


def _smoothed_xent_per_token(z: _Logits, label_smoothing: float) -> Array:
  """`[batch, length]` float32 cross entropy against the smoothed targets.

  The smoothed distribution q is tensor2tensor's: `1 - eps` on the true token
  and `eps / (vocab - 1)` on each of the other `vocab - 1` tokens (so it sums
  to 1 and the true token never gets the extra `eps / vocab` that the
  "uniform mixture" form gives it). With log p_k = z_k - lse the cross entropy
  `-sum_k q_k log p_k` is `lse - (1 - eps) z_t - eps/(vocab-1) (sum_k z_k - z_t)`
  (the q_k sum to 1), which needs no materialised one-hot or log-softmax.

  Unlike tensor2tensor/flax, the constant entropy of q is NOT subtracted: the
  value is the cross entropy itself (its minimum is H(q), not 0); gradients
  are identical either way.

  Args:
    z: the logits' reductions (`_reduce_logits`).
    label_smoothing: epsilon_ls in [0, 1) (a Python float, static under jit).
  """
  eps = check_label_smoothing('', label_smoothing)
  if eps == 0.0:
    return z.lse - z.target
  if z.vocab < 2:
    raise ValueError(f'label smoothing needs a vocabulary of 2 or more, got {z.vocab}')
  low = eps / (z.vocab - 1)
  return z.lse - (1.0 - eps) * z.target - low * (z.total - z.target)


def label_smoothed_cross_entropy(logits: Array, targets: Array, weights: Array,
                                 label_smoothing: float) -> tuple[Array, Array]:
  """Label-smoothed cross entropy, summed over the non-padding tokens (§5.4).

  The paper uses epsilon_ls = 0.1. See `_smoothed_xent_per_token` for the exact
  smoothed distribution (tensor2tensor's: 1 - eps on the true token,
  eps / (vocab - 1) on every other token).

  Args:
    logits: `[batch, length, vocab]` float32 or bfloat16 decoder outputs.
    targets: `[batch, length]` int32 target ids.
    weights: `[batch, length]` float32 per-token weights (0 on padding).
    label_smoothing: epsilon_ls in [0, 1); 0 gives the plain negative
      log-likelihood.

  Returns:
    `(loss_sum, weight_sum)`, two float32 scalars. The loss is NOT normalised:
    divide by the global `weight_sum` after summing over devices.
  """
  _check('label_smoothed_cross_entropy', logits, targets, weights)
  per_token = _smoothed_xent_per_token(_reduce_logits(logits, targets), label_smoothing)
  return _masked_sum(per_token, weights), jnp.sum(weights.astype(jnp.float32))


def negative_log_likelihood(logits: Array, targets: Array, weights: Array) -> Array:
  """Unsmoothed negative log-likelihood of the targets, summed (for perplexity).

  Args:
    logits: `[batch, length, vocab]` float32 or bfloat16.
    targets: `[batch, length]` int32.
    weights: `[batch, length]` float32 (0 on padding).

  Returns:
    float32 scalar: `-sum_t w_t log p(y_t)`.
  """
  _check('negative_log_likelihood', logits, targets, weights)
  z = _reduce_logits(logits, targets)
  return _masked_sum(z.lse - z.target, weights)


def _correct(z: _Logits) -> Array:
  """`[batch, length]` float32: 1.0 where the target's logit is the largest, i.e. the arg-max
  prediction is the target (a tie with another token counts as a hit).

  From the reductions the loss needs anyway: XLA CPU's arg-max (a two-operand reduce over the
  vocabulary) took 8% of the embedded default's train step (benchmarks/peers/profile_step.py).
  """
  return (z.target >= z.top).astype(jnp.float32)


def token_accuracy(logits: Array, targets: Array, weights: Array) -> Array:
  """Number of non-padding tokens whose arg-max prediction is the target.

  Args:
    logits: `[batch, length, vocab]` float32 or bfloat16.
    targets: `[batch, length]` int32.
    weights: `[batch, length]` float32 (0 on padding).

  Returns:
    float32 scalar: weighted count of correct predictions (divide by the
    weight sum for the accuracy).
  """
  _check('token_accuracy', logits, targets, weights)
  return _masked_sum(_correct(_reduce_logits(logits, targets)), weights)


def perplexity(nll_sum: ArrayLike, weight_sum: ArrayLike) -> Array:
  """Per-token perplexity `exp(nll_sum / weight_sum)`.

  Args:
    nll_sum: summed negative log-likelihood (from `negative_log_likelihood` or
      the 'nll' entry of `compute_metrics`), a scalar or an array.
    weight_sum: the matching token count; must be positive (0 gives inf/nan).

  Returns:
    float32 array of the same shape as the inputs.
  """
  check_number('perplexity', 'nll_sum', nll_sum)
  check_number('perplexity', 'weight_sum', weight_sum)
  return jnp.exp(jnp.asarray(nll_sum, jnp.float32) / jnp.asarray(weight_sum, jnp.float32))


def compute_metrics(logits: Array, targets: Array, weights: Array,
                    label_smoothing: float) -> Dict[str, Array]:
  """All per-batch sums the train and eval steps need, in one pass.

  The logits are reduced once (`_reduce_logits`) for both the smoothed loss
  and the unsmoothed NLL.

  Args:
    logits: `[batch, length, vocab]` float32 or bfloat16.
    targets: `[batch, length]` int32.
    weights: `[batch, length]` float32 (0 on padding).
    label_smoothing: epsilon_ls (§5.4).

  Returns:
    A dict of float32 scalars, all sums over the non-padding tokens:
    'loss' (label-smoothed cross entropy), 'nll' (unsmoothed negative
    log-likelihood), 'correct' (arg-max hits) and 'weight' (token count).
  """
  _check('compute_metrics', logits, targets, weights)
  z = _reduce_logits(logits, targets)
  return {
      'loss': _masked_sum(_smoothed_xent_per_token(z, label_smoothing), weights),
      'nll': _masked_sum(z.lse - z.target, weights),
      # Of the logits, not of the log-probabilities: subtracting the log-sum-exp
      # in float32 could create ties that the logits do not have.
      'correct': _masked_sum(_correct(z), weights),
      'weight': jnp.sum(weights.astype(jnp.float32)),
  }


# --- Auxiliary losses a model sows (docs/extension_points.md) -------------------------------

# The flax collection of auxiliary losses: a module adds one with
# `self.sow(AUX_LOSSES, name, value)`, `value` a float scalar (e.g. a MoE layer's
# load-balancing loss, a per-shard mean). The train and eval steps apply the model with this
# collection mutable, add every sown loss times `config.aux_loss_weight` to the objective and
# report each as the metric `AUX_PREFIX + name`.
AUX_LOSSES = 'losses'
AUX_PREFIX = 'aux_'


class SownLossError(ConfigError):
  """A module sowed into `AUX_LOSSES` what the step cannot add to the objective (a
  non-scalar, or no number): a ValueError naming the sowing module's path; a `ConfigError`,
  so that main.py reports it in one line, as a variant's other mistakes."""


def sown_losses(collection: Mapping[str, Any], prefix: str = '') -> Dict[str, Array]:
  """{name: float32 scalar} of an `AUX_LOSSES` collection (what `apply(..., mutable=
  [AUX_LOSSES])` returned under that key): every value sown under `name`, by any module and
  any number of times (e.g. once per layer), summed.

  Args:
    collection: the collection, a nested dict `{module: ... {name: (value, ...)}}`.
    prefix: the path of the module whose `apply` returned `collection`, prepended to the
      paths the messages name: '' for a whole model's, e.g. 'encoder/layer_*' for the body
      of a scanned stack's layers (applied alone, they sow under paths such as 'ffn/...').

  Raises (while tracing, from shapes and dtypes alone):
    TypeError: `collection` is not a dict.
    SownLossError (a ValueError): a sown value that is not a scalar number, naming the path
      of the module that sowed it; a loss the step would otherwise have to reduce in a way it
      cannot guess.
  """
  if not isinstance(collection, Mapping):
    raise TypeError(f'sown_losses: collection is a {type(collection).__name__}; expected the '
                    f"'{AUX_LOSSES}' collection, a dict (apply(..., mutable=['{AUX_LOSSES}'])"
                    f"[1]['{AUX_LOSSES}'])")
  totals: Dict[str, Array] = {}
  for path, value in jax.tree_util.tree_leaves_with_path(collection):
    keys = [str(k.key) for k in path if hasattr(k, 'key')]
    where = '/'.join([prefix] + keys if prefix else keys)
    dtype = getattr(value, 'dtype', None)
    if dtype is None and isinstance(value, (int, float)) and not isinstance(value, bool):
      dtype = jnp.result_type(value)
    if dtype is None or not jnp.issubdtype(dtype, jnp.number):
      raise SownLossError(f"auxiliary loss {where} sown into '{AUX_LOSSES}' is a "
                          f'{type(value).__name__}{f" of {dtype}" if dtype else ""}; sow a '
                          'float scalar (e.g. its mean over the batch)')
    if jnp.ndim(value) != 0:
      raise SownLossError(f"auxiliary loss {where} sown into '{AUX_LOSSES}' has shape "
                          f'{jnp.shape(value)}; sow a scalar (e.g. its mean over the batch)')
    value = jnp.asarray(value, jnp.float32)
    totals[keys[-1]] = totals[keys[-1]] + value if keys[-1] in totals else value
  return totals
