"""The paper's learning-rate schedule and Adam optimizer (§5.3), in optax, and the others
`config.optimizer` names (docs/extension_points.md).

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)       (eq. 3)

The rate grows linearly for the first `warmup_steps` steps and then decays as
the inverse square root of the step number; the peak, at `step ==
warmup_steps`, is `(d_model * warmup_steps)^-0.5` (6.99e-4 for the base model).

Gradient accumulation is not done here: the train step sums token-weighted
gradients of its micro-batches and applies one update, so the optimizer (and
its step count) advances once per update, exactly as on a machine big enough
for the whole batch.

`config.optimizer` picks the optimizer; the learning rate is the paper's schedule for all of
them unless a factory replaces it:

  'adam'       the paper's: Adam(adam_b1, adam_b2, adam_eps), 0.9/0.98/1e-9 (the default).
  'adamw'      AdamW (Loshchilov & Hutter): the same Adam, plus decoupled weight decay
               `weight_decay` (times the learning rate, as optax and PyTorch do) of every
               parameter of 2 or more dimensions (kernels, embeddings); biases and LayerNorm
               scales are not decayed.
  'adafactor'  `optax.adafactor` with tensor2tensor's settings (`adafactor_optimizer_from_
               hparams` with t2t's default hparams): decay_rate 0.8 (t2t's "pow" decay,
               1 - step^-0.8), beta1 0 (no momentum), update clipping threshold 1.0, factored
               second moments, multiply_by_parameter_scale (floor epsilon2 1e-3), epsilon1
               1e-30. Every parameter of 2+ dimensions is factored (min_dim_size_to_factor=1,
               as t2t; optax's default 128 is mesh-tensorflow's); optax factors a leaf's two
               largest dimensions where t2t factors the last two (the same for matrices).
               Note: t2t paired Adafactor with its rsqrt_decay schedule (peak 0.01 at 10k
               warmup steps); with the paper's schedule raise `learning_rate_scale`
               (`advice`: a run below a peak of 5e-3 is warned, with the measured BLEU).
  'module:factory' or 'path/to/file.py:factory'
               `factory(config, schedule)` (loaded as `--config.model` is,
               `variant.load_factory`): the run config and the paper's schedule (an
               `optax.Schedule`, 0-based update count -> rate). It returns an
               `optax.GradientTransformation`, or `(transformation, schedule)` when it uses
               a schedule of its own: that one is then logged as `learning_rate`.
"""

from typing import Callable, Optional, Tuple, Union

import jax
import jax.numpy as jnp
import ml_collections
import optax

from t2t_jax.config import OPTIMIZERS, check_config_dict
from t2t_jax.model.array_checks import check_int, check_number
from t2t_jax.model import variant
from t2t_jax.training import ema, freezing, schedules
from t2t_jax.training.schedules import learning_rate_schedule  # noqa: F401  (public here)

# factory(config, schedule) -> transformation, or (transformation, its own schedule).
OptimizerFactory = Callable[
    [ml_collections.ConfigDict, optax.Schedule],
    Union[optax.GradientTransformation, Tuple[optax.GradientTransformation, optax.Schedule]]]


def _matrices(params):
  """The weight-decay mask of 'adamw': True for leaves of 2+ dimensions."""
  return jax.tree_util.tree_map(lambda p: jnp.ndim(p) >= 2, params)


def _builtin(name: str, config: ml_collections.ConfigDict,
             schedule: optax.Schedule) -> optax.GradientTransformation:
  if name == 'adam':
    return optax.adam(
        learning_rate=schedule, b1=config.adam_b1, b2=config.adam_b2, eps=config.adam_eps)
  if name == 'adamw':
    return optax.adamw(learning_rate=schedule, b1=config.adam_b1, b2=config.adam_b2,
                       eps=config.adam_eps, weight_decay=config.weight_decay, mask=_matrices)
  return optax.adafactor(  # 'adafactor': tensor2tensor's settings (module docstring)
      learning_rate=schedule, min_dim_size_to_factor=1, decay_rate=0.8, decay_offset=0,
      multiply_by_parameter_scale=True, clipping_threshold=1.0, momentum=None, eps=1e-30,
      factored=True)


