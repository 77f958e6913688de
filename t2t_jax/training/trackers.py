"""The writers of `--config.writers` beyond the workdir's own files: Weights & Biases, MLflow,
and a writer of one's own ('package.module:factory').

Every writer has the method names of CLU's `metric_writers.MetricWriter` that a training run
calls: `write_scalars(step, scalars)`, `write_hparams(hparams)`, `flush()`, `close()`. So a CLU
writer plugs in as it is (`clu.metric_writers` itself is not a dependency: importing it
imports its TensorFlow summary writer), and one's own is a class of four methods.

The runs these services hold are continued by a resume: their ids are kept in
`<workdir>/tracking/runs.json` (`layout.TRACKING`), and W&B's local files and MLflow's default
file store live in `<workdir>/tracking/`, so a moved workdir takes them along. A service that
fails while training (a server gone) is warned about once and dropped; the run goes on, and
metrics.jsonl keeps everything.
"""

import importlib
import inspect
import json
import os
import re
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional

from absl import logging

from t2t_jax.choices import ConfigError, parse_writers
from t2t_jax.storage import layout, paths

INSTALL = 'pip install -r requirements-tracking.txt'
EXPERIMENT = 't2t_jax'  # MLflow's experiment and W&B's project unless wandb_project names one
_MLFLOW_PARAM_CHARS = 6000  # MLflow's limit on a parameter's value
_MLFLOW_NAME = re.compile(r'[^\w\-. :/]')  # what MLflow refuses in a metric or param name


def _import(module: str, writer: str):
  try:
    return importlib.import_module(module)
  except ImportError as e:
    raise ConfigError(f"config key 'writers': {writer!r} needs the {module} package, which "
                      f'does not import here ({e}); {INSTALL}') from None


class RunIds:
  """`tracking/runs.json`: {writer: {id and where}} of the runs a resume continues."""

  def __init__(self, workdir, resuming: bool):
    self.path = layout.of(workdir).tracking_runs
    self.ids: Dict[str, Dict[str, str]] = {}
    try:
      self.ids = json.loads(paths.read_bytes(self.path))
      if not isinstance(self.ids, dict) or not all(isinstance(v, dict) for v in self.ids.values()):
        raise ValueError('not an object of objects')
    except (OSError, ValueError) as e:
      self.ids = {}
      if resuming:  # a first run has none; a resume that lost them starts new runs
        logging.warning('%s does not read (%s): the tracking services (W&B, MLflow) start new '
                        'runs for this resume; the earlier ones stay in their stores', self.path,
                        'missing' if isinstance(e, FileNotFoundError) else e)

  def get(self, writer: str) -> Dict[str, str]:
    return self.ids.get(writer, {})

  def put(self, writer: str, record: Dict[str, str]) -> None:
    if self.ids.get(writer) != record:
      self.ids[writer] = record
      paths.write_atomic(self.path, json.dumps(self.ids, indent=1).encode(), overwrite=True)


class WandbWriter:
  """A W&B run: the resolved config as its config, every scalar as its history at `step`.

  Its files go in `<workdir>/tracking/wandb/`; `WANDB_MODE=offline` keeps it there only
  (`wandb sync` uploads it later). A resume continues the recorded run id (`resume='allow'`);
  steps a resumed run repeats (those after its last checkpoint) W&B drops with a warning.
  """

  def __init__(self, workdir, config, ids: RunIds):
    wandb = _import('wandb', 'wandb')
    wd = layout.of(workdir)
    record = ids.get('wandb')
    run_id = record.get('id') or uuid.uuid4().hex[:12]  # W&B's own ids: [a-z0-9]
    os.makedirs(wd.tracking, exist_ok=True)
    self.run = wandb.init(
        project=config.wandb_project or EXPERIMENT, entity=config.wandb_entity or None,
        dir=wd.tracking, id=run_id, resume='allow', name=os.path.basename(wd.root),
        config=config.to_dict(), settings=wandb.Settings(console='off'))
    ids.put('wandb', {'id': run_id})

  def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
    self.run.log(dict(scalars), step=step)

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    self.run.config.update(dict(hparams), allow_val_change=True)

  def flush(self) -> None:
    pass  # wandb's service process writes as it receives

  def close(self) -> None:
    self.run.finish()


