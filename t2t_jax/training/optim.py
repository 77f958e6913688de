"""The paper's learning-rate schedule and Adam optimizer (§5.3), in optax.

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)       (eq. 3)

The rate grows linearly for the first `warmup_steps` steps and then decays as
the inverse square root of the step number; the peak, at `step ==
warmup_steps`, is `(d_model * warmup_steps)^-0.5` (6.99e-4 for the base model).

Gradient accumulation is not done here: the train step sums token-weighted
gradients of its micro-batches and applies one update, so the optimizer (and
its step count) advances once per update, exactly as on a machine big enough
for the whole batch.
"""

import jax.numpy as jnp
import ml_collections
import optax


def learning_rate_schedule(d_model: int, warmup_steps: int,
                           scale: float = 1.0) -> optax.Schedule:
  """The inverse-square-root schedule with linear warmup (§5.3, eq. 3).

  optax calls a schedule with the 0-based number of updates already applied
  (`count`: 0 for the first update). The paper's `step_num` is 1-based, so the
  schedule evaluates the formula at `step = count + 1`: the first update uses
  step 1 (rate `d_model^-0.5 * warmup^-1.5`), never step 0 (rate 0, a wasted
  update), and update number `warmup_steps` gets the peak rate.

  Args:
    d_model: model width; the rate scales with `d_model^-0.5`.
    warmup_steps: number of linear-warmup steps (4000 in the paper).
    scale: extra factor (`config.learning_rate_scale`; 1.0 is the paper).

  Returns:
    An optax schedule: `count` (int scalar, 0-based) -> float32 scalar rate.
  """
  if d_model <= 0:
    raise ValueError(f'd_model must be positive, got {d_model}')
  if warmup_steps <= 0:
    raise ValueError(f'warmup_steps must be positive, got {warmup_steps}')
  # Python floats, folded into constants at trace time.
  factor = float(scale) * float(d_model) ** -0.5
  warmup_factor = float(warmup_steps) ** -1.5

  def schedule(count):
    step = jnp.asarray(count, jnp.float32) + 1.0
    return factor * jnp.minimum(step ** -0.5, step * warmup_factor)

  return schedule


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Adam with the paper's hyperparameters and schedule (§5.3).

  Reads `adam_b1`, `adam_b2`, `adam_eps` (paper: 0.9, 0.98, 1e-9), `d_model`,
  `warmup_steps` and `learning_rate_scale` from the config. The same schedule,
  for logging the current rate, is `learning_rate_schedule(config.d_model,
  config.warmup_steps, config.learning_rate_scale)`.

  Args:
    config: the run's config (see `configs/default.py`).

  Returns:
    An `optax.GradientTransformation`; its updates are to be *added* to the
    parameters (`optax.apply_updates`).
  """
  schedule = learning_rate_schedule(
      config.d_model, config.warmup_steps, config.learning_rate_scale)
  return optax.adam(
      learning_rate=schedule, b1=config.adam_b1, b2=config.adam_b2, eps=config.adam_eps)
