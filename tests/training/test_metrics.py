"""metrics.jsonl and TensorBoard events of `metrics.MetricsWriter`."""

import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
from etils import epath

from conftest import TINY, read_metrics, run_main
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


# What the workdir held: a run logged 0 (its step-0 eval), 200, 300, then its
# checkpoints were deleted.
LOST_RUN = [{'step': 0, 'eval_dev/loss': 9.0, 'eval_dev/elapsed_s': 1.0},
            {'step': 200, 'loss': 4.0, 'elapsed_s': 200.0},
            {'step': 300, 'loss': 3.0, 'elapsed_s': 300.0}]


def _write(path, records):
  path.write_text(''.join(json.dumps(r) + '\n' for r in records))


def test_a_run_from_step_0_sets_aside_the_metrics_of_a_run_whose_checkpoints_are_gone(
    tmp_path, caplog):
  path = tmp_path / 'metrics.jsonl'
  _write(path, LOST_RUN)
  old = path.read_bytes()
  (tmp_path / 'metrics.old-1.jsonl').write_text('an earlier one, kept\n')
  with caplog.at_level(logging.WARNING):
    moved = metrics.set_aside_lost_run(str(tmp_path))
  assert moved == str(tmp_path / 'metrics.old-2.jsonl')  # the first free number
  assert (tmp_path / 'metrics.old-2.jsonl').read_bytes() == old and not path.exists()
  assert (tmp_path / 'metrics.old-1.jsonl').read_text() == 'an earlier one, kept\n'
  assert [r.getMessage() for r in caplog.records] == [
      f'{path} holds steps up to 300, but training starts again at step 0 (no checkpoint in '
      f'{tmp_path}/checkpoints: deleted, or that run stopped before its first one): moved it '
      f'to {moved} so that metrics.jsonl and the plots show this run only']
  writer = metrics.MetricsWriter(str(tmp_path))  # the new run
  writer.write(0, {'loss': 8.0, 'elapsed_s': 1.0}, prefix='eval_dev')
  writer.write(20, {'loss': 5.0, 'elapsed_s': 20.0})
  writer.close()
  curves = plots.load_curves(str(path))
  assert curves.train_steps.tolist() == [20] and curves.eval_steps.tolist() == [0]
  assert curves.train_wall.tolist() == [20.0]
  # Only the step-0 eval of a run stopped before its first step: the new one replaces it.
  _write(path, LOST_RUN[:1])
  assert metrics.set_aside_lost_run(str(tmp_path)) is None and path.read_bytes()
  path.unlink()
  assert metrics.set_aside_lost_run(str(tmp_path)) is None


@pytest.mark.slow
def test_training_again_after_the_checkpoints_were_deleted_plots_the_new_run_only(
    tiny_workdir, corpus, tmp_path):
  root = tmp_path / 'run'
  shutil.copytree(tiny_workdir, root)
  old = (root / 'metrics.jsonl').read_bytes()
  shutil.rmtree(root / 'checkpoints')
  result = run_main(f'--workdir={root}', f'--config.local_corpus_dir={corpus}', *TINY,
                    '--config.num_train_steps=20', '--config.eval_every_steps=0')
  assert result.returncode == 0, result.stderr[-3000:]
  [warning] = [line for line in result.stderr.splitlines() if 'metrics.old-' in line]
  assert warning.endswith(f'{root}/metrics.jsonl holds steps up to 10, but training starts '
                          f'again at step 0 (no checkpoint in {root}/checkpoints: deleted, or '
                          f'that run stopped before its first one): moved it to '
                          f'{root}/metrics.old-1.jsonl so that metrics.jsonl and the plots '
                          'show this run only'), warning
  assert (root / 'metrics.old-1.jsonl').read_bytes() == old  # kept as it was
  assert [r['step'] for r in read_metrics(root) if 'loss' in r] == [10, 20]  # the new run alone
  plots.write_learning_curves(str(root))  # what --mode=plot and the end of training draw
  assert plots.load_curves(str(root / 'metrics.jsonl')).train_steps.tolist() == [10, 20]


def test_the_metrics_of_a_lost_run_are_set_aside_on_an_object_store_too(gcs_dir):
  old = ''.join(json.dumps(r) + '\n' for r in LOST_RUN)
  epath.Path(gcs_dir, 'metrics.jsonl').write_text(old)
  assert metrics.set_aside_lost_run(gcs_dir) == f'{gcs_dir}/metrics.old-1.jsonl'
  assert epath.Path(gcs_dir, 'metrics.old-1.jsonl').read_text() == old
  assert not epath.Path(gcs_dir, 'metrics.jsonl').exists()


def test_tensorboard_events_are_written_without_importing_torch(tmp_path):
  """tensorboardX tries `import torch` at import (0.9 s of each training start where torch is
  installed): `_tensorboard` hides it for that import, and torch imports normally after."""
  script = (
      'import sys\n'
      'from t2t_jax.training import metrics\n'
      f'writer = metrics._tensorboard({str(tmp_path)!r})\n'
      "writer.add_scalar('loss', 2.5, 7)\n"
      'writer.close()\n'
      "print('torch' in sys.modules)\n"
      'try:\n'
      '  import torch\n'
      "  print(type(torch.zeros(1)).__name__)\n"
      'except ImportError:\n'
      "  print('no torch installed')\n")
  result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.split('\n')[:2] in (['False', 'Tensor'], ['False', 'no torch installed'])
  # The event file's TFRecords (length, its crc, an Event proto, its crc), read back.
  from tensorboardX.proto import event_pb2
  (name,) = [n for n in os.listdir(tmp_path) if n.startswith('events.out.tfevents.')]
  data, scalars = (tmp_path / name).read_bytes(), []
  while data:
    size = int.from_bytes(data[:8], 'little')
    event = event_pb2.Event.FromString(data[12:12 + size])
    scalars += [(event.step, v.tag, v.simple_value) for v in event.summary.value]
    data = data[12 + size + 4:]
  assert scalars == [(7, 'loss', 2.5)]
