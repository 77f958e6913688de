"""Learning-rate schedules: the paper's (§5.3, eq. 3) and the warmup-then-decay ones
`config.lr_schedule` names.

    rsqrt     lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)   (eq. 3)
    cosine    linear warmup to `learning_rate` over `warmup_steps`, then
              min + (peak - min) * (1 + cos(pi * progress)) / 2
    linear    the same warmup, then peak + (min - peak) * progress
    constant  the same warmup, then `learning_rate`

`progress` = (step - warmup_steps) / (num_train_steps - warmup_steps), clipped to [0, 1], so
cosine and linear reach `min_learning_rate` at `num_train_steps` and stay there. Every
schedule takes optax's 0-based update count and evaluates at the paper's 1-based
`step = count + 1`; it is what training logs as `learning_rate` and what an optimizer
factory receives.
"""

import math

import jax.numpy as jnp
import ml_collections
import optax

from t2t_jax.config import paper_peak
from t2t_jax.model.array_checks import check_int, check_number

SCHEDULES = ('rsqrt', 'cosine', 'linear', 'constant')


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
  check_int('learning_rate_schedule', 'd_model', d_model, minimum=1)
  check_int('learning_rate_schedule', 'warmup_steps', warmup_steps, minimum=1)
  check_number('learning_rate_schedule', 'scale', scale)
  # Python floats, folded into constants at trace time.
  factor = float(scale) * float(d_model) ** -0.5
  warmup_factor = float(warmup_steps) ** -1.5

  def schedule(count):
    step = jnp.asarray(count, jnp.float32) + 1.0
    return factor * jnp.minimum(step ** -0.5, step * warmup_factor)

  return schedule


def warmup_decay_schedule(kind: str, peak: float, warmup_steps: int, total_steps: int,
                          minimum: float = 0.0) -> optax.Schedule:
  """Linear warmup to `peak` over `warmup_steps`, then `kind` ('cosine', 'linear' or
  'constant') decay to `minimum` at `total_steps` (module doc).

  Returns:
    An optax schedule: `count` (int scalar, 0-based) -> float32 scalar rate.
  """
  where = 'warmup_decay_schedule'
  if kind not in SCHEDULES[1:]:
    raise ValueError(f'{where}: kind={kind!r}; expected one of {", ".join(SCHEDULES[1:])}')
  check_number(where, 'peak', peak)
  check_number(where, 'minimum', minimum)
  check_int(where, 'warmup_steps', warmup_steps, minimum=1)
  check_int(where, 'total_steps', total_steps, minimum=1)
  peak, minimum = float(peak), float(minimum)
  span = float(max(total_steps - warmup_steps, 1))

  def schedule(count):
    step = jnp.asarray(count, jnp.float32) + 1.0
    warm = peak * jnp.minimum(step / warmup_steps, 1.0)
    progress = jnp.clip((step - warmup_steps) / span, 0.0, 1.0)
    if kind == 'cosine':
      decayed = minimum + (peak - minimum) * 0.5 * (1.0 + jnp.cos(math.pi * progress))
    elif kind == 'linear':
      decayed = peak + (minimum - peak) * progress
    else:
      decayed = jnp.full_like(progress, peak)
    return jnp.where(step <= warmup_steps, warm, decayed)

  return schedule


def from_config(config: ml_collections.ConfigDict) -> optax.Schedule:
  """The schedule `config.lr_schedule` names, of the config's keys (`configs/default.py`)."""
  kind = getattr(config, 'lr_schedule', 'rsqrt')  # a config of before the key: the paper's
  if kind == 'rsqrt':
    return learning_rate_schedule(config.d_model, config.warmup_steps, config.learning_rate_scale)
  peak = config.learning_rate or paper_peak(config.d_model, config.warmup_steps,
                                            config.learning_rate_scale)
  return warmup_decay_schedule(kind, peak, config.warmup_steps, config.num_train_steps,
                               config.min_learning_rate)
