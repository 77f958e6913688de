"""Evaluation during training: teacher-forced dev loss and, optionally, dev BLEU (§6.1), or for
a treebank dev F1 (EVALB, §6.3).

Every `eval_every_steps` the training loop calls a `DevEvaluator`: loss, perplexity and
accuracy over the dev batches (all devices, all processes), then beam search on the first
`eval_bleu_sentences` dev sentences scored with sacreBLEU. Decoding is split across
processes (`multihost.translate_all`), and within a process over its devices as the
Translator chooses (`translate.choose_parallelism`), on each process's local replicas of
the parameters, so it runs the same on one CPU, a multi-device mesh or a pod. Records go to
the metrics writer under `eval_<split>/` and the learning curves are redrawn.

A mixture of several language pairs (`--config.corpora`) is evaluated on each pair's dev split
too (its primary entry's: `other_pairs`), with that pair's target-language token, under
`eval_<split>_<src>-<tgt>/`; the run's own pair (source_lang-target_lang) stays under
`eval_<split>/`, the one keep_best and early stopping rank.
"""

import dataclasses
import time
from typing import Any, Dict, List, Optional

from absl import logging
import ml_collections

from t2t_jax.data import corpora, language_tokens, mixture, pipeline
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


@dataclasses.dataclass
class PairDev:
  """The dev set of one more language pair of a mixture: `config` is the run's with that
  pair's languages, `tokenizer` gives its sources their target-language token."""
  pair: str
  config: ml_collections.ConfigDict
  eval_batches: List[Any]
  bleu_pairs: List[Dict[str, str]]
  tokenizer: Any


def other_pairs(config: ml_collections.ConfigDict, data_dir: str, tokenizer: Any, rows: int,
                process_index: int, process_count: int, per_host: bool) -> List[PairDev]:
  """The dev sets of the mixture's language pairs other than the run's, in entry order
  (`tokenizer`: the plain vocabulary, `language_tokens.plain`); a pair whose primary entry has
  no such split is left out, and logged."""
  out, own = [], f'{config.source_lang}-{config.target_lang}'
  for pair in dict.fromkeys(e.pair for e in mixture.entries(config)):
    if pair == own:
      continue
    other = ml_collections.ConfigDict(config.to_dict())
    other.source_lang, other.target_lang = pair.split('-')
    try:
      dev = corpora.load_split(other, config.eval_split, data_dir, process_index=process_index,
                               per_host=per_host)
    except corpora.MissingDataError as e:
      logging.info('%s is not evaluated during training: %s', pair, e)
      continue
    tok = language_tokens.wrap(tokenizer, other)
    batches = pipeline.make_eval_batches(other, dev, tok, rows_multiple=rows,
                                         process_index=process_index, process_count=process_count)
    n = min(config.eval_bleu_sentences, len(dev))
    out.append(PairDev(pair, other, batches[:config.eval_batches or None],
                       [dev[i] for i in range(n)], tok))
  return out


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
    self.pair_translators = [translate.from_config(p.config, None, p.tokenizer)
                             if p.bleu_pairs else None for p in data.other_pairs]

  def __call__(self, step: int, params: Any, weights: str = 'params') -> Dict[str, float]:
    """Evaluates `params` at `step`; logs, records and returns the metrics (of the run's pair;
    a mixture's other pairs are recorded beside). `weights`: 'params' (the trained weights,
    recorded under `eval_<split>/`) or 'ema' (the moving average of `ema_decay` in their
    place, under `eval_<split>_ema/`)."""
    split, ema = self.config.eval_split, ('_ema' if weights != 'params' else '')
    what = split + (' (moving average)' if ema else '')
    result = self._evaluate(step, params, self.config, self.data.eval_batches,
                            self.data.bleu_pairs, self.translator, self.data.tokenizer, what)
    result['elapsed_s'] = time.monotonic() - self.run_start
    self.writer.write(step, result, prefix=f'eval_{split}{ema}')
    for pair, translator in zip(self.data.other_pairs, self.pair_translators):
      other = self._evaluate(step, params, pair.config, pair.eval_batches, pair.bleu_pairs,
                             translator, pair.tokenizer, f'{what} {pair.pair}')
      self.writer.write(step, other, prefix=f'eval_{split}{ema}_{pair.pair}')
    if multihost.is_writer():
      _redraw_plots(self.workdir)
    return result

  def _evaluate(self, step, params, config, batches, pairs, translator, tokenizer,
                what: str) -> Dict[str, float]:
    """Dev loss of `batches` and, past step 0, BLEU (F1) of `translator` on `pairs`."""
    result = evaluate_batches(self.eval_step, params, batches, self.mesh)
    if translator is not None and step > 0:  # untrained, it decodes to the length limit
      # An argument of the jitted decode: no recompilation when it changes. The Translator
      # places it on its devices once per eval, reusing the training mesh's local replicas.
      translator.params = params
      scores = decoded_scores(
          config, pairs, multihost.translate_all(translator, [p['source'] for p in pairs]),
          tokenizer)
      kept = ('f1', 'precision', 'recall') if 'f1' in scores else ('bleu', 'tokenized_bleu')
      result.update({k: scores[k] for k in kept})
      logging.info('eval at step %d: %s %.2f on %d %s sentences', step, kept[0].upper(),
                   scores[kept[0]], len(pairs), what)
    logging.info('eval at step %d: %s loss %.4f nll %.4f perplexity %.2f accuracy %.3f', step,
                 what, result['loss'], result['nll'], result['perplexity'], result['accuracy'])
    return result
