"""The training loop (§5): data, model, optimizer, checkpoints and logging.

`train(config, workdir)` builds the mesh, the vocabulary and the input iterator, restores the
latest checkpoint of the workdir if there is one (same config required), then runs
`parallel.train_step` until `config.num_train_steps`. After every step, in this order:

1. `log_window.LogWindow`: every `log_every_steps` (and at the end or a stop), one metrics line;
2. `dev_eval.DevEvaluator`: every `eval_every_steps`, dev loss (and dev BLEU);
3. `save_policy.SavePolicy`: a checkpoint every N steps / T minutes, at the end and on a stop,
   decided identically on every process;
4. `preemption.PreemptionHandler`: on SIGTERM/SIGINT (any process), stop at the same step
   everywhere, after that step's checkpoint.
"""

import itertools
import os
import time
from typing import Any, Dict, Optional

import jax
import ml_collections
from absl import logging

from t2t_jax import config as config_lib
from t2t_jax.configs import default as default_config
from t2t_jax.data import (corpora, fingerprint, language_tokens, mixture, pipeline,
                          split_check, tasks, tokenizer, vocab_pair, vocab_record, vocabularies)
from t2t_jax.inference import checkpoint_choice
from t2t_jax.model import transformer as model, variant
from t2t_jax.runtime import checkpoint, first_fit, meshes, parallel, resolution
from t2t_jax.storage import layout
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.training import (best, dev_eval, ema, init_from, log_window, metrics, optim,
                              freezing, goodput, preemption, resume_checks, save_policy, steps,
                              trackers)
from t2t_jax.training.steps import TrainError  # noqa: F401  (where callers find it)


