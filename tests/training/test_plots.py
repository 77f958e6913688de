"""Learning curves: the resume-aware reading of metrics.jsonl, the PNGs, `--mode=plot`."""

import json
import logging
import os

import numpy as np
import pytest
from PIL import Image

from conftest import run_main
from t2t_jax.training import plots

NAN = np.nan

# Killed after step 40 (checkpoint 30) and resumed; then stopped by a signal at step 55
# (checkpoint 55) and resumed: a step that does not go back, but elapsed_s starts again.
KILLED_AND_RESUMED = [
    {'step': 0, 'eval_dev/loss': 9.0, 'eval_dev/elapsed_s': 1.0},
    {'step': 10, 'loss': 5.0, 'elapsed_s': 10.0},
    {'step': 20, 'loss': 4.0, 'elapsed_s': 20.0},
    {'step': 20, 'eval_dev/loss': 4.5, 'eval_dev/bleu': 1.0, 'eval_dev/elapsed_s': 25.0},
    {'step': 30, 'loss': 3.0, 'elapsed_s': 30.0},
    {'step': 40, 'loss': 2.9, 'elapsed_s': 40.0},
    {'step': 40, 'eval_dev/loss': 3.9, 'eval_dev/bleu': 1.5, 'eval_dev/elapsed_s': 45.0},
    # resumed from checkpoint 30: wall time goes on from W(30) = 30
    {'step': 40, 'loss': 2.5, 'elapsed_s': 5.0},
    {'step': 40, 'eval_dev/loss': 3.0, 'eval_dev/bleu': 2.0},  # older format: no elapsed_s
    {'step': 50, 'loss': 'nan', 'elapsed_s': 15.0},
    {'step': 55, 'loss': 2.0, 'elapsed_s': 17.0},
    # resumed from checkpoint 55: W(55) = 30 + 17
    {'step': 60, 'loss': 1.8, 'elapsed_s': 4.0},
    {'step': 60, 'eval_dev/loss': 'inf', 'eval_dev/bleu': 3.0, 'eval_dev/elapsed_s': 6.0},
]


def write_metrics(folder, records, tail=''):
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, 'metrics.jsonl'), 'w') as f:
    f.write(''.join(json.dumps(r) + '\n' for r in records) + tail)
  return str(folder)


def test_load_curves_resolves_kill_and_resume(tmp_path):
  c = plots.load_curves(os.path.join(write_metrics(tmp_path, KILLED_AND_RESUMED),
                                     'metrics.jsonl'))
  np.testing.assert_array_equal(c.train_steps, [10, 20, 30, 40, 50, 55, 60])
  np.testing.assert_array_equal(c.train_loss, [5.0, 4.0, 3.0, 2.5, NAN, 2.0, 1.8])
  np.testing.assert_array_equal(c.train_wall, [10.0, 20.0, 30.0, 35.0, 45.0, 47.0, 51.0])
  assert c.eval_split == 'dev'
  np.testing.assert_array_equal(c.eval_steps, [0, 20, 40, 60])
  np.testing.assert_array_equal(c.eval_loss, [9.0, 4.5, 3.0, NAN])
  np.testing.assert_array_equal(c.eval_bleu, [NAN, 1.0, 2.0, 3.0])
  # step 40 has no elapsed_s: interpolated at the training record of step 40
  np.testing.assert_array_equal(c.eval_wall, [1.0, 25.0, 35.0, 53.0])
  assert np.all(np.diff(c.train_steps) > 0) and np.all(np.diff(c.train_wall) > 0)


