"""metrics.jsonl and TensorBoard events of `metrics.MetricsWriter`."""

import json
import logging
import os

from t2t_jax.training import metrics, plots


def test_a_resumed_run_drops_a_torn_last_record_and_writes_whole_lines(tmp_path, caplog):
  path = tmp_path / 'metrics.jsonl'
  # What a run killed while writing its record at step 20 leaves.
  path.write_text('{"step": 10, "loss": 5.0, "elapsed_s": 1.0}\n{"step": 20, "lo')
  with caplog.at_level(logging.WARNING):
    writer = metrics.MetricsWriter(str(tmp_path))
  writer.write(20, {'loss': 4.0, 'elapsed_s': 2.0})
  writer.close()
  assert [json.loads(line) for line in path.read_text().splitlines()] == [
      {'step': 10, 'loss': 5.0, 'elapsed_s': 1.0}, {'step': 20, 'loss': 4.0, 'elapsed_s': 2.0}]
  [warning] = [r.getMessage() for r in caplog.records if 'torn' in r.getMessage()]
  assert warning == (f'{path}: dropped a torn last line (a run killed while writing it): '
                     '{"step": 20, "lo')
  assert plots.load_curves(str(path)).train_steps.tolist() == [10, 20]


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
  path = tmp_path / 'metrics.jsonl'
  path.write_text('{"step": 10, "loss": 5.0}')
  writer = metrics.MetricsWriter(str(tmp_path))
  writer.write(20, {'loss': 4.0})
  writer.close()
  assert path.read_text() == '{"step": 10, "loss": 5.0}\n{"step": 20, "loss": 4.0}\n'
  assert sorted(os.listdir(tmp_path)) == ['metrics.jsonl', 'tensorboard']