def _from_factory(spec: str, config: ml_collections.ConfigDict, schedule: optax.Schedule
                  ) -> Tuple[optax.GradientTransformation, optax.Schedule]:
  factory = variant.load_factory(spec, key='optimizer')
  try:
    made = factory(config, schedule)
  except Exception as e:  # noqa: BLE001  a user's factory can raise anything
    raise variant.VariantError(spec, f'the factory raised {variant.raised(e)}',
                               key='optimizer') from None
  # A GradientTransformation is itself a pair (init, update): tested first.
  is_tx = lambda x: isinstance(x, optax.GradientTransformation)  # noqa: E731
  pair = not is_tx(made) and isinstance(made, tuple) and len(made) == 2
  tx, own = made if pair else (made, schedule)
  if not is_tx(tx) or not callable(own):
    raise variant.VariantError(
        spec, f'the factory returned a {type(made).__name__}; expected an optax.'
        'GradientTransformation, or (GradientTransformation, schedule)', key='optimizer')
  return tx, own


def make(config: ml_collections.ConfigDict
         ) -> Tuple[optax.GradientTransformation, optax.Schedule]:
  """(optimizer, learning-rate schedule) of `config.optimizer` (module docstring).

  The schedule is the config's (`schedules.from_config`, the paper's by default) unless a
  factory returned its own; it is
  what training logs as `learning_rate`. Around the optimizer, innermost first: gradient
  clipping (`clip_grad_norm`, `clipped`), freezing what `trainable` leaves out
  (`freezing.frozen`), the moving average of the weights (`ema_decay`, `ema.with_ema`); each
  is absent at its default, so the paper's optimizer state is unchanged.

  Raises:
    ConfigError (`variant.VariantError`): a factory spec that names nothing usable, a factory
      that raises or returns something else, each in one line naming `--config.optimizer`.
  """
  schedule = schedules.from_config(config)
  name = getattr(config, 'optimizer', 'adam')  # a config of before the key: the paper's
  if name in OPTIMIZERS:
    tx = _builtin(name, config, schedule)
  else:
    tx, schedule = _from_factory(name, config, schedule)
  clip = getattr(config, 'clip_grad_norm', 0.0)
  tx = freezing.frozen(clipped(tx, clip) if clip else tx, getattr(config, 'trainable', ''))
  return ema.with_ema(tx, getattr(config, 'ema_decay', 0.0)), schedule


def clipped(tx: optax.GradientTransformation, max_norm: float) -> optax.GradientTransformation:
  """`tx` applied to the gradients scaled to a global L2 norm of at most `max_norm`
  (`optax.clip_by_global_norm`'s rule). Its state is `tx`'s own, so a run resumes whether or
  not it clips (an `optax.chain` would nest the state in a tuple)."""
  check_number('clipped', 'max_norm', max_norm)
  clip = optax.clip_by_global_norm(float(max_norm))

  def update(updates, state, params=None):
    updates, _ = clip.update(updates, optax.EmptyState())
    return tx.update(updates, state, params)

  return optax.GradientTransformation(tx.init, update)


# Adafactor's steps are relative to each parameter's RMS (multiply_by_parameter_scale), so
# it wants a larger rate than Adam: tensor2tensor's peaked at 1e-2. Measured on the embedded
# default (one H200, jax 0.11.2, benchmarks/results/gpu.jsonl 'adafactor_learning_rate'):
# test BLEU 12.9 at the paper's peak 2.4e-3, 21.7 at 8e-3, 28.0 at 1.6e-2, 27.7 at 3.2e-2;
# Adam 30.2 beside them.
ADAFACTOR_LOW_PEAK = 5e-3


def advice(config: ml_collections.ConfigDict) -> Optional[str]:
  """A line for a run whose optimizer will learn far slower than it could, or None: Adafactor
  under a peak learning rate below `ADAFACTOR_LOW_PEAK`."""
  if getattr(config, 'optimizer', 'adam') != 'adafactor':
    return None
  peak = float(schedules.from_config(config)(config.warmup_steps - 1))
  if peak >= ADAFACTOR_LOW_PEAK:
    return None
  scale = config.learning_rate_scale * 1.6e-2 / peak
  remedy = (f'--config.learning_rate_scale={scale:.3g}' if config.lr_schedule == 'rsqrt'
            else '--config.learning_rate=0.016')
  return (f'optimizer=adafactor at a peak learning rate of {peak:.2g}: its steps are relative '
          "to each parameter's scale, and it learns slowly at Adam's rates (the embedded "
          'default: test BLEU 12.9 at peak 2.4e-3 against 28.0 at 1.6e-2; tensor2tensor peaked '
          f'at 1e-2): consider {remedy} (peak 1.6e-2)')