def test_a_rolled_back_run_beyond_the_resume_point_is_dropped(tmp_path):
  records = [{'step': 10, 'loss': 3.0, 'elapsed_s': 10.0},
             {'step': 20, 'loss': 2.0, 'elapsed_s': 20.0},
             {'step': 30, 'loss': 1.0, 'elapsed_s': 30.0},
             {'step': 30, 'eval_dev/loss': 1.5},
             {'step': 20, 'loss': 2.2, 'elapsed_s': 3.0}]  # resumed from 10, then stopped
  c = plots.load_curves(os.path.join(write_metrics(tmp_path, records), 'metrics.jsonl'))
  np.testing.assert_array_equal(c.train_steps, [10, 20])
  np.testing.assert_array_equal(c.train_loss, [3.0, 2.2])
  np.testing.assert_array_equal(c.train_wall, [10.0, 13.0])
  assert c.eval_steps.shape == (0,) and c.eval_split == 'dev'


def test_the_moving_average_s_evaluations_are_curves_of_their_own(tmp_path):
  """`ema_decay`: `eval_dev_ema/` beside `eval_dev/` at each step but 0 (dev_eval); the
  split stays 'dev' though the EMA record is written last."""
  records = [{'step': 0, 'eval_dev/loss': 9.0},
             {'step': 10, 'loss': 3.0, 'elapsed_s': 10.0},
             {'step': 10, 'eval_dev/loss': 4.0, 'eval_dev/bleu': 1.0},
             {'step': 10, 'eval_dev_ema/loss': 5.0, 'eval_dev_ema/bleu': 0.5},
             {'step': 20, 'loss': 2.0, 'elapsed_s': 20.0},
             {'step': 20, 'eval_dev/loss': 3.0, 'eval_dev/bleu': 2.0},
             {'step': 20, 'eval_dev_ema/loss': 2.5, 'eval_dev_ema/bleu': 3.0}]
  workdir = write_metrics(tmp_path, records)
  c = plots.load_curves(os.path.join(workdir, 'metrics.jsonl'))
  assert c.eval_split == 'dev'
  np.testing.assert_array_equal(c.eval_steps, [0, 10, 20])
  np.testing.assert_array_equal(c.eval_loss, [9.0, 4.0, 3.0])
  np.testing.assert_array_equal(c.ema_loss, [NAN, 5.0, 2.5])
  np.testing.assert_array_equal(c.ema_bleu, [NAN, 0.5, 3.0])
  assert len(plots.write_learning_curves(workdir)) == 2


def test_write_learning_curves_draws_real_images(tmp_path):
  workdir = write_metrics(tmp_path / 'run', KILLED_AND_RESUMED)
  keep = os.path.join(workdir, 'plots', 'mine.txt')
  os.makedirs(os.path.dirname(keep))
  open(keep, 'w').close()
  paths = plots.write_learning_curves(workdir)
  assert [os.path.basename(p) for p in paths] == ['learning_curves_step.png',
                                                  'learning_curves_time.png']
  for path in paths:
    with Image.open(path) as image:
      assert image.format == 'PNG' and image.size == (1000, 400)
      assert np.asarray(image.convert('L'), dtype=np.float64).std() > 0
  assert sorted(os.listdir(os.path.dirname(keep))) == [  # no temporary files left behind
      'learning_curves_step.png', 'learning_curves_time.png', 'mine.txt']


def test_no_elapsed_s_and_no_bleu_still_plot_by_step(tmp_path):
  workdir = write_metrics(tmp_path, [{'step': 10, 'loss': 3.0}, {'step': 10, 'eval_x/loss': 2.0}])
  paths = plots.write_learning_curves(workdir)
  assert [os.path.basename(p) for p in paths] == ['learning_curves_step.png']
  assert plots.load_curves(os.path.join(workdir, 'metrics.jsonl')).eval_split == 'x'


