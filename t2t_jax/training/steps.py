"""What one training step runs (`Steps`: the jitted update, with or without gradient
accumulation) and the watch over skipped non-finite steps (`NonfiniteWatch`), for the
training loop (`train._Run`)."""

import jax
from absl import logging

from t2t_jax.model import flop_count
from t2t_jax.runtime import parallel, profiling


class TrainError(RuntimeError):
  """Training cannot go on (e.g. too many consecutive non-finite steps)."""


class Steps:
  """The jitted update, with or without gradient accumulation."""

  def __init__(self, net, optimizer, mesh, config, profile_dir=None):
    """`profile_dir`: where `config.profile_steps` traces go (`runtime/profiling.py`)."""
    self.accum, self.mesh = config.grad_accum_steps, mesh
    self.profiler = profiling.StepProfiler(config.get('profile_steps', ''), profile_dir)
    kwargs = dict(label_smoothing=config.label_smoothing, seed=config.seed,
                  debug_nonfinite_steps=tuple(config.debug_nonfinite_steps),
                  shard_optimizer_state=config.shard_optimizer_state,
                  aux_loss_weight=config.aux_loss_weight, trainable=config.trainable)
    if self.accum == 1:
      self.step = parallel.make_train_step(net, optimizer, mesh, **kwargs)
    else:
      self.grad_step, self.apply_step = parallel.make_accumulating_steps(
          net, optimizer, mesh, **kwargs)
    # The micro-batches' gradient programs are independent, so they run at once, except on
    # a CPU mesh (`parallel.programs_one_at_a_time`: 3 of 3 stress runs of 400 updates on 8
    # CPU devices aborted in the collectives' rendezvous without a wait, 0 of 3 with it).
    self.one_at_a_time = parallel.programs_one_at_a_time(mesh)
    self.shapes = set()
    self.padded_tokens = 0  # target slots (rows x length, all processes) since the last read
    self.model_flops = 0  # matmul FLOPs of the updates since the last read (`flop_count`)
    self._cfg = getattr(net, 'cfg', None)

  def __call__(self, state, iterator, number=0):
    """One update from `accum` batches of `iterator`; returns (state, metric sums). `number`:
    the step it makes (1-based), for `profile_steps`."""
    with self.profiler.step(number) as done:
      result = self._update(state, iterator)
      done(result)
    return result

  def _update(self, state, iterator):
    if self.accum == 1:
      batch = next(iterator)
      self._note_shape(batch)
      return self.step(state, parallel.shard_batch(batch, self.mesh))
    grads = sums = None
    for micro in range(self.accum):
      batch = next(iterator)
      self._note_shape(batch)
      g, m = self.grad_step(state.params, parallel.shard_batch(batch, self.mesh), state.step,
                            micro)
      if self.one_at_a_time:
        jax.block_until_ready(g)
      grads = g if grads is None else jax.tree_util.tree_map(jax.numpy.add, grads, g)
      sums = parallel.add_metrics(sums, m)
    return self.apply_step(state, grads, sums)

  def _note_shape(self, batch):
    shape = batch['targets'].shape
    self.padded_tokens += shape[0] * shape[1] * jax.process_count()
    if self._cfg is not None:  # all processes' rows; padding computed too
      self.model_flops += flop_count.train_flops(
          self._cfg, shape[0] * jax.process_count(), batch['inputs'].shape[1], shape[1])
    if shape not in self.shapes:
      self.shapes.add(shape)
      logging.info('compiling the train step for local batch shape %s (%d shapes so far)',
                   shape, len(self.shapes))


class NonfiniteWatch:
  """Counts consecutive skipped (non-finite) steps, reading each step's flag one step late.

  Reading the flag of the previous step while the current one is already dispatched keeps
  the device busy: no per-step host-device sync stalls the pipeline.
  """

  def __init__(self, limit: int):
    self.limit, self.run, self.total, self.first = limit, 0, 0, None
    self._pending = None

  def push(self, step: int, flag) -> None:
    """Records the (device) flag of `step`; checks the one pushed before it."""
    pending, self._pending = self._pending, (step, flag)
    if pending is not None:
      self._check(*pending)

  def flush(self) -> None:
    if self._pending is not None:
      self._check(*self._pending)
      self._pending = None

  def _check(self, step: int, flag) -> None:
    if float(flag) > 0:
      self.total += 1
      self.run += 1
      self.first = step if self.run == 1 else self.first
      logging.warning('step %d: non-finite loss or gradients; update skipped (%d in a row)',
                      step, self.run)
    else:
      self.run = 0
    if self.run >= self.limit:
      raise TrainError(f'{self.run} consecutive steps ({self.first}-{step}) had a non-finite '
                       'loss or gradients, so training stopped (config.max_consecutive_'
                       'nonfinite). The checkpoints already written are intact; lower the '
                       'learning rate or check the data.')
