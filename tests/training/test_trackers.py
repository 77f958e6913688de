"""`--config.writers` (training/trackers.py, issue 63, 1): a tiny run writes every metric of
metrics.jsonl to W&B (offline), MLflow (its file store in the workdir) and a writer of one's
own, and a resume continues the same runs. W&B's run is read back with wandb's own protobuf
schema (its transaction log), MLflow's with MLflow's own client: the outside's code, offline."""

import glob
import json
import os
import shutil
import struct
import sys

import pytest

from conftest import ROOT, TINY, read_metrics, run_main
from t2t_jax import config as config_lib
from t2t_jax.choices import ConfigError, parse_writers
from t2t_jax.configs import default as default_config
from t2t_jax.runtime import resolution
from t2t_jax.training import metrics, trackers

wandb_pb = pytest.importorskip('wandb.proto.wandb_internal_pb2')
pytest.importorskip('mlflow')
from mlflow.tracking import MlflowClient  # noqa: E402

ALL = '--config.writers=jsonl,tensorboard,wandb,mlflow,examples.writers:CsvWriter'
OFFLINE = dict(os.environ, WANDB_MODE='offline', WANDB_SILENT='true')


def wandb_records(path):
  """The records of a W&B transaction log (`run-<id>.wandb`): LevelDB's log format (32 KiB
  blocks of chunks: crc32, length, type), each record one of wandb's protobuf `Record`s."""
  data = open(path, 'rb').read()
  assert data[:4] == b':W&B', path
  pos, parts, out = 7, b'', []
  while pos + 7 <= len(data):
    left = 32768 - pos % 32768
    if left < 7:  # a block's zero trailer
      pos += left
      continue
    _, length, kind = struct.unpack('<IHB', data[pos:pos + 7])
    parts += data[pos + 7:pos + 7 + length]
    pos += 7 + length
    if kind in (1, 4):  # FULL, LAST
      record = wandb_pb.Record()
      record.ParseFromString(parts)
      out.append(record)
      parts = b''
  return out


def wandb_history(workdir):
  """{run id: {step: {key: value}}} over every W&B run folder of the workdir."""
  runs = {}
  for path in sorted(glob.glob(os.path.join(workdir, 'tracking', 'wandb', '*', 'run-*.wandb'))):
    for record in wandb_records(path):
      kind = record.WhichOneof('record_type')
      if kind == 'run':
        history = runs.setdefault(record.run.run_id, {})
        config = {i.key: json.loads(i.value_json) for i in record.run.config.update}
      elif kind == 'history':
        items = {'/'.join(i.nested_key) or i.key: json.loads(i.value_json)
                 for i in record.history.item}
        history.setdefault(record.history.step.num, {}).update(items)
  return runs, config


def _train(workdir, corpus, steps):
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY, ALL,
                    f'--config.num_train_steps={steps}', '--config.eval_every_steps=0',
                    env=OFFLINE)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@pytest.mark.slow
def test_a_run_and_its_resume_reach_every_writer_as_metrics_jsonl(corpus, tmp_path):
  first = str(tmp_path / 'run')
  _train(first, corpus, 10)
  ids = json.load(open(os.path.join(first, 'tracking', 'runs.json')))
  workdir = str(tmp_path / 'moved')  # the workdir is self-contained: its tracking runs move too
  shutil.move(first, workdir)
  _train(workdir, corpus, 20)  # resumes from step 10
  assert json.load(open(os.path.join(workdir, 'tracking', 'runs.json'))) == ids
  logged = {r['step']: r for r in read_metrics(workdir) if 'loss' in r}
  assert sorted(logged) == [10, 20] and 0 < logged[20]['goodput'] <= 1

  # W&B: one run id across both processes (two offline run folders), every scalar at its step.
  runs, config = wandb_history(workdir)
  assert list(runs) == [ids['wandb']['id']]
  assert len(glob.glob(os.path.join(workdir, 'tracking', 'wandb', 'offline-run-*'))) == 2
  merged = {}  # W&B keeps a step's last value: the run's final goodput record at step 20
  for record in read_metrics(workdir):
    merged.setdefault(record['step'], {}).update(record)
  for step, record in merged.items():
    for key in ('loss', 'learning_rate', 'tokens_per_s', 'mfu', 'goodput'):
      assert runs[ids['wandb']['id']][step][key] == pytest.approx(record[key], rel=1e-6), key
  assert config['d_model'] == 32 and config['writers'] == ALL.split('=')[1]

  # MLflow: the same run, the resolved config as parameters, the loss history of both parts.
  os.environ.setdefault('MLFLOW_ALLOW_FILE_STORE', 'true')
  client = MlflowClient(tracking_uri='file://' + os.path.join(workdir, 'tracking', 'mlruns'))
  run = client.get_run(ids['mlflow']['run_id'])
  assert run.info.status == 'FINISHED' and run.data.params['d_model'] == '32'
  history = client.get_metric_history(run.info.run_id, 'loss')
  assert [(m.step, m.value) for m in history] == [
      (s, pytest.approx(logged[s]['loss'], rel=1e-6)) for s in (10, 20)]

  # One's own writer (examples/writers.py): the same scalars, as CSV rows.
  rows = open(os.path.join(workdir, 'metrics.csv')).read().splitlines()
  assert f'20,loss,{logged[20]["loss"]!r}' in rows