def test_a_parsing_run_draws_its_dev_f1_where_translation_draws_bleu(tmp_path):
  records = [{'step': 10, 'loss': 3.0, 'elapsed_s': 1.0},
             {'step': 10, 'eval_dev/loss': 2.0, 'eval_dev/f1': 41.5, 'eval_dev/precision': 40.0},
             {'step': 20, 'loss': 2.0, 'elapsed_s': 2.0},
             {'step': 20, 'eval_dev/loss': 1.5, 'eval_dev/f1': 63.25}]
  curves = plots.load_curves(os.path.join(write_metrics(tmp_path, records), 'metrics.jsonl'))
  np.testing.assert_array_equal(curves.eval_f1, [41.5, 63.25])
  assert np.isnan(curves.eval_bleu).all()
  score_ax = plots._figure(curves, curves.train_steps, curves.eval_steps, 'step', 't').axes[1]
  assert score_ax.get_title() == 'dev F1' and score_ax.get_ylabel() == 'F1'
  [line] = score_ax.lines
  np.testing.assert_array_equal(line.get_xdata(), [10, 20])
  np.testing.assert_array_equal(line.get_ydata(), [41.5, 63.25])
  bleu = plots.load_curves(os.path.join(write_metrics(tmp_path / 'mt', KILLED_AND_RESUMED),
                                        'metrics.jsonl'))
  assert plots._figure(bleu, bleu.train_steps, bleu.eval_steps, 'step', 't').axes[1].get_title(
      ) == 'dev BLEU'


def test_missing_or_empty_metrics_name_the_file(tmp_path):
  path = os.path.join(tmp_path, 'metrics.jsonl')
  with pytest.raises(plots.PlotError, match='metrics.jsonl: no such file'):
    plots.write_learning_curves(str(tmp_path))
  write_metrics(tmp_path, [{'step': 1, 'other': 2.0}])
  with pytest.raises(plots.PlotError) as e:
    plots.write_learning_curves(str(tmp_path))
  assert str(e.value) == f'{path}: no metrics to plot; train first'
  assert not os.path.exists(os.path.join(tmp_path, 'plots'))


def test_malformed_line_names_file_and_line_but_a_partial_last_line_is_skipped(tmp_path,
                                                                                caplog):
  path = os.path.join(write_metrics(tmp_path, KILLED_AND_RESUMED, tail='{"step": 70, "lo'),
                      'metrics.jsonl')
  with caplog.at_level(logging.WARNING):
    # a killed run's last record, or one a live run is writing
    assert plots.load_curves(path).train_steps[-1] == 60
  assert [r.getMessage() for r in caplog.records] == [
      f'{path}:{len(KILLED_AND_RESUMED) + 1}: skipping a torn last line (no newline: a run '
      'killed while writing it, or one writing it now)']
  with open(path, 'a') as f:
    f.write('\n' + json.dumps({'step': 80, 'loss': 1.0}) + '\n')
  with pytest.raises(plots.PlotError, match=f'^{path}:{len(KILLED_AND_RESUMED) + 1}: not valid'):
    plots.load_curves(path)


def test_main_plot_mode(tmp_path):
  empty = tmp_path / 'empty'
  empty.mkdir()
  result = run_main('--mode=plot', f'--workdir={empty}')
  assert result.returncode != 0
  assert 'Traceback' not in result.stderr
  lines = result.stderr.strip().splitlines()
  assert lines == [f'error: {empty}/metrics.jsonl: no such file; train first'], result.stderr
  workdir = write_metrics(tmp_path / 'run', KILLED_AND_RESUMED)
  result = run_main('--mode=plot', f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr
  written = [os.path.join(workdir, 'plots', f'learning_curves_{x}.png') for x in ('step', 'time')]
  assert result.stdout.split() == written
  assert all(os.path.getsize(p) > 0 for p in written)


def test_plots_are_readable_like_any_new_file(tmp_path):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'metrics.jsonl').write_text(
      '{"step": 10, "loss": 5.0, "elapsed_s": 1.0}\n{"step": 20, "loss": 4.0, "elapsed_s": 2.0}\n')
  umask = os.umask(0o022)
  os.umask(umask)
  for path in plots.write_learning_curves(str(workdir)):
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