class Data:
  """Vocabulary, training iterator and dev batches of a run."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *, with_eval: bool,
               trained: bool = False, data_fingerprint=None, checkpoint_vocabulary=None):
    pi, pc = jax.process_index(), jax.process_count()
    data_dir = corpora.default_data_dir(config, workdir)
    if data_fingerprint is None:  # what the vocabulary is recorded as trained from
      data_fingerprint = fingerprint.compute(config, data_dir)
    per_host = corpora.prepared_per_host(config, workdir)
    train_source = corpora.load_split(config, config.train_split, data_dir, process_index=pi,
                                      per_host=per_host)
    # One shared vocabulary, or a `VocabPair` of the two sides' (`share_vocab=False`).
    self.tokenizer = vocabularies.load_or_train(
        config, workdir, train_source, pi, pc, symbols_fn=vocabulary_symbols(config, train_source),
        trained=trained, source_symbols=mixture.source_symbols(config), data_fingerprint=data_fingerprint,
        checkpoint_vocabulary=checkpoint_vocabulary)
    mixture.check_tags(config, vocab_pair.side(self.tokenizer, 'source'))
    rows, plain = jax.local_device_count(), language_tokens.plain(self.tokenizer)
    self.train = pipeline.make_train_iterator(  # a mixture's text has its language tokens
        config, train_source, plain, rows_multiple=rows, process_index=pi,
        process_count=pc, cache_dir=layout.of(workdir).data_cache, row_ids=first_fit.row_ids)
    self.eval_batches, self.bleu_pairs, self.other_pairs = None, [], []
    if with_eval:
      self.other_pairs = dev_eval.other_pairs(config, data_dir, plain, rows, pi, pc, per_host)
      dev_source = corpora.load_split(config, config.eval_split, data_dir, process_index=pi,
                                      per_host=per_host)
      self.eval_batches = pipeline.make_eval_batches(
          config, dev_source, self.tokenizer, rows_multiple=rows, process_index=pi,
          process_count=pc)
      if config.eval_batches:
        self.eval_batches = self.eval_batches[:config.eval_batches]
      n = min(config.eval_bleu_sentences, len(dev_source))
      self.bleu_pairs = [dev_source[i] for i in range(n)]


def vocabulary_symbols(config: ml_collections.ConfigDict, train_source):
  """The vocabulary's unsplittable symbols, as a function for `tokenizer.load_or_train`: those
  of the training targets that the task keeps whole (a treebank: every tree token), none for
  translation."""
  task = tasks.get(config.dataset)  # a treebank: t2t_jax/parsing/task.py
  if task is None:
    return None
  every_text = lambda: tokenizer.sample_sentences(train_source, len(train_source))  # noqa: E731
  # Source and target of each pair in turn: the targets are every second text.
  return lambda: task.vocabulary_symbols(itertools.islice(every_text(), 1, None, 2))


def saved_vocabulary(checkpointer: checkpoint.Checkpointer) -> Optional[Dict[str, Any]]:
  """What the newest checkpoint saved of its vocabulary (`vocab_record.of_tokenizer`), None
  when there is none or it does not read: the tokenizer then judges the vocabulary by its
  record alone, and `_check_vocabulary` or the restore reports a damaged checkpoint."""
  step = checkpointer.latest_step()
  try:
    saved = None if step is None else checkpointer.saved_fingerprint(step, checkpoint.VOCAB_ITEM)
  except Exception:  # pylint: disable=broad-except  (a damaged item: reported at restore)
    return None
  return saved if isinstance(saved, dict) else None


def _test_step_delay() -> float:
  """Seconds to sleep after each step: a test hook that slows one process of a pod run
  (`T2T_TEST_STEP_DELAY_S`), so tests can show its checkpoint decisions still agree."""
  return float(os.environ.get('T2T_TEST_STEP_DELAY_S', '0') or 0)


def resolve_run(config: ml_collections.ConfigDict, workdir: str,
                explicit=()) -> ml_collections.ConfigDict:
  """The canonical form (`resolution.resolve`) of a training run's config: once the workdir
  has a checkpoint, the files it names are provenance (`recorded`), and a `--config.model`
  file that has gone is loaded from the checkpoints' record (`remember_factory`), or from the
  record of the run a fine-tune starts from (`init_from`: it keeps its source's model)."""
  typed = config.get('model', '')
  checkpoint_choice.remember_factory(workdir, typed)
  recorded = checkpoint_choice.has_checkpoint(workdir)
  if config.get('init_from'):
    checkpoint_choice.remember_factory(config_lib.init_from_parts(config.init_from)[0], typed)
    if not recorded:
      config = adopt_parent_model(config, explicit)
  return resolution.resolve(config, explicit, recorded=recorded)


def adopt_parent_model(config: ml_collections.ConfigDict,
                       explicit=()) -> ml_collections.ConfigDict:
  """A fine-tune's model keys that the command line (`explicit`) does not type, taken from
  the checkpoint `init_from` names: a fine-tune keeps its source's model, so
  `--config.init_from=W` alone fine-tunes W's model (an imported one included) whatever model
  the config file describes (a warning names the values it set otherwise); a key typed
  otherwise than the parent's is left for `init_from.load` to refuse, naming it."""
  workdir, which = config_lib.init_from_parts(config.init_from)
  parent = checkpoint_choice.chosen_config(workdir, which)
  if parent is None:
    return config
  defaults = default_config.get_config()
  adopted = ml_collections.ConfigDict(config.to_dict())
  taken, overridden = [], []
  for key in config_lib.MODEL_KEYS:
    if key not in parent or key in explicit or parent[key] == config[key]:
      continue
    default = defaults[key]
    adopted[key] = (type(default)(parent[key]) if isinstance(default, (bool, int, float))
                    else parent[key])
    (taken if config[key] == default else overridden).append(f'{key}={adopted[key]!r}')
  if overridden:
    logging.warning('init_from %s: a fine-tune keeps the model of its source; the config\'s '
                    'own values give way to its: %s', config.init_from, ', '.join(overridden))
  if taken or overridden:
    logging.info('init_from %s: the model keys of its checkpoint: %s', config.init_from,
                 ', '.join(taken + overridden))
    if 'bucket_lengths' not in explicit and 'max_length' not in explicit:
      config_lib.fit_buckets(adopted)
  return adopted


def train(config: ml_collections.ConfigDict, workdir: str,
          resolved: bool = False) -> Dict[str, float]:
  """Trains until `config.num_train_steps`; returns the last logged metrics.

  Resumes from the workdir's latest checkpoint; SIGTERM/SIGINT stop after the current step
  with a checkpoint (see `preemption`); then the result has `stopped_at`. The paths `config`
  names (corpus folders, data_dir, a `--config.model` file) are stored absolute
  (`config.absolute_paths`), and a `--config.model` factory's module file is recorded by its
  sha256 (`variant.source_record`), so that every mode reading the run later reads the same
  files, or says that they changed.

  Resuming after that module was edited: a warning names the file, and training goes on with
  the edited factory as long as its parameters are the checkpoint's (a fix that keeps them is
  common while a variant is developed; the checkpoints saved from then on record the new
  sha256). Parameters that no longer match (a module renamed) stop the run in one line naming
  the missing and unexpected parameter paths.
  """
  if not resolved:  # `resolved`: `config` is `resolve_run`'s already, handed down as it is
    config = resolve_run(config, workdir)
  # The batch against this run's devices (a row per local device, per process), before any
  # data is prepared: config.validate knows no device count.
  pipeline.validate_config(config, rows_multiple=jax.local_device_count(),
                           process_count=jax.process_count())
  # Every split the run will read, before any work: a missing test split would otherwise
  # show only after training, at the final evaluation.
  split_check.check_splits(config, ['train_split', 'final_eval_split']
                       + (['eval_split'] if config.eval_every_steps else []))
  if not checkpoint_choice.has_checkpoint(workdir):  # once it has one, its parent is history
    init_from.check(config)  # a fine-tune's source run, before any work
  net = variant.from_config(config)  # a --config.model that cannot be used: before any work
  variant.check_later_methods(net, config.model)  # what decode and export will call, too
  optimizer = optim.make(config)  # likewise a --config.optimizer factory
  trackers.check_available(config)  # the writers' packages and factories
  is_chief = jax.process_index() == 0
  new = workdir_lib.new_state(workdir) if is_chief else None
  workdir = layout.of(workdir_lib.check_writable(workdir) if is_chief else workdir)
  lock = workdir_lib.WorkdirLock(workdir).acquire() if is_chief else None
  try:
    with preemption.PreemptionHandler() as handler:
      try:
        run = _Run(config, workdir, net, optimizer)
      except Exception:
        if lock is not None:
          lock.release()
          lock = None
        if new:  # refused after preparing data: the new workdir is left as it was found
          _leave_as_found(workdir, new)
        raise
      return run.loop(handler)
  finally:
    if lock is not None:
      lock.release()


def _leave_as_found(workdir: str, was: str) -> None:
  removed = workdir_lib.clear_refused(workdir, was)
  if removed:
    before = 'did not exist' if was == workdir_lib.MISSING else 'was empty'
    logging.warning('%s %s before this run, which stopped before its first step: what it had '
                    'prepared there is removed (%s)', workdir, before, ', '.join(removed))


class _Run:
  """One training run: what it is built from (`__init__`) and what each step does after it."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str,
               net: Optional[model.Transformer] = None, optimizer=None):
    """`net`: the model of `config` (`variant.from_config`), `optimizer`: its (optimizer,
    schedule) (`optim.make`); None: built here."""
    self.config, self.workdir = config, workdir
    self.is_chief = jax.process_index() == 0
    self.start_time = time.monotonic()
    self.goodput = goodput.Goodput(self.start_time)
    # Before anything is written or prepared: a mesh the model cannot be split over.
    self.mesh = meshes.make(config.mesh)
    net = variant.from_config(config) if net is None else net
    meshes.step_param_shardings(net, self.mesh)
    self.checkpointer = checkpoint.Checkpointer(
        workdir, config.keep_checkpoints,
        data_fingerprint=fingerprint.compute(config, corpora.default_data_dir(config, workdir)))
    self.checkpointer.check_compatible(config)  # config and data, before any expensive work
    self.policy = save_policy.SavePolicy(config.checkpoint_every_steps,
                                         config.checkpoint_every_minutes,
                                         check_every=config.log_every_steps)
    logging.info('mesh: %d devices over %d processes (%s)', self.mesh.size, jax.process_count(),
                 ', '.join(f'{a}:{n}' for a, n in self.mesh.shape.items()))
    self.data = Data(config, workdir, with_eval=config.eval_every_steps > 0,
                     trained=self.checkpointer.latest_step() is not None,
                     data_fingerprint=self.checkpointer.data_fingerprint,
                     checkpoint_vocabulary=saved_vocabulary(self.checkpointer))
    self.checkpointer.vocabulary = vocab_record.of_tokenizer(self.data.tokenizer)
    self.checkpointer.model_source = variant.source_record(config.model)
    optimizer, schedule = optim.make(config) if optimizer is None else optimizer
    warning = optim.advice(config)
    if warning and self.is_chief:
      logging.warning(warning)
    # Restored into the layout of this run (`abstract_like` keeps the shardings), whether
    # the checkpoint was written with the optimizer state sharded or replicated.
    self.state = self._restore(lambda **params: parallel.create_train_state(
        net, optimizer, config.seed, self.mesh,
        shard_optimizer_state=config.shard_optimizer_state, **params))
    self.step = int(jax.device_get(self.state.step))
    if self.step == 0 and self.is_chief:  # metrics of a run whose checkpoints are gone
      metrics.set_aside_lost_run(workdir)
    self.writer = metrics.MetricsWriter(workdir, enabled=self.is_chief, config=config,
                                        resuming=self.step > 0)
    self.evaluator = (dev_eval.DevEvaluator(config, net, self.mesh, self.data, self.writer,
                                            workdir, self.start_time)
                      if self.data.eval_batches is not None else None)
    self.best = best.for_run(workdir, config, self.checkpointer) if self.evaluator else None
    self.steps = steps.Steps(net, optimizer, self.mesh, config, layout.of(workdir).profile)
    self.watch = steps.NonfiniteWatch(config.max_consecutive_nonfinite)
    self.window = log_window.LogWindow(config.num_train_steps, schedule, self.start_time)
    self.last: Dict[str, float] = {}

  def _restore(self, create):
    """The state the run goes on from: its latest good checkpoint's, else a fresh one
    (`create(params=...)`: a fine-tune's, `init_from.start`)."""
    state = create()
    freezing.check_matches(state.params, self.config.trainable)
    if self.checkpointer.latest_step() is None:
      return init_from.start(self.config, state, create, self.checkpointer)
    resume_checks.check_parameters(self.checkpointer, state.params, self.config.model)
    state, data_state, start = self.checkpointer.restore_latest_good(
        checkpoint.abstract_like(state))
    resume_checks.check_vocabulary(self.checkpointer, start, self.data.tokenizer)
    # A fine-tune's start, carried on by every later checkpoint.
    self.checkpointer.init_record = self.checkpointer.saved_fingerprint(start,
                                                                        checkpoint.INIT_ITEM)
    change = variant.source_change(
        self.checkpointer.saved_fingerprint(start, checkpoint.MODEL_ITEM), self.config.model)
    if change:
      logging.warning('resuming checkpoint step %d of %s with --config.model=%s: %s; training '
                      'goes on with the edited factory (its parameters are the checkpoint\'s)',
                      start, self.checkpointer.directory, self.config.model, change)
    self.data.train.set_state(data_state)
    logging.info('resumed from step %d of %s', start, self.checkpointer.directory)
    return state

  def loop(self, handler: preemption.PreemptionHandler) -> Dict[str, float]:
    """Steps until the end or a stop request; returns the last metrics."""
    total, delay = self.config.num_train_steps, _test_step_delay()
    if best.stopped_before(self.workdir):
      total = self.step  # it stopped early: no more steps (best.stopped_before says why)
    try:
      self.goodput.first_step()
      if self.evaluator is not None and self.step == 0:
        self._evaluate()
      batches = self.goodput.timed(self.data.train)  # input wait
      while self.step < total:
        self.state, step_sums = self.steps(self.state, batches, self.step + 1)
        self.step += 1
        self.window.add(step_sums)
        self.watch.push(self.step, step_sums['nonfinite'])
        if delay:
          time.sleep(delay)
        self.checkpointer.check_background()  # a failed save stops the run here
        stopping = handler.stop_requested(self.step)
        final = stopping or self.step == total
        if self.step % self.config.log_every_steps == 0 or final:
          self._log()
        if (self.evaluator is not None and self.step % self.config.eval_every_steps == 0
            and not stopping):
          final = self._evaluate() or final  # early stopping ends the run as a finished one
          total = self.step if final else total
        if self.policy.should_save(self.step, final=final):
          self._save()
        if stopping:
          self._stop(handler)
          break
      self.watch.flush()
    finally:
      try:
        with self.goodput.phase('checkpoint'):
          self.checkpointer.close()  # waits for the last save: a failed one raises here
        self._report_goodput()
      finally:
        self.goodput.close()
        self.writer.close()
        self.data.train.close()
    logging.info('training done at step %d; compiled %d train-step shapes', self.step,
                 len(self.steps.shapes))
    return self.last

  def _log(self) -> None:
    self.watch.flush()
    m = self.window.close(self.step, self.steps.padded_tokens, self.steps.model_flops)
    m.update(self.data.train.take_shares())  # a mixture's: data/share/<entry name>
    m.update(self.goodput.split())
    self.steps.padded_tokens = self.steps.model_flops = 0
    if self.is_chief:
      logging.info(log_window.format_line(self.step, self.config.num_train_steps, m))
    self.writer.write(self.step, m)
    self.last.update(m)

  def _report_goodput(self) -> None:
    """The whole run's split of wall time (`goodput`), last checkpoint included: one line
    and one more record at the last step."""
    split = self.goodput.split()
    if self.is_chief:
      logging.info(goodput.format_split(split, time.monotonic() - self.start_time))
    self.writer.write(self.step, split)

  def _evaluate(self) -> bool:
    with self.goodput.phase('eval'):
      return self._evaluate_dev()

  def _evaluate_dev(self) -> bool:
    """Evaluates on dev the trained weights and, with `ema_decay` after step 0, their moving
    average; returns whether the run stops early (`best.BestKeeper`, which ranks the weights
    `best_weights` names)."""
    result = self.evaluator(self.step, self.state.params)
    self.last.update({f'eval_{k}': v for k, v in result.items()})
    ranked, params = result, self.state.params
    average = ema.moving_average(self.state.opt_state)
    if average is not None and self.step > 0:  # at step 0 it is the parameters themselves
      average = ema.as_parameters(average, self.state.params)
      ema_result = self.evaluator(self.step, average, weights='ema')
      self.last.update({f'eval_ema_{k}': v for k, v in ema_result.items()})
      if self.config.best_weights == 'ema':
        ranked, params = ema_result, average
    if self.best is None or not self.best.observe(self.step, ranked, params,
                                                  checkpoint.config_to_json(self.config)):
      return False
    self.best.write_stop(self.step)
    return True

  def _save(self) -> None:
    self.watch.flush()  # never checkpoint past a run of failures that should stop training
    with self.goodput.phase('checkpoint'):
      self.checkpointer.save(self.step, self.state, self.data.train.get_state(), self.config)
    self.policy.saved()

  def _stop(self, handler: preemption.PreemptionHandler) -> None:
    with self.goodput.phase('checkpoint'):
      self.checkpointer.wait()
    cause = handler.signal_name or 'a preemption notice (SIGTERM to one of the processes)'
    since = (f' in {time.monotonic() - handler.received_at:.1f} s'
             if handler.received_at is not None else '')
    logging.warning('stopped by %s at step %d: checkpoint written to %s/%d%s; rerun the same '
                    'command to resume', cause, self.step, self.checkpointer.directory,
                    self.step, since)
    self.last['stopped_at'] = self.step