def test_writers_refused_in_one_line_before_any_work(corpus, tmp_path, monkeypatch):
  for value, expected in (('jsonl,csv', "'csv' in 'jsonl,csv'; expected a comma list"),
                          ('tensorboard,wandb', "lacks 'jsonl'"),
                          ('jsonl,wandb,wandb', "'wandb' given twice")):
    with pytest.raises(ConfigError, match="^config key 'writers': .*" + expected[:20]):
      parse_writers(value)
  config = default_config.get_config()
  config.writers = ' jsonl , wandb'
  assert resolution.resolve(config).writers == 'jsonl,wandb'  # as the checkpoint records it
  config.update(writers='jsonl', wandb_project='p')
  with pytest.raises(ConfigError, match="wandb_project.*only writers with 'wandb' write to W&B"):
    resolution.resolve(config, explicit=['wandb_project'])
  config.update(writers='jsonl,wandb', wandb_project='')
  monkeypatch.setitem(sys.modules, 'wandb', None)  # not installed
  with pytest.raises(ConfigError, match=r"'wandb' needs the wandb package.*pip install -r "
                     r'requirements-tracking.txt$'):
    trackers.check_available(config)
  workdir = tmp_path / 'refused'
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY,
                    '--config.writers=jsonl,no_such_module:Writer')
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith(
      "error: config key 'writers': 'no_such_module:Writer' does not import (ModuleNotFoundError")
  assert not workdir.exists()  # nothing prepared


class _Failing:
  def write_scalars(self, step, scalars):
    raise ConnectionError('server gone')


class _Recording:
  instances = []

  def __init__(self, workdir, config):
    self.workdir, self.config, self.calls = workdir, config, []
    _Recording.instances.append(self)

  def write_scalars(self, step, scalars):
    self.calls.append(('scalars', step, dict(scalars)))

  def write_hparams(self, hparams):
    self.calls.append(('hparams', hparams['d_model']))

  def close(self):
    self.calls.append(('close',))


def test_a_failing_writer_is_dropped_with_one_warning_and_process_0_alone_writes(
    tmp_path, caplog):
  config = config_lib.validate(default_config.get_config())
  config.writers = f'jsonl,{__name__}:_Failing,{__name__}:_Recording'
  writer = metrics.MetricsWriter(str(tmp_path), config=config)
  writer.write(1, {'loss': 2.5})
  writer.write(2, {'loss': float('nan')}, prefix='eval_dev')
  writer.close()
  [recording] = _Recording.instances
  assert recording.workdir == str(tmp_path) and recording.calls[0] == ('hparams', 512)
  assert recording.calls[1:] == [('scalars', 1, {'loss': 2.5}), ('scalars', 2, {
      'eval_dev/loss': pytest.approx(float('nan'), nan_ok=True)}), ('close',)]
  warnings = [r.getMessage() for r in caplog.records if 'metrics writer' in r.getMessage()]
  assert len(warnings) == 1 and 'ConnectionError: server gone' in warnings[0]
  assert [json.loads(line)['step'] for line in open(tmp_path / 'metrics.jsonl')] == [1, 2]
  _Recording.instances.clear()
  metrics.MetricsWriter(str(tmp_path / 'other'), enabled=False, config=config).close()
  assert not _Recording.instances and not (tmp_path / 'other').exists()


def test_mlflow_on_a_remote_workdir_needs_a_tracking_uri():
  config = default_config.get_config()
  config.writers = 'jsonl,mlflow'
  with pytest.raises(ConfigError, match=r"^config key 'mlflow_tracking_uri': '' keeps MLflow's "
                     r'file store in the workdir, which gs://b/run \(not local\)'):
    trackers.MlflowWriter('gs://b/run', config, trackers.RunIds(ROOT + '/nonexistent', False))