def describe(config: ml_collections.ConfigDict, recorded: bool = False) -> str:
  """One line for `--mode=info`: the optimizer, the learning-rate schedule and the weight of
  sown auxiliary losses. A factory is loaded and called, so a bad spec fails here as in
  training; `recorded` (a trained run's config): a factory that cannot be loaded here is
  named with the reason instead."""
  name = getattr(config, 'optimizer', 'adam')
  try:
    make(config)
  except variant.VariantError as e:
    if not recorded:
      raise
    return (f'optimizer: {name} (factory(config, schedule); cannot be loaded here: '
            f'{e.reason}); aux_loss_weight={config.aux_loss_weight:g}')
  adam = f'b1={config.adam_b1:g} b2={config.adam_b2:g} eps={config.adam_eps:g}'
  what = {'adam': f"adam (the paper's) {adam}",
          'adamw': f'adamw {adam} weight_decay={config.weight_decay:g} (2+-D parameters)',
          'adafactor': "adafactor (tensor2tensor's settings: decay_rate 0.8, no momentum, "
                       'clipping 1.0, factored, multiply_by_parameter_scale)'
          }.get(name, f'{name} (factory(config, schedule))')
  peak = float(schedules.from_config(config)(config.warmup_steps - 1))
  if config.lr_schedule == 'rsqrt':
    rate = (f"the paper's (d_model={config.d_model}, warmup_steps={config.warmup_steps}, "
            f'learning_rate_scale={config.learning_rate_scale:g}: peak {peak:.3g} at step '
            f'{config.warmup_steps})')
  elif config.warmup_steps > config.num_train_steps:  # a short trial: all warmup
    last = float(schedules.from_config(config)(config.num_train_steps - 1))
    rate = (f'{config.lr_schedule} (linear warmup over {config.warmup_steps} steps to peak '
            f'{peak:.3g}; this run ends at step {config.num_train_steps}, still warming up, '
            f'at {last:.3g})')
  else:
    rate = (f'{config.lr_schedule} (linear warmup over {config.warmup_steps} steps to peak '
            f'{peak:.3g}' + ('' if config.lr_schedule == 'constant' else
                             f', then to {config.min_learning_rate:.3g} at step '
                             f'{config.num_train_steps}') + ')')
  if name not in OPTIMIZERS:
    rate += ' unless the factory returns its own'
  clip = (f'; gradients clipped to a global norm of {config.clip_grad_norm:g}'
          if config.clip_grad_norm else '')
  if config.trainable:
    clip += f'; only parameters matching trainable={config.trainable!r} are trained'
  if config.ema_decay:
    clip += (f'; a moving average of the weights (decay {config.ema_decay:g}) is kept '
             '(--checkpoint=ema)')
  line = (f'optimizer: {what}; learning rate: {rate}{clip}; '
          f'aux_loss_weight={config.aux_loss_weight:g}')
  warning = advice(config)
  return line + (f'\nwarning: {warning}' if warning else '')


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """The optimizer of `config.optimizer` (`make`); Adam with the paper's hyperparameters and
  schedule (§5.3) by default.

  Reads `adam_b1`, `adam_b2`, `adam_eps` (paper: 0.9, 0.98, 1e-9), `d_model`,
  `warmup_steps` and `learning_rate_scale` from the config. The same schedule,
  for logging the current rate, is `learning_rate_schedule(config.d_model,
  config.warmup_steps, config.learning_rate_scale)` (`make` returns the one a factory uses).

  Args:
    config: the run's config (see `configs/default.py`).

  Returns:
    An `optax.GradientTransformation`; its updates are to be *added* to the
    parameters (`optax.apply_updates`).
  """
  check_config_dict('make_optimizer', config)
  return make(config)[0]
