"""The training loop (§5): data, model, optimizer, checkpoints and logging.

`train(config, workdir)` builds the mesh, the vocabulary and the input iterator, restores the
latest checkpoint of the workdir if there is one (same config required), then runs
`parallel.train_step` until `config.num_train_steps`, logging every `log_every_steps`,
evaluating the dev loss every `eval_every_steps` and checkpointing by the step/time policy.
"""

import os
import time
from typing import Dict

import jax
import ml_collections
from absl import logging

from t2t_jax import checkpoint, metrics, model, optim, parallel, preemption, translate
from t2t_jax import workdir as workdir_lib
from t2t_jax.evaluate import decoded_bleu, evaluate_batches, summarize
from t2t_jax import config as config_lib
from t2t_jax.data import corpora, pipeline, tokenizer


class TrainError(RuntimeError):
  """Training cannot go on (e.g. too many consecutive non-finite steps)."""


class Data:
  """Vocabulary, training iterator and dev batches of a run."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *, with_eval: bool):
    pi, pc = jax.process_index(), jax.process_count()
    data_dir = corpora.default_data_dir(config, workdir)
    train_source = corpora.load_split(config, config.train_split, data_dir, process_index=pi)
    self.tokenizer = tokenizer.load_or_train(
        config, workdir,
        lambda: tokenizer.sample_sentences(train_source, config.vocab_sample_sentences), pi, pc)
    rows = jax.local_device_count()
    self.train = pipeline.make_train_iterator(
        config, train_source, self.tokenizer, rows_multiple=rows, process_index=pi,
        process_count=pc, cache_dir=os.path.join(workdir, 'data_cache'))
    self.eval_batches = None
    self.bleu_pairs = []
    if with_eval:
      dev_source = corpora.load_split(config, config.eval_split, data_dir, process_index=pi)
      self.eval_batches = pipeline.make_eval_batches(
          config, dev_source, self.tokenizer, rows_multiple=rows, process_index=pi,
          process_count=pc)
      if config.eval_batches:
        self.eval_batches = self.eval_batches[:config.eval_batches]
      n = min(config.eval_bleu_sentences, len(dev_source))
      self.bleu_pairs = [dev_source[i] for i in range(n)]


def _format(step: int, total: int, m: Dict[str, float]) -> str:
  eta = m.get('eta_s', 0.0)
  return (f'step {step}/{total} loss {m["loss"]:.4f} nll {m["nll"]:.4f} '
          f'acc {m["accuracy"]:.3f} lr {m["learning_rate"]:.3e} '
          f'{m["tokens_per_s"]:,.0f} tok/s ETA {int(eta // 3600)}h{int(eta % 3600 // 60):02d}m'
          f'{int(eta % 60):02d}s')


class _Steps:
  """The jitted update, with or without gradient accumulation."""

  def __init__(self, cfg, optimizer, mesh, config):
    self.accum, self.mesh = config.grad_accum_steps, mesh
    kwargs = dict(label_smoothing=config.label_smoothing, seed=config.seed,
                  debug_nonfinite_steps=tuple(config.debug_nonfinite_steps))
    if self.accum == 1:
      self.step = parallel.make_train_step(cfg, optimizer, mesh, **kwargs)
    else:
      self.grad_step, self.apply_step = parallel.make_accumulating_steps(
          cfg, optimizer, mesh, **kwargs)
    self.shapes = set()
    self.padded_tokens = 0  # target slots (rows x length, all processes) since the last read

  def __call__(self, state, iterator):
    """One update from `accum` batches of `iterator`; returns (state, metric sums)."""
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
      grads = g if grads is None else jax.tree_util.tree_map(jax.numpy.add, grads, g)
      sums = parallel.add_metrics(sums, m)
    return self.apply_step(state, grads, sums)

  def _note_shape(self, batch):
    shape = batch['targets'].shape
    self.padded_tokens += shape[0] * shape[1] * jax.process_count()
    if shape not in self.shapes:
      self.shapes.add(shape)
      logging.info('compiling the train step for local batch shape %s (%d shapes so far)',
                   shape, len(self.shapes))


class _NonfiniteWatch:
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


def _redraw_plots(workdir: str) -> None:
  """Learning curves in <workdir>/plots; a drawing problem never stops training."""
  try:
    from t2t_jax import plots
    plots.write_learning_curves(workdir)
  except Exception as e:  # noqa: BLE001 - plots are a convenience, the run goes on
    logging.warning('could not draw the learning curves: %s', e)


def train(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, float]:
  """Trains until `config.num_train_steps`; returns the last logged metrics.

  Resumes from the workdir's latest checkpoint; SIGTERM/SIGINT stop after the current step
  with a checkpoint (see `preemption`).
  """
  config_lib.validate(config)
  is_chief = jax.process_index() == 0
  workdir = workdir_lib.check_writable(workdir) if is_chief else os.path.abspath(workdir)
  lock = workdir_lib.WorkdirLock(workdir).acquire() if is_chief else None
  try:
    with preemption.PreemptionHandler() as handler:
      return _train(config, workdir, handler)
  finally:
    if lock is not None:
      lock.release()


def _train(config, workdir: str, handler: preemption.PreemptionHandler) -> Dict[str, float]:
  is_chief = jax.process_index() == 0
  checkpointer = checkpoint.Checkpointer(workdir, config.keep_checkpoints,
                                         config.checkpoint_every_steps,
                                         config.checkpoint_every_minutes)
  checkpointer.check_compatible(config)  # before any expensive work
  mesh = parallel.make_mesh()
  logging.info('mesh: %d devices over %d processes', mesh.size, jax.process_count())
  data = Data(config, workdir, with_eval=config.eval_every_steps > 0)
  cfg = model.TransformerConfig.from_config(config)
  optimizer = optim.make_optimizer(config)
  schedule = optim.learning_rate_schedule(config.d_model, config.warmup_steps,
                                          config.learning_rate_scale)
  state = parallel.create_train_state(cfg, optimizer, config.seed, mesh)
  if checkpointer.latest_step() is not None:
    state, data_state, start = checkpointer.restore_latest_good(checkpoint.abstract_like(state))
    data.train.set_state(data_state)
    logging.info('resumed from step %d of %s', start, checkpointer.directory)
  step = int(jax.device_get(state.step))
  writer = metrics.MetricsWriter(workdir, enabled=is_chief)
  eval_step = (parallel.make_eval_step(cfg, mesh, label_smoothing=config.label_smoothing)
               if data.eval_batches is not None else None)
  steps = _Steps(cfg, optimizer, mesh, config)
  translator = (translate.from_config(config, None, data.tokenizer) if data.bleu_pairs
                else None)
  watch = _NonfiniteWatch(config.max_consecutive_nonfinite)
  total = config.num_train_steps
  last: Dict[str, float] = {}

  run_start = time.monotonic()

  def run_eval():
    result = evaluate_batches(eval_step, state.params, data.eval_batches, mesh)
    if translator is not None and step > 0:  # an untrained model decodes to the length limit
      translator.params = state.params  # an argument of the jitted decode: no recompilation
      scores = decoded_bleu(translator, [p['source'] for p in data.bleu_pairs],
                            [p['target'] for p in data.bleu_pairs], config.target_lang)
      result.update(bleu=scores['bleu'], tokenized_bleu=scores['tokenized_bleu'])
      logging.info('eval at step %d: BLEU %.2f on %d %s sentences', step, scores['bleu'],
                   len(data.bleu_pairs), config.eval_split)
    logging.info('eval at step %d: %s loss %.4f nll %.4f perplexity %.2f accuracy %.3f', step,
                 config.eval_split, result['loss'], result['nll'], result['perplexity'],
                 result['accuracy'])
    result['elapsed_s'] = time.monotonic() - run_start
    writer.write(step, result, prefix=f'eval_{config.eval_split}')
    if is_chief:
      _redraw_plots(workdir)
    return result

  try:
    if eval_step is not None and step == 0:
      last.update({f'eval_{k}': v for k, v in run_eval().items()})
    sums, window_start, window_steps = None, time.monotonic(), 0
    while step < total:
      state, step_sums = steps(state, data.train)
      sums = parallel.add_metrics(sums, step_sums)
      step += 1
      window_steps += 1
      watch.push(step, step_sums['nonfinite'])
      stopping = handler.stop_requested()
      if step % config.log_every_steps == 0 or step == total or stopping:
        watch.flush()
        m = summarize(sums)  # the only regular host-device sync of the loop
        elapsed = time.monotonic() - window_start
        m.update(learning_rate=float(schedule(step - 1)),
                 tokens_per_s=m['tokens'] / max(elapsed, 1e-9),
                 padding_efficiency=m['tokens'] / max(steps.padded_tokens, 1),
                 steps_per_s=window_steps / max(elapsed, 1e-9),
                 eta_s=(total - step) * elapsed / window_steps,
                 elapsed_s=time.monotonic() - run_start,
                 nonfinite_steps=float(jax.device_get(sums['nonfinite'])))
        if is_chief:
          logging.info(_format(step, total, m))
        writer.write(step, m)
        last.update(m)
        sums, window_start, window_steps = None, time.monotonic(), 0
        steps.padded_tokens = 0
      if eval_step is not None and step % config.eval_every_steps == 0 and not stopping:
        last.update({f'eval_{k}': v for k, v in run_eval().items()})
      if checkpointer.should_save(step) or step == total or stopping:
        watch.flush()  # never checkpoint past a run of failures that should stop training
        checkpointer.save(step, state, data.train.get_state(), config)
      if stopping:
        checkpointer.wait()
        signalled = handler.received_at or time.monotonic()
        logging.warning('stopped by %s at step %d: checkpoint written to %s/%d in %.1f s; '
                        'rerun the same command to resume', handler.signal_name or 'a signal',
                        step, checkpointer.directory, step, time.monotonic() - signalled)
        last['stopped_at'] = step
        break
    watch.flush()
  finally:
    checkpointer.close()
    writer.close()
    data.train.close()
  logging.info('training done at step %d; compiled %d train-step shapes', step,
               len(steps.shapes))
  return last
