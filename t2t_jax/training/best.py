"""The best checkpoints by dev metric, and early stopping (fairseq's `--keep-best-checkpoints`,
`--patience`; t5x's SaveBestCheckpointer).

With `keep_best=K`, each periodic evaluation whose `best_metric` ('loss': the dev loss, lower
is better; 'bleu': the dev BLEU of `eval_bleu_sentences`, higher is better) is among the K best
so far writes the parameters it scored to `<workdir>/best/step_<step>/`, a params-only
checkpoint like an average (state/params, the config, the vocabulary and factory records) with
a `best` item recording the step and every dev metric of that evaluation. The K best are kept;
one pushed out is deleted, and only folders of that name under `best/` are ever deleted: the
last `keep_checkpoints` training checkpoints are the other policy's, and neither touches the
other's. `--checkpoint=best` names the best one in eval, decode, attention and export.

With `ema_decay`, every evaluation after step 0 scores the moving average of the weights too;
`best_weights='ema'` ranks those evaluations instead, keeps the average's parameters and
lets early stopping watch it (the record's `weights` says which were kept).

With `early_stop_patience=N`, the run stops once N evaluations in a row did not improve on the
best `best_metric` so far: it saves a training checkpoint, writes `best/early_stop.json` (the
step, the best step and value) and ends as a finished run does (average, final evaluation,
report). Rerunning the command finds that record and does not train further, saying why.
The evaluations are collective and equal on every process, so every process decides alike.
"""

import json
import os
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from t2t_jax.inference.checkpoint_choice import BEST_ITEM, best_checkpoints, best_dir, rank
from t2t_jax.runtime import checkpoint, multihost
from t2t_jax.storage import paths, textio

EARLY_STOP = 'early_stop.json'
_WEIGHTS = {'params': 'trained weights', 'ema': 'moving average of the weights'}


def early_stop_record(workdir: str) -> Optional[Dict[str, Any]]:
  """The record a run that stopped early left (`best/early_stop.json`), or None."""
  path = os.path.join(best_dir(workdir), EARLY_STOP)
  if not epath.Path(path).exists():
    return None
  try:
    record = json.loads(epath.Path(path).read_text(encoding='utf-8'))
    int(record['step']), float(record['best_value']), int(record['best_step'])
    return record
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    # It exists, so the run did stop early; only the numbers are lost.
    logging.warning('%s does not read (%s); the run it records stopped early all the same',
                    path, textio.one_line(e))
    return {'step': -1, 'best_step': -1, 'metric': '?', 'best_value': float('nan'),
            'patience': 0, 'unreadable': path}


def for_run(workdir: str, config: Any, checkpointer: Any) -> Optional['BestKeeper']:
  """The run's BestKeeper when it keeps best checkpoints or may stop early, else None; its
  checkpoints carry the `checkpointer`'s vocabulary, factory and data records."""
  if not config.keep_best and not config.early_stop_patience:
    return None
  setup = {checkpoint.VOCAB_ITEM: checkpointer.vocabulary,
           checkpoint.MODEL_ITEM: checkpointer.model_source,
           checkpoint.FINGERPRINT_ITEM: checkpointer.data_fingerprint,
           checkpoint.INIT_ITEM: checkpointer.init_record}
  return BestKeeper(workdir, config, setup)


def stopped_before(workdir: str) -> bool:
  """Whether an earlier run of `workdir` stopped early (`best/early_stop.json`); says so."""
  record = early_stop_record(workdir)
  if record is None:
    return False
  logging.warning('%s stopped early at step %d: dev %s did not improve on %.4f (step %d) in %d '
                  'evaluations; not training further (remove %s to train on)', workdir,
                  record['step'], record['metric'], record['best_value'], record['best_step'],
                  record['patience'], os.path.join(best_dir(workdir), EARLY_STOP))
  return True


