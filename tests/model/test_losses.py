"""Tests for t2t_jax.model.losses: label smoothing, padding, accuracy, perplexity."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import losses

LN2 = math.log(2.0)

# One sentence of three positions over a 4-token vocabulary; the logits are the
# logs of exact powers of two, so every log-probability is a multiple of ln 2.
# Probabilities: position 0 = [1/8, 1/2, 1/4, 1/8], position 1 = [1/8, 1/8, 1/4, 1/2],
# position 2 (padding) is uniform, so its arg-max 0 equals its "target" 0.
PROBS = np.array([[[0.125, 0.5, 0.25, 0.125],
                   [0.125, 0.125, 0.25, 0.5],
                   [0.25, 0.25, 0.25, 0.25]]], np.float32)
LOGITS = np.log(PROBS)
TARGETS = np.array([[1, 2, 0]], np.int32)  # the last position is padding (id 0)
WEIGHTS = np.array([[1.0, 1.0, 0.0]], np.float32)


def test_padding_weights():
  w = losses.padding_weights(jnp.array([[5, 1, 0, 0], [0, 3, 0, 2]], jnp.int32))
  assert w.dtype == jnp.float32
  np.testing.assert_array_equal(w, [[1, 1, 0, 0], [0, 1, 0, 1]])
  w7 = losses.padding_weights(jnp.array([[7, 0, 7]], jnp.int32), pad_id=7)
  np.testing.assert_array_equal(w7, [[0, 1, 0]])
  np.testing.assert_array_equal(losses.padding_weights(jnp.asarray(TARGETS)), WEIGHTS)


def test_label_smoothed_cross_entropy_hand_computed():
  eps = 0.1
  # q = 0.9 on the target, 0.1/3 on each other token; -log p in units of ln 2:
  # position 0 (target 1): -log p = [3, 1, 2, 3] ln2
  #   loss = 0.9 * 1 + (0.1/3) * (3 + 2 + 3) = 0.9 + 0.26667 = 1.16667 (x ln2)
  # position 1 (target 2): -log p = [3, 3, 2, 1] ln2
  #   loss = 0.9 * 2 + (0.1/3) * (3 + 3 + 1) = 1.8 + 0.23333 = 2.03333 (x ln2)
  # total = 3.2 ln2 = 2.2180710; the padded position adds nothing.
  expected = (0.9 * 1 + 0.1 / 3 * 8) * LN2 + (0.9 * 2 + 0.1 / 3 * 7) * LN2
  assert expected == pytest.approx(2.2180710, rel=1e-6)
  loss, weight = losses.label_smoothed_cross_entropy(
      jnp.asarray(LOGITS), jnp.asarray(TARGETS), jnp.asarray(WEIGHTS), eps)
  assert loss.dtype == jnp.float32 and weight.dtype == jnp.float32
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert float(weight) == 2.0


def test_label_smoothed_matches_numpy_reference_on_random_batch():
  rng = np.random.default_rng(0)
  batch, length, vocab, eps = 3, 5, 11, 0.1
  logits = rng.normal(size=(batch, length, vocab)).astype(np.float32) * 3
  targets = rng.integers(1, vocab, size=(batch, length)).astype(np.int32)
  targets[0, 3:] = 0
  targets[2, 1:] = 0
  weights = (targets != 0).astype(np.float32)
  # Explicit smoothed distribution, float64.
  q = np.full((batch, length, vocab), eps / (vocab - 1))
  np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
  x = logits.astype(np.float64)
  logp = x - np.log(np.exp(x).sum(-1, keepdims=True))
  expected = float((-(q * logp).sum(-1) * weights).sum())
  loss, weight = losses.label_smoothed_cross_entropy(
      jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(weights), eps)
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert float(weight) == weights.sum() == 3 + 5 + 1


def test_padding_contributes_nothing():
  logits = jnp.asarray(LOGITS)
  targets, weights = jnp.asarray(TARGETS), jnp.asarray(WEIGHTS)
  base = losses.compute_metrics(logits, targets, weights, 0.1)
  # Wild values, including inf, at the padded position change nothing.
  changed = logits.at[0, 2].set(jnp.array([1e4, -jnp.inf, 3.0, jnp.inf]))
  other = losses.compute_metrics(changed, targets, weights, 0.1)
  for key in ('loss', 'nll', 'correct', 'weight'):
    assert float(other[key]) == float(base[key]), key
    assert np.isfinite(float(other[key])), key
  assert float(base['weight']) == 2.0  # only the two real tokens count
  # Dropping the padded position altogether gives the same sums as well.
  short = losses.compute_metrics(logits[:, :2], targets[:, :2], weights[:, :2], 0.1)
  for key in ('loss', 'nll', 'correct', 'weight'):
    assert float(short[key]) == pytest.approx(float(base[key]), rel=1e-6), key


def test_zero_smoothing_is_plain_nll():
  logits, targets, weights = map(jnp.asarray, (LOGITS, TARGETS, WEIGHTS))
  loss, _ = losses.label_smoothed_cross_entropy(logits, targets, weights, 0.0)
  nll = losses.negative_log_likelihood(logits, targets, weights)
  # -log(1/2) - log(1/4) = (1 + 2) ln 2
  assert float(nll) == pytest.approx(3 * LN2, rel=1e-6)
  assert float(loss) == pytest.approx(float(nll), rel=1e-7)


def test_accuracy_and_perplexity_known_example():
  logits, targets, weights = map(jnp.asarray, (LOGITS, TARGETS, WEIGHTS))
  # Position 0: arg-max 1 == target 1 (hit); position 1: arg-max 3 != 2 (miss);
  # position 2 is padding (its arg-max 0 equals its target 0, but must not count).
  assert float(losses.token_accuracy(logits, targets, weights)) == 1.0
  nll = losses.negative_log_likelihood(logits, targets, weights)
  # exp(3 ln2 / 2) = 2^1.5 = 2.8284271
  assert float(losses.perplexity(nll, 2.0)) == pytest.approx(2.8284271, rel=1e-6)
  assert float(losses.perplexity(3 * LN2, 1.0)) == pytest.approx(8.0, rel=1e-6)
  np.testing.assert_allclose(
      losses.perplexity(jnp.array([0.0, 2 * LN2]), jnp.array([5.0, 2.0])), [1.0, 2.0],
      rtol=1e-6)


def test_compute_metrics_agrees_with_the_single_functions():
  logits, targets, weights = map(jnp.asarray, (LOGITS, TARGETS, WEIGHTS))
  metrics = jax.jit(losses.compute_metrics, static_argnums=3)(logits, targets, weights, 0.1)
  assert set(metrics) == {'loss', 'nll', 'correct', 'weight'}
  for value in metrics.values():
    assert value.shape == () and value.dtype == jnp.float32
  loss, weight = losses.label_smoothed_cross_entropy(logits, targets, weights, 0.1)
  assert float(metrics['loss']) == pytest.approx(float(loss), rel=1e-6)
  assert float(metrics['nll']) == pytest.approx(3 * LN2, rel=1e-6)
  assert float(metrics['correct']) == 1.0
  assert float(metrics['weight']) == float(weight) == 2.0


def test_correct_counts_equal_numpy_argmax_on_random_logits():
  rng = np.random.default_rng(3)
  logits = rng.normal(size=(4, 9, 50)).astype(np.float32)
  targets = np.where(rng.random((4, 9)) < 0.5, logits.argmax(-1), rng.integers(0, 50, (4, 9)))
  weights = (rng.random((4, 9)) < 0.8).astype(np.float32)
  expected = float(((logits.argmax(-1) == targets) * weights).sum())
  assert expected > 5  # both hits and misses are exercised
  got = losses.compute_metrics(jnp.asarray(logits), jnp.asarray(targets, jnp.int32),
                               jnp.asarray(weights), 0.1)['correct']
  assert float(got) == expected
  assert float(losses.token_accuracy(jnp.asarray(logits), jnp.asarray(targets, jnp.int32),
                                     jnp.asarray(weights))) == expected


def test_a_tie_with_the_target_counts_as_correct():
  # arg-max would pick token 0; the target (1) has the same, largest logit.
  logits = jnp.array([[[2.0, 2.0, -1.0]]])
  assert float(losses.token_accuracy(logits, jnp.array([[1]]), jnp.ones((1, 1)))) == 1.0
  assert float(losses.token_accuracy(logits, jnp.array([[2]]), jnp.ones((1, 1)))) == 0.0


def test_bfloat16_logits_give_float32_results():
  rng = np.random.default_rng(1)
  logits = jnp.asarray(rng.normal(size=(2, 7, 50)).astype(np.float32))
  targets = jnp.asarray(rng.integers(0, 50, size=(2, 7)).astype(np.int32))
  weights = losses.padding_weights(targets)
  ref = losses.compute_metrics(logits, targets, weights, 0.1)
  low = losses.compute_metrics(logits.astype(jnp.bfloat16), targets, weights, 0.1)
  for key in ('loss', 'nll', 'weight'):
    assert low[key].dtype == jnp.float32, key
    # bf16 keeps 8 mantissa bits: logits move by <= 2^-8 relative.
    assert float(low[key]) == pytest.approx(float(ref[key]), rel=1e-2), key
  loss, weight = losses.label_smoothed_cross_entropy(
      logits.astype(jnp.bfloat16), targets, weights, 0.1)
  assert loss.dtype == jnp.float32 and weight.dtype == jnp.float32


def test_gradient_of_smoothed_loss_is_softmax_minus_q():
  # d loss / d logits = softmax - q on real tokens and 0 on padding.
  logits, targets, weights = map(jnp.asarray, (LOGITS, TARGETS, WEIGHTS))
  grad = jax.grad(lambda x: losses.label_smoothed_cross_entropy(
      x, targets, weights, 0.1)[0])(logits)
  q0 = np.array([0.1 / 3, 0.9, 0.1 / 3, 0.1 / 3])
  q1 = np.array([0.1 / 3, 0.1 / 3, 0.9, 0.1 / 3])
  np.testing.assert_allclose(grad[0, 0], PROBS[0, 0] - q0, atol=1e-6)
  np.testing.assert_allclose(grad[0, 1], PROBS[0, 1] - q1, atol=1e-6)
  np.testing.assert_array_equal(grad[0, 2], np.zeros(4))


def test_invalid_label_smoothing_raises():
  logits, targets, weights = map(jnp.asarray, (LOGITS, TARGETS, WEIGHTS))
  with pytest.raises(ValueError, match='label_smoothing'):
    losses.label_smoothed_cross_entropy(logits, targets, weights, 1.0)
