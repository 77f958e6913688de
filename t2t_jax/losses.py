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

from typing import Dict, Union

import jax
import jax.numpy as jnp

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
  return (targets != pad_id).astype(jnp.float32)


def _log_probs(logits: Array) -> Array:
  """`[batch, length, vocab]` log-probabilities in float32.

  The softmax is taken in float32 even for bfloat16 logits: a bfloat16
  log-sum-exp over a 37000-entry vocabulary loses most of its mantissa.
  """
  return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)


def _target_log_probs(log_probs: Array, targets: Array) -> Array:
  """`[batch, length]` float32 log-probability of each target token."""
  return jnp.take_along_axis(
      log_probs, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]


def _masked_sum(values: Array, weights: Array) -> Array:
  """Sum of `values * weights` where padded positions contribute exactly 0.

  `jnp.where` (rather than a bare multiplication) keeps a non-finite value at a
  padded position (e.g. an inf logit there) from turning the sum into NaN,
  since `0 * inf` is NaN.
  """
  weights = weights.astype(jnp.float32)
  return jnp.sum(jnp.where(weights != 0.0, values * weights, 0.0))


def _smoothed_xent_per_token(log_probs: Array, target_lp: Array,
                             label_smoothing: float) -> Array:
  """`[batch, length]` float32 cross entropy against the smoothed targets.

  The smoothed distribution q is tensor2tensor's: `1 - eps` on the true token
  and `eps / (vocab - 1)` on each of the other `vocab - 1` tokens (so it sums
  to 1 and the true token never gets the extra `eps / vocab` that the
  "uniform mixture" form gives it). The cross entropy is
  `-sum_k q_k log p_k = -[(1 - eps) log p_t + eps/(vocab-1) (sum_k log p_k - log p_t)]`,
  which needs only the target log-probability and the sum of all
  log-probabilities, never a materialised one-hot `[batch, length, vocab]`.

  Unlike tensor2tensor/flax, the constant entropy of q is NOT subtracted: the
  value is the cross entropy itself (its minimum is H(q), not 0); gradients
  are identical either way.

  Args:
    log_probs: `[batch, length, vocab]` float32 log-probabilities.
    target_lp: `[batch, length]` float32 log-probabilities of the targets.
    label_smoothing: epsilon_ls in [0, 1) (a Python float, static under jit).
  """
  vocab = log_probs.shape[-1]
  eps = float(label_smoothing)
  if not 0.0 <= eps < 1.0:
    raise ValueError(f'label_smoothing must be in [0, 1), got {eps}')
  if eps == 0.0:
    return -target_lp
  if vocab < 2:
    raise ValueError(f'label smoothing needs a vocabulary of 2 or more, got {vocab}')
  confidence = 1.0 - eps
  low = eps / (vocab - 1)
  sum_lp = jnp.sum(log_probs, axis=-1)
  return -(confidence * target_lp + low * (sum_lp - target_lp))


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
  log_probs = _log_probs(logits)
  per_token = _smoothed_xent_per_token(
      log_probs, _target_log_probs(log_probs, targets), label_smoothing)
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
  return _masked_sum(-_target_log_probs(_log_probs(logits), targets), weights)


def _correct(logits: Array, targets: Array) -> Array:
  """`[batch, length]` float32: 1.0 where the arg-max prediction is the target."""
  predictions = jnp.argmax(logits, axis=-1)
  return (predictions == targets).astype(jnp.float32)


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
  return _masked_sum(_correct(logits.astype(jnp.float32), targets), weights)


def perplexity(nll_sum: ArrayLike, weight_sum: ArrayLike) -> Array:
  """Per-token perplexity `exp(nll_sum / weight_sum)`.

  Args:
    nll_sum: summed negative log-likelihood (from `negative_log_likelihood` or
      the 'nll' entry of `compute_metrics`), a scalar or an array.
    weight_sum: the matching token count; must be positive (0 gives inf/nan).

  Returns:
    float32 array of the same shape as the inputs.
  """
  return jnp.exp(jnp.asarray(nll_sum, jnp.float32) / jnp.asarray(weight_sum, jnp.float32))


def compute_metrics(logits: Array, targets: Array, weights: Array,
                    label_smoothing: float) -> Dict[str, Array]:
  """All per-batch sums the train and eval steps need, in one pass.

  The float32 log-softmax is computed once and shared by the smoothed loss
  and the unsmoothed NLL (it is the largest intermediate: batch x length x
  vocab).

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
  log_probs = _log_probs(logits)
  target_lp = _target_log_probs(log_probs, targets)
  smoothed = _smoothed_xent_per_token(log_probs, target_lp, label_smoothing)
  return {
      'loss': _masked_sum(smoothed, weights),
      'nll': _masked_sum(-target_lp, weights),
      # arg-max of the logits, not of the log-probabilities: subtracting the
      # log-sum-exp in float32 could create ties that the logits do not have.
      'correct': _masked_sum(_correct(logits.astype(jnp.float32), targets), weights),
      'weight': jnp.sum(weights.astype(jnp.float32)),
  }
