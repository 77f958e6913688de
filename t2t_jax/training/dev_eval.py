"""Evaluation during training: teacher-forced dev loss and, optionally, dev BLEU (§6.1), or for
a treebank dev F1 (EVALB, §6.3).

Every `eval_every_steps` the training loop calls a `DevEvaluator`: loss, perplexity and
accuracy over the dev batches (all devices, all processes), then beam search on the first
`eval_bleu_sentences` dev sentences scored with sacreBLEU. Decoding is split across
processes (`multihost.translate_all`), and within a process over its devices as the
Translator chooses (`translate.choose_parallelism`), on each process's local replicas of
the parameters, so it runs the same on one CPU, a multi-device mesh or a pod. Records go to
the metrics writer under `eval_<split>/` and the learning curves are redrawn.
"""

import time
from typing import Any, Dict, Optional

from absl import logging

from t2t_jax.inference import translate
from t2t_jax.runtime import multihost, parallel
from t2t_jax.inference.evaluate import decoded_scores, evaluate_batches


def _redraw_plots(workdir: str) -> None:
  """Learning curves in <workdir>/plots; a drawing problem never stops training."""
  try:
    from t2t_jax.training import plots
    plots.write_learning_curves(workdir)
  except Exception as e:  # noqa: BLE001 - plots are a convenience, the run goes on
    logging.warning('could not draw the learning curves: %s', e)


class DevEvaluator:
  """Dev metrics of the current parameters (see module doc).

  Args:
    config: the run config (eval_split, target_lang, label_smoothing, inference keys).
    model: the model (`variant.from_config(config)`), or its config for the paper's.
    mesh: the training mesh.
    data: `train.Data` (eval_batches, bleu_pairs, tokenizer).
    writer: `metrics.MetricsWriter`.
    workdir: where plots are drawn (process 0 only).
    run_start: `time.monotonic()` at the start of the run, for `elapsed_s`.
  """

  def __init__(self, config, model, mesh, data, writer, workdir: str, run_start: float):
    self.config, self.mesh, self.data = config, mesh, data
    self.writer, self.workdir, self.run_start = writer, workdir, run_start
    self.eval_step = parallel.make_eval_step(model, mesh,
                                             label_smoothing=config.label_smoothing)
    # Built from `config` as `model` was (`variant.from_config`): the same variant.
    self.translator: Optional[translate.Translator] = (
        translate.from_config(config, None, data.tokenizer) if data.bleu_pairs else None)

  def __call__(self, step: int, params: Any, weights: str = 'params') -> Dict[str, float]:
    """Evaluates `params` at `step`; logs, records and returns the metrics. `weights`:
    'params' (the trained weights, recorded under `eval_<split>/`) or 'ema' (the moving
    average of `ema_decay` in their place, under `eval_<split>_ema/`)."""
    config = self.config
    prefix, what = ((f'eval_{config.eval_split}', config.eval_split) if weights == 'params' else
                    (f'eval_{config.eval_split}_ema', f'{config.eval_split} (moving average)'))
    result = evaluate_batches(self.eval_step, params, self.data.eval_batches, self.mesh)
    if self.translator is not None and step > 0:  # untrained, it decodes to the length limit
      # An argument of the jitted decode: no recompilation when it changes. The Translator
      # places it on its devices once per eval, reusing the training mesh's local replicas.
      self.translator.params = params
      pairs = self.data.bleu_pairs
      scores = decoded_scores(
          config, pairs, multihost.translate_all(self.translator, [p['source'] for p in pairs]),
          self.data.tokenizer)
      kept = ('f1', 'precision', 'recall') if 'f1' in scores else ('bleu', 'tokenized_bleu')
      result.update({k: scores[k] for k in kept})
      logging.info('eval at step %d: %s %.2f on %d %s sentences', step, kept[0].upper(),
                   scores[kept[0]], len(pairs), what)
    logging.info('eval at step %d: %s loss %.4f nll %.4f perplexity %.2f accuracy %.3f', step,
                 what, result['loss'], result['nll'], result['perplexity'], result['accuracy'])
    result['elapsed_s'] = time.monotonic() - self.run_start
    self.writer.write(step, result, prefix=prefix)
    if multihost.is_writer():
      _redraw_plots(self.workdir)
    return result
