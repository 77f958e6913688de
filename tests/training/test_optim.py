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


# --- config.optimizer (issue 44) ------------------------------------------------------------

def _tiny_config(**overrides):
  c = default.get_config()
  c.d_model, c.warmup_steps = 32, 10
  for key, value in overrides.items():
    c[key] = value
  return c


PARAMS = {'kernel': jnp.arange(1.0, 7.0).reshape(2, 3), 'bias': jnp.array([1.0, -2.0, 3.0])}


def _updates(tx, steps=3):
  """The parameters after `steps` updates of `tx` with fixed gradients."""
  params, state = PARAMS, tx.init(PARAMS)
  for i in range(steps):
    grads = jax.tree_util.tree_map(lambda p, i=i: jnp.sin(p * (i + 1)), params)
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
  return params


def test_default_optimizer_is_the_papers_adam_bitwise():
  c = _tiny_config()
  assert c.optimizer == 'adam'
  paper = optax.adam(optim.learning_rate_schedule(32, 10), b1=0.9, b2=0.98, eps=1e-9)
  got, want = _updates(optim.make_optimizer(c)), _updates(paper)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(a, b), got, want)
  tx, schedule = optim.make(c)
  assert float(schedule(9)) == float(optim.learning_rate_schedule(32, 10)(9))


def test_adamw_decays_matrices_only():
  c = _tiny_config(optimizer='adamw', weight_decay=0.5)
  tx = optim.make_optimizer(c)
  state = tx.init(PARAMS)
  zeros = jax.tree_util.tree_map(jnp.zeros_like, PARAMS)
  updates, _ = tx.update(zeros, state, PARAMS)
  rate = float(optim.learning_rate_schedule(32, 10)(0))
  np.testing.assert_allclose(updates['kernel'], -rate * 0.5 * PARAMS['kernel'], rtol=1e-6)
  np.testing.assert_array_equal(updates['bias'], 0.0)  # biases, LayerNorm scales: no decay


def test_adafactor_at_adams_rate_is_warned_with_the_measured_remedy():
  from configs import quickstart
  config = quickstart.get_config()  # peak 2.4e-3
  assert optim.advice(config) is None  # Adam
  config.optimizer = 'adafactor'
  line = optim.advice(config)
  assert 'peak learning rate of 0.0024' in line and 'test BLEU 12.9' in line
  # The embedded default decays along a cosine, whose peak is learning_rate (eq. 3: the scale).
  assert '--config.learning_rate=0.016 (peak 1.6e-2)' in line
  assert optim.describe(config).endswith('\nwarning: ' + line)
  config.lr_schedule = 'rsqrt'
  assert '--config.learning_rate_scale=8.1 (peak 1.6e-2)' in optim.advice(config)  # 1.2*1.6e-2/2.37e-3
  config.learning_rate_scale = 8.0
  assert optim.advice(config) is None and 'warning' not in optim.describe(config)


def test_adafactor_factors_every_matrix():
  tx = optim.make_optimizer(_tiny_config(optimizer='adafactor'))
  state = tx.init({'w': jnp.ones((4, 6)), 'b': jnp.ones(6)})
  factored = state[0]  # scale_by_factored_rms: row and column statistics of a matrix
  assert factored.v_row['w'].shape == (4,) and factored.v_col['w'].shape == (6,)
  assert factored.v['b'].shape == (6,)  # a vector keeps its full second moment
  moved = _updates(optim.make_optimizer(_tiny_config(optimizer='adafactor')), 1)
  assert not np.allclose(moved['kernel'], PARAMS['kernel'])


FACTORY = '''
import optax
seen = {}

def sgd(config, schedule):
  seen['args'] = (config.d_model, float(schedule(9)))
  return optax.sgd(schedule)

def constant(config, schedule):
  return optax.sgd(0.5), optax.constant_schedule(0.5)

def wrong(config, schedule):
  return 3

def raises(config, schedule):
  raise ValueError('no such setting')
'''


def test_optimizer_factory_from_a_file(tmp_path):
  path = tmp_path / 'my_opt.py'
  path.write_text(FACTORY)
  tx, schedule = optim.make(_tiny_config(optimizer=f'{path}:sgd'))
  assert float(schedule(9)) == float(optim.learning_rate_schedule(32, 10)(9))  # the paper's
  moved = _updates(tx, 1)
  np.testing.assert_allclose(moved['bias'], PARAMS['bias'] - float(schedule(0)) * np.sin(
      PARAMS['bias']), rtol=1e-6)
  _, own = optim.make(_tiny_config(optimizer=f'{path}:constant'))
  assert float(own(123)) == 0.5  # a factory's own schedule is the one logged
  assert 'sgd (factory(config, schedule))' in optim.describe(
      _tiny_config(optimizer=f'{path}:sgd'))


@pytest.mark.parametrize('attr, message', [
    ('nope', "cannot import name 'nope' from"),
    ('wrong', 'the factory returned a int; expected an optax.GradientTransformation'),
    ('raises', 'the factory raised ValueError: no such setting ('),
])
def test_optimizer_factory_errors_name_the_key(tmp_path, attr, message):
  path = tmp_path / 'my_opt.py'
  path.write_text(FACTORY)
  with pytest.raises(optim.variant.VariantError) as e:
    optim.make(_tiny_config(optimizer=f'{path}:{attr}'))
  assert str(e.value).startswith(f'--config.optimizer={path}:{attr} cannot be used (')
  assert message in str(e.value) and '\n' not in str(e.value)


def test_optimizer_key_is_validated():
  from t2t_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  for ok in ('adam', 'adamw', 'adafactor', 'my_opts:lion', 'dir/opt.py:f'):
    config_lib.validate(_tiny_config(optimizer=ok))
  with pytest.raises(config_lib.ConfigError, match="config key 'optimizer': expected one of"):
    config_lib.validate(_tiny_config(optimizer='sgd'))
  with pytest.raises(config_lib.ConfigError, match="'weight_decay': expected a value >= 0"):
    config_lib.validate(_tiny_config(weight_decay=-1.0))


def test_resume_with_another_optimizer_is_refused():
  from t2t_jax.runtime import checkpoint  # pylint: disable=import-outside-toplevel
  config = _tiny_config(optimizer='adafactor')
  saved = checkpoint.config_to_json(_tiny_config())
  assert checkpoint.incompatible_keys(saved, config) == [('optimizer', 'adam', 'adafactor')]
  del saved['optimizer']  # a checkpoint of before the key: Adam, the paper's
  assert checkpoint.incompatible_keys(saved, config) == [('optimizer', 'adam', 'adafactor')]
  assert checkpoint.incompatible_keys(saved, _tiny_config(weight_decay=0.1)) == []