class MlflowWriter:
  """An MLflow run in experiment 't2t_jax': the resolved config as its parameters, every
  scalar a metric at `step`. `mlflow_tracking_uri` '' is a file store in
  `<workdir>/tracking/mlruns` (MLflow keeps that backend in maintenance mode behind
  MLFLOW_ALLOW_FILE_STORE, set here for it; `mlflow ui --backend-store-uri` reads it)."""

  def __init__(self, workdir, config, ids: RunIds):
    _import('mlflow', 'mlflow')
    from mlflow.tracking import MlflowClient  # pylint: disable=import-outside-toplevel
    wd = layout.of(workdir)
    uri = config.mlflow_tracking_uri
    if not uri:
      if not paths.is_local(wd.root):
        raise ConfigError(f"config key 'mlflow_tracking_uri': '' keeps MLflow's file store in "
                          f'the workdir, which {wd.root} (not local) cannot hold; name a '
                          'tracking server or database URI')
      os.environ.setdefault('MLFLOW_ALLOW_FILE_STORE', 'true')
      uri = 'file://' + os.path.join(wd.tracking, 'mlruns')
    self.client = MlflowClient(tracking_uri=uri)
    experiment = self.client.get_experiment_by_name(EXPERIMENT)
    experiment_id = (experiment.experiment_id if experiment is not None
                     else self.client.create_experiment(EXPERIMENT))
    self.run_id, self.params = self._open(ids.get('mlflow').get('run_id'), experiment_id,
                                          os.path.basename(wd.root))
    ids.put('mlflow', {'run_id': self.run_id, 'tracking_uri': config.mlflow_tracking_uri})

  def _open(self, run_id: Optional[str], experiment_id: str, name: str):
    """(run id, its logged parameters): the recorded run, RUNNING again, or a new one."""
    if run_id:
      try:
        run = self.client.get_run(run_id)
        self.client.update_run(run_id, status='RUNNING')
        return run_id, dict(run.data.params)
      except Exception as e:  # noqa: BLE001  a store that lost it, or another store
        logging.warning('MLflow run %s recorded in the workdir\'s tracking/runs.json is not in '
                        'this tracking store (%s): a new run starts', run_id,
                        str(e).split('\n')[0][:200])
    return self.client.create_run(experiment_id, run_name=name).info.run_id, {}

  def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
    from mlflow.entities import Metric  # pylint: disable=import-outside-toplevel
    now = int(time.time() * 1000)
    metrics = [Metric(_MLFLOW_NAME.sub('_', k), float(v), now, step) for k, v in scalars.items()]
    for start in range(0, len(metrics), 1000):  # MLflow's batch limit
      self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    """Parameters are immutable in MLflow: a resume logs the keys it had not, and a changed
    value (e.g. num_train_steps raised) as tag `config_changed/<key>`."""
    from mlflow.entities import Param, RunTag  # pylint: disable=import-outside-toplevel
    new, changed = [], []
    for key, value in hparams.items():
      key, value = _MLFLOW_NAME.sub('_', key), str(value)[:_MLFLOW_PARAM_CHARS]
      if key not in self.params:
        new.append(Param(key, value))
      elif self.params[key] != value:
        changed.append(RunTag(f'config_changed/{key}', value))
      self.params[key] = self.params.get(key, value)
    for start in range(0, len(new), 100):  # MLflow's limit of parameters per batch
      self.client.log_batch(self.run_id, params=new[start:start + 100])
    if changed:
      self.client.log_batch(self.run_id, tags=changed)

  def flush(self) -> None:
    pass  # every log_batch is written when it returns

  def close(self) -> None:
    self.client.set_terminated(self.run_id, 'FINISHED')


def custom(entry: str, workdir, config):
  """A writer of one's own: `entry` 'package.module:factory', called with those of the
  keywords `workdir` (str) and `config` (the resolved run config) it takes."""
  factory = _factory(entry)
  try:
    accepted = inspect.signature(factory).parameters
  except (TypeError, ValueError):
    accepted = {}
  given = {'workdir': str(layout.of(workdir).root), 'config': config}
  writer = factory(**{k: v for k, v in given.items() if k in accepted})
  if not callable(getattr(writer, 'write_scalars', None)):
    raise ConfigError(f"config key 'writers': {entry!r} made a {type(writer).__name__}, which "
                      'has no write_scalars(step, scalars) (CLU\'s MetricWriter interface)')
  return writer


def check_available(config) -> None:
  """Before any work: each writer `config.writers` names imports (its package, or a writer
  of one's own's module and factory); ConfigError in one line with what to do otherwise."""
  for entry in parse_writers(config.writers):
    if entry in ('wandb', 'mlflow'):
      _import(entry, entry)
    elif ':' in entry:
      _factory(entry)


def _factory(entry: str):
  module, name = entry.split(':')
  try:
    return getattr(importlib.import_module(module), name)
  except (ImportError, AttributeError) as e:
    raise ConfigError(f"config key 'writers': {entry!r} does not import ({type(e).__name__}: "
                      f'{e}); expected package.module:factory on the Python path') from None


def open_writers(workdir, config, resuming: bool) -> List[Any]:
  """The writers `config.writers` names besides jsonl and tensorboard, in its order."""
  entries = [e for e in parse_writers(config.writers) if e not in ('jsonl', 'tensorboard')]
  if not entries:
    return []
  ids, opened = RunIds(workdir, resuming), []
  made = {'wandb': WandbWriter, 'mlflow': MlflowWriter}
  for entry in entries:
    try:
      opened.append(made[entry](workdir, config, ids) if entry in made
                    else custom(entry, workdir, config))
    except ConfigError:
      raise
    except Exception as e:  # noqa: BLE001  a service down or its store damaged: train on
      logging.warning('metrics writer %s could not start (%s: %s; its files: %s): the run goes '
                      'on without it, metrics.jsonl keeps every metric', entry,
                      type(e).__name__, str(e).split('\n')[0][:300], layout.of(workdir).tracking)
  return opened