class BestKeeper:
  """Keeps the best checkpoints and decides early stopping (module doc).

  Args:
    workdir: the run's folder.
    config: the run's canonical config (`keep_best`, `best_metric`, `early_stop_patience`,
      `eval_every_steps`).
    setup: the JSON items saved beside the parameters (vocabulary, factory source, data).
  """

  def __init__(self, workdir: str, config: Any, setup: Optional[Dict[str, Any]] = None):
    self.workdir, self.config, self.setup = workdir, config, setup or {}
    self.metric = config.best_metric
    self.history: List[Tuple[int, float]] = []  # (step, value) of this process's evaluations

  def _value(self, result: Dict[str, float]) -> Optional[float]:
    """The evaluation's `best_metric`: 'bleu' is the decoded score (a treebank's F1); None
    when the evaluation has none (dev BLEU is not decoded at step 0)."""
    value = result.get(self.metric, result.get('f1') if self.metric == 'bleu' else None)
    return None if value is None else float(value)

  def observe(self, step: int, result: Dict[str, float], params: Any,
              config_json: Dict[str, Any]) -> bool:
    """Records the evaluation `result` of `params` at `step`; returns whether to stop early."""
    value = self._value(result)
    if value is None or step == 0:  # nothing to rank, or the untrained model
      return False
    if self.config.keep_best and np.isfinite(value):
      self._keep(step, value, result, params, config_json)
    self.history.append((step, value))
    return self._patience_spent(step)

  def best(self) -> Optional[Tuple[int, float]]:
    """(step, value) of the best evaluation so far: of the kept checkpoints and this run's
    evaluations together (a resumed run's earlier ones count through what was kept)."""
    candidates = [(s, float(r['value'])) for s, r, _ in best_checkpoints(self.workdir)
                  if r.get('metric') == self.metric]
    candidates += [(s, v) for s, v in self.history if np.isfinite(v)]
    if not candidates:
      return None
    return min(candidates, key=lambda c: rank(self.metric, c[1], c[0]))

  def _patience_spent(self, step: int) -> bool:
    patience = self.config.early_stop_patience
    best = self.best()
    if not patience or best is None:
      return False
    evaluations_since = (step - best[0]) // self.config.eval_every_steps
    return evaluations_since >= patience

  def stop_record(self, step: int) -> Dict[str, Any]:
    best_step, value = self.best()
    return {'step': step, 'best_step': best_step, 'metric': self.metric, 'best_value': value,
            'weights': self.config.best_weights, 'patience': self.config.early_stop_patience}

  def write_stop(self, step: int) -> Dict[str, Any]:
    """Writes `best/early_stop.json` (process 0) and returns its record."""
    record = self.stop_record(step)
    if multihost.is_writer():
      paths.makedirs(best_dir(self.workdir))
      textio.write_bytes_atomic(os.path.join(best_dir(self.workdir), EARLY_STOP),
                                (json.dumps(record, indent=2) + '\n').encode(), overwrite=True)
    multihost.barrier('t2t_jax_early_stop_written')
    return record

  def _keep(self, step: int, value: float, result: Dict[str, float], params: Any,
            config_json: Dict[str, Any]) -> None:
    current = [k for k in best_checkpoints(self.workdir) if k[1].get('metric') == self.metric]
    ranked = sorted([(s, float(r['value'])) for s, r, _ in current] + [(step, value)],
                    key=lambda c: rank(self.metric, c[1], c[0]))
    survivors = {s for s, _ in ranked[:self.config.keep_best]}
    if step in survivors and step not in {s for s, _, _ in current}:
      self._write(step, value, result, params, config_json)
    if multihost.is_writer():
      for s, _, path in current:
        if s not in survivors:
          epath.Path(path).rmtree()
          logging.info('best checkpoints: step %d left the %d best; removed %s', s,
                       self.config.keep_best, path)
    multihost.barrier('t2t_jax_best_kept')

  def _write(self, step: int, value: float, result: Dict[str, float], params: Any,
             config_json: Dict[str, Any]) -> None:
    target = os.path.join(best_dir(self.workdir), f'step_{step}')
    if epath.Path(target).exists():
      return  # written before a restart; the same parameters
    host = jax.tree_util.tree_map(
        lambda x: np.asarray(x.addressable_data(0) if isinstance(x, jax.Array) else x), params)
    record = {'step': step, 'metric': self.metric, 'value': value,
              'weights': self.config.best_weights,
              'metrics': {k: float(v) for k, v in result.items()}}
    items = {name: ocp.args.JsonSave(v) for name, v in self.setup.items() if v}
    paths.makedirs(best_dir(self.workdir))
    items[BEST_ITEM] = ocp.args.JsonSave(record)
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
      checkpointer.save(target, args=ocp.args.Composite(
          state=ocp.args.PyTreeSave({'params': host}), config=ocp.args.JsonSave(config_json),
          **items))
    logging.info('best checkpoints: dev %s %.4f of the %s at step %d kept in %s', self.metric,
                 value, _WEIGHTS[self.config.best_weights], step, target)
