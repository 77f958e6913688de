"""`lr_schedule` and `clip_grad_norm` (training/schedules.py, optim.clipped): each schedule
against a numpy formula, the peak the resolution writes out, clipping against optax's chain."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t2t_jax import config as config_lib
from t2t_jax.configs import default
from t2t_jax.runtime import resolution
from t2t_jax.training import optim, schedules


def _config(**values):
  config = default.get_config()
  config.update(dict(d_model=64, d_ff=128, num_heads=4, vocab_size=64, warmup_steps=10,
                     num_train_steps=50))
  config.update(values)
  return resolution.resolve(config)


def _reference(kind, peak, warmup, total, minimum, count):
  """The module doc's formulas in numpy, at the 1-based step count + 1."""
  step = count + 1.0
  if step <= warmup:
    return peak * step / warmup
  progress = min(max((step - warmup) / max(total - warmup, 1), 0.0), 1.0)
  return {'cosine': minimum + (peak - minimum) * 0.5 * (1 + math.cos(math.pi * progress)),
          'linear': peak + (minimum - peak) * progress, 'constant': peak}[kind]


@pytest.mark.parametrize('kind', ['cosine', 'linear', 'constant'])
def test_each_schedule_follows_its_formula(kind):
  config = _config(lr_schedule=kind, learning_rate=2e-3,
                   min_learning_rate=0.0 if kind == 'constant' else 1e-4)
  schedule = jax.jit(schedules.from_config(config))
  counts = np.arange(0, 70)
  got = np.array([float(schedule(c)) for c in counts])
  want = np.array([_reference(kind, 2e-3, 10, 50, config.min_learning_rate, c) for c in counts])
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
  assert got[9] == pytest.approx(2e-3)  # the peak at step warmup_steps (count 9)
  if kind != 'constant':
    assert got[49] == pytest.approx(1e-4) and got[69] == pytest.approx(1e-4)


def test_the_default_is_the_papers_schedule():
  config = _config()
  paper = optim.learning_rate_schedule(64, 10)
  schedule = schedules.from_config(config)
  assert [float(schedule(c)) for c in range(30)] == [float(paper(c)) for c in range(30)]


def test_a_warmup_decay_peak_defaults_to_the_papers_and_is_recorded():
  config = _config(lr_schedule='cosine', learning_rate_scale=2.0)
  assert config.learning_rate == pytest.approx(2.0 * (64 * 10) ** -0.5)
  assert config.learning_rate_scale == 1.0  # folded into the recorded peak
  assert resolution.resolve(config) == config
  assert float(schedules.from_config(config)(9)) == pytest.approx(config.learning_rate, rel=1e-6)


def test_a_run_shorter_than_the_warmup_only_warms_up_and_says_so():
  # A short trial of the embedded default (cosine, warmup 2000) with 20 steps: allowed, as eq. 3.
  config = _config(lr_schedule='cosine', warmup_steps=2000, num_train_steps=20)
  schedule = schedules.from_config(config)
  rates = [float(schedule(c)) for c in range(20)]
  assert rates == pytest.approx([config.learning_rate * (c + 1) / 2000 for c in range(20)])
  assert (f'this run ends at step 20, still warming up, at {rates[-1]:.3g})'
          in optim.describe(config))


@pytest.mark.parametrize('values, key', [
    (dict(learning_rate=1e-3), 'learning_rate'),
    (dict(min_learning_rate=1e-5), 'min_learning_rate'),
    (dict(lr_schedule='constant', min_learning_rate=1e-5), 'min_learning_rate'),
    (dict(lr_schedule='cosine', learning_rate=1e-3, learning_rate_scale=2.0),
     'learning_rate_scale'),
])
def test_schedule_keys_that_do_nothing_are_refused(values, key):
  config = default.get_config()
  config.update(values)
  with pytest.raises(config_lib.ConfigError, match=rf"^config key '{key}'=.* has no effect"):
    resolution.resolve(config, explicit=[key])


def test_bad_schedule_values_are_refused_in_one_line():
  config = default.get_config()
  config.lr_schedule = 'exp'
  with pytest.raises(config_lib.ConfigError, match=r"^config key 'lr_schedule': expected one of "
                     r"'rsqrt', 'cosine', 'linear', 'constant', got 'exp'$"):
    resolution.resolve(config)
  config = default.get_config()
  config.update(dict(lr_schedule='linear', learning_rate=1e-4, min_learning_rate=1e-3))
  with pytest.raises(config_lib.ConfigError, match=r"'min_learning_rate': expected at most the "
                     r'peak learning_rate=0.0001, got 0.001$'):
    resolution.resolve(config)
  with pytest.raises(config_lib.ConfigError, match=r"'clip_grad_norm': expected a value >= 0"):
    resolution.resolve(_config(clip_grad_norm=-1.0))


def test_clipping_equals_optax_chain_and_keeps_the_optimizers_state():
  params = {'w': jnp.ones((3, 4)), 'b': jnp.zeros((4,))}
  grads = {'w': jnp.full((3, 4), 2.0), 'b': jnp.full((4,), -3.0)}  # global norm 8
  tx, _ = optim.make(_config(clip_grad_norm=1.0))
  reference = optax.chain(optax.clip_by_global_norm(1.0), optim.make(_config())[0])
  state, ref_state = tx.init(params), reference.init(params)
  assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(
      optim.make(_config())[0].init(params))  # a run resumes whether or not it clips
  for _ in range(3):
    updates, state = tx.update(grads, state, params)
    ref_updates, ref_state = reference.update(grads, ref_state, params)
    jax.tree_util.tree_map(np.testing.assert_array_equal, updates, ref_updates)
  # Below the threshold: the same updates as without clipping.
  small = jax.tree_util.tree_map(lambda g: g * 1e-3, grads)
  unclipped = optim.make(_config())[0]
  a, _ = optim.make(_config(clip_grad_norm=1.0))[0].update(small, unclipped.init(params), params)
  b, _ = unclipped.update(small, unclipped.init(params), params)
  jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)
