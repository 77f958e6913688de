"""Tests for t2t_jax.training.optim: the §5.3 schedule and the Adam hyperparameters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import default
from t2t_jax.training import optim

# 512**-0.5 * min(step**-0.5, step * 4000**-1.5), evaluated in float64 by hand
# (outside the code under test) for d_model 512, warmup 4000.
EXPECTED_BASE = {
    1: 1.746928107421711e-07,        # warmup branch: 512**-0.5 * 1 * 4000**-1.5
    100: 1.746928107421711e-05,      # warmup branch, 100x step 1
    4000: 6.987712429686843e-04,     # peak: (512 * 4000)**-0.5
    4001: 6.98683912937353e-04,      # decay branch: 512**-0.5 * 4001**-0.5
    100000: 1.3975424859373687e-04,  # decay branch: 512**-0.5 * 100000**-0.5
}


def test_schedule_matches_formula_at_one_based_steps():
  schedule = optim.learning_rate_schedule(512, 4000)
  for step, expected in EXPECTED_BASE.items():
    # optax passes the 0-based update count: step s is count s - 1.
    assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-6), step


def test_schedule_first_update_is_step_one_not_zero():
  schedule = optim.learning_rate_schedule(512, 4000)
  assert float(schedule(0)) > 0.0
  assert float(schedule(0)) == pytest.approx(1.746928107421711e-07, rel=1e-6)


def test_schedule_peak_and_shape():
  schedule = jax.jit(optim.learning_rate_schedule(512, 4000))
  counts = jnp.arange(0, 20000)
  rates = np.asarray(jax.vmap(schedule)(counts))
  assert int(np.argmax(rates)) + 1 == 4000  # 1-based step of the peak
  assert rates.max() == pytest.approx(6.99e-4, rel=1e-3)
  assert np.all(np.diff(rates[:4000]) > 0)  # linear warmup
  assert np.all(np.diff(rates[4000:]) < 0)  # inverse-square-root decay
  assert rates.dtype == np.float32


def test_schedule_scale_and_other_sizes():
  # Big model: d_model 1024, warmup 4000, step 4000: (1024 * 4000)**-0.5 = 4.941e-4.
  big = optim.learning_rate_schedule(1024, 4000)
  assert float(big(3999)) == pytest.approx(4.941058844013093e-04, rel=1e-6)
  scaled = optim.learning_rate_schedule(512, 4000, scale=2.0)
  assert float(scaled(99)) == pytest.approx(2 * 1.746928107421711e-05, rel=1e-6)
  with pytest.raises(ValueError, match='warmup_steps'):
    optim.learning_rate_schedule(512, 0)


def test_config_has_paper_adam_hyperparameters():
  config = default.get_config()
  assert (config.adam_b1, config.adam_b2, config.adam_eps) == (0.9, 0.98, 1e-9)
  assert (config.d_model, config.warmup_steps, config.learning_rate_scale) == (512, 4000, 1.0)


def _hand_adam(grads, lrs, b1, b2, eps):
  """Two-line Adam (Kingma & Ba, Algorithm 1) in float64; returns the updates."""
  m = np.zeros_like(grads[0])
  v = np.zeros_like(grads[0])
  updates = []
  for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    updates.append(-lr * m_hat / (np.sqrt(v_hat) + eps))
  return updates


def test_make_optimizer_matches_hand_written_adam():
  config = default.get_config()
  tx = optim.make_optimizer(config)
  # The 1e-9 gradient entry makes epsilon visible (|g| == eps: the step is halved);
  # the second step differs between beta2 = 0.98 and beta2 = 0.999.
  grads = [np.array([1.0, -2.0, 1e-9, 0.5]), np.array([3.0, 1.0, 1e-9, -0.5])]
  lrs = [1.746928107421711e-07, 2 * 1.746928107421711e-07]  # steps 1 and 2
  expected = _hand_adam(grads, lrs, b1=0.9, b2=0.98, eps=1e-9)

  # optax works in float32: 1 - 0.98**t loses ~1e-5 relative to cancellation.
  params = jnp.zeros(4, jnp.float32)
  state = tx.init(params)
  for g, want in zip(grads, expected):
    updates, state = tx.update(jnp.asarray(g, jnp.float32), state, params)
    np.testing.assert_allclose(np.asarray(updates), want, rtol=1e-4)
    params = optax.apply_updates(params, updates)
  assert float(expected[0][2]) == pytest.approx(-0.5 * lrs[0], rel=1e-6)

  # The check has teeth: other betas give a different second update.
  wrong = _hand_adam(grads, lrs, b1=0.9, b2=0.999, eps=1e-9)
  assert not np.allclose(wrong[1], expected[1], rtol=1e-3, atol=0.0)


def test_make_optimizer_reads_config():
  config = default.get_config()
  config.adam_b2 = 0.999
  config.learning_rate_scale = 2.0
  tx = optim.make_optimizer(config)
  grads = [np.array([1.0, -2.0]), np.array([3.0, 1.0])]
  lrs = [2 * 1.746928107421711e-07, 4 * 1.746928107421711e-07]
  expected = _hand_adam(grads, lrs, b1=0.9, b2=0.999, eps=1e-9)
  params = jnp.zeros(2, jnp.float32)
  state = tx.init(params)
  for g, want in zip(grads, expected):
    updates, state = tx.update(jnp.asarray(g, jnp.float32), state, params)
    np.testing.assert_allclose(np.asarray(updates), want, rtol=1e-4)
