"""Learning curves: `<workdir>/metrics.jsonl` drawn as PNG files in `<workdir>/plots/`.

Resumed runs. A killed run restarts from its last checkpoint, so the file holds steps logged
by a process that did not survive, and each process counts `elapsed_s` from the start of its
own training loop. `load_curves` reads the file in order:
  * a training record starts a new segment (process) when its step is <= the previous
    training record's step or its `elapsed_s` is smaller than the previous one's;
  * at a segment whose first step is s, earlier records with step >= s (training and eval)
    are dropped: they belong to the rolled-back run. Otherwise the record written last for a
    (kind, step) wins, so steps come out unique and increasing;
  * the segment's wall times are W(c) + elapsed_s, c the largest kept training step below s
    and W(c) its wall time (0 if none): the curve goes on from where the run resumed, and
    neither the time between kill and restart nor the rolled-back work counts. (The
    checkpoint step is not logged; c may be early by less than one logging interval.)
An eval record is placed by its own `elapsed_s`, offset like the training records around it.
Without one (older runs), or with one smaller than the segment's last training record's (a
fresh process's step-0 eval), it gets the training wall time interpolated at its step (0 at
step 0). Values logged as "nan"/"inf" are NaN in the arrays and are not drawn.
"""

import json
import math
import io
import os
import re
from typing import Dict, List, NamedTuple, Tuple

import numpy as np
from absl import logging
from etils import epath

from t2t_jax.storage import layout, paths

FIGSIZE = (10, 4)  # inches; at DPI every PNG is 1000 x 400 pixels, whatever the run
DPI = 100

_EVAL_KEY = re.compile(r'^eval_([^/]+)/')


class PlotError(ValueError):
  """metrics.jsonl is missing, holds nothing to plot, or has a malformed line (named)."""


class Curves(NamedTuple):
  """One run's curves, each series by strictly increasing step; NaN: not logged or not finite."""
  train_steps: np.ndarray  # int64 [T], the logged training steps
  train_loss: np.ndarray  # float64 [T], training loss (label-smoothed, logging-window mean)
  train_wall: np.ndarray  # float64 [T], cumulative training wall time in s (module doc)
  eval_steps: np.ndarray  # int64 [E], the steps of the periodic evals
  eval_loss: np.ndarray  # float64 [E], teacher-forced loss on eval_split
  eval_bleu: np.ndarray  # float64 [E], BLEU on eval_split (NaN where not decoded)
  eval_f1: np.ndarray  # float64 [E], a treebank's EVALB F1 on eval_split (NaN: not decoded)
  eval_wall: np.ndarray  # float64 [E], seconds on the clock of train_wall
  eval_split: str  # 'dev': the split of the last eval record; '' without eval records
  # The same evaluations of the moving average of the weights (`ema_decay`, records under
  # `eval_<split>_ema/`), at `eval_steps`: NaN where it was not evaluated (step 0, no EMA).
  ema_loss: np.ndarray = np.zeros(0)  # float64 [E]
  ema_bleu: np.ndarray = np.zeros(0)  # float64 [E]
  ema_f1: np.ndarray = np.zeros(0)  # float64 [E]


def _number(value) -> float:
  """A logged value as a float: NaN for "nan"/"inf" strings, infinities and non-numbers."""
  try:
    x = float(value)
  except (TypeError, ValueError):
    return math.nan
  return x if math.isfinite(x) else math.nan


# An evaluation of the moving average of the weights: `eval_<split>_ema/` (dev_eval).
EMA_SUFFIX = '_ema'


def _eval_split(record: dict) -> str:
  """'dev' for a record with `eval_dev/...` keys; '' for a training record."""
  return next((m.group(1) for m in map(_EVAL_KEY.match, record) if m), '')


def _read_records(path: str) -> List[dict]:
  """The JSON objects of `path`, in file order; PlotError naming the file (and line)."""
  try:
    lines = epath.Path(path).read_text(encoding='utf-8').split('\n')
  except FileNotFoundError:
    raise PlotError(f'{path}: no such file; train first') from None
  except (OSError, UnicodeDecodeError) as e:
    raise PlotError(f'{path}: cannot read: {e}') from None
  records = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      if number == len(lines):  # no newline: a run killed while writing it, or writing it now
        logging.warning('%s:%d: skipping a torn last line (no newline: a run killed while '
                        'writing it, or one writing it now)', path, number)
        break
      raise PlotError(f'{path}:{number}: not valid JSON ({e.msg})') from None
    if not isinstance(record, dict) or type(record.get('step')) is not int:
      raise PlotError(f'{path}:{number}: expected a JSON object with an integer "step"')
    records.append(record)
  return records


def load_curves(path: str) -> Curves:
  """Reads a metrics.jsonl into `Curves`, resolving resumed runs as the module doc says."""
  records = _read_records(path)
  splits = [s for s in map(_eval_split, records) if s and not s.endswith(EMA_SUFFIX)]
  split = splits[-1] if splits else ''
  prefix, ema_prefix = f'eval_{split}/', f'eval_{split}{EMA_SUFFIX}/'
  train: Dict[int, Tuple[float, float]] = {}  # step -> (loss, wall)
  evals: Dict[int, Tuple[float, ...]] = {}  # step -> (loss, bleu, f1, wall or NaN)
  emas: Dict[int, Tuple[float, ...]] = {}  # step -> (loss, bleu, f1) of the moving average
  prev_step, prev_elapsed, offset = None, math.nan, 0.0
  for record in records:
    step = record['step']
    if 'loss' in record:
      elapsed = _number(record.get('elapsed_s'))
      if prev_step is not None and (step <= prev_step or elapsed < prev_elapsed):
        # a new process, resumed from a checkpoint below `step`: the rolled-back run goes
        train = {s: v for s, v in train.items() if s < step}
        evals = {s: v for s, v in evals.items() if s < step}
        emas = {s: v for s, v in emas.items() if s < step}
        timed = [s for s, (_, wall) in train.items() if math.isfinite(wall)]
        offset = train[max(timed)][1] if timed else 0.0
      train[step] = (_number(record['loss']), offset + elapsed)
      prev_step, prev_elapsed = step, elapsed
    elif split and _eval_split(record) == split:
      elapsed = _number(record.get(prefix + 'elapsed_s'))
      # NaN (interpolated below) when logged by a process that has no training record yet
      wall = math.nan if elapsed < prev_elapsed else offset + elapsed
      evals[step] = (*(_number(record.get(prefix + key)) for key in ('loss', 'bleu', 'f1')),
                     wall)
    elif split and _eval_split(record) == split + EMA_SUFFIX:
      emas[step] = tuple(_number(record.get(ema_prefix + key)) for key in ('loss', 'bleu', 'f1'))
  if not train and not evals:
    raise PlotError(f'{path}: no metrics to plot; train first')

  def columns(table, width):
    steps = np.array(sorted(table), dtype=np.int64)
    values = np.array([table[s] for s in steps], dtype=np.float64).reshape(len(steps), width)
    return (steps, *values.T)

  train_steps, train_loss, train_wall = columns(train, 2)
  eval_steps, eval_loss, eval_bleu, eval_f1, eval_wall = columns(evals, 4)
  timed = np.isfinite(train_wall)
  if timed.any():
    xp, fp = train_steps[timed], train_wall[timed]
    if xp[0] > 0:  # no training time has passed at step 0
      xp, fp = np.concatenate([[0], xp]), np.concatenate([[0.0], fp])
    guess = np.interp(eval_steps, xp, fp, right=np.nan)
    eval_wall = np.where(np.isnan(eval_wall), guess, eval_wall)
  ema = np.array([emas.get(int(s), (math.nan,) * 3) for s in eval_steps],
                 dtype=np.float64).reshape(len(eval_steps), 3)
  return Curves(train_steps, train_loss, train_wall, eval_steps, eval_loss, eval_bleu,
                eval_f1, eval_wall, split, *ema.T)


def _line(ax, x: np.ndarray, y: np.ndarray, **kwargs) -> None:
  """Plots the finite points of (x, y); nothing (and no legend entry) when there are none."""
  keep = np.isfinite(x) & np.isfinite(y)
  if keep.any():
    ax.plot(x[keep], y[keep], **kwargs)


def _figure(curves: Curves, train_x: np.ndarray, eval_x: np.ndarray, xlabel: str, title: str):
  # The object-oriented API with an explicit Agg canvas, not pyplot: no global backend switch
  # and no figure registry in the training process that calls this (or a user's notebook).
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  fig = Figure(figsize=FIGSIZE, dpi=DPI, layout='constrained')
  FigureCanvasAgg(fig)
  loss_ax, score_ax = fig.subplots(1, 2)
  split = curves.eval_split or 'dev'
  _line(loss_ax, train_x, curves.train_loss, label='train loss', color='C0')
  _line(loss_ax, eval_x, curves.eval_loss, label=f'{split} loss', color='C1', marker='o',
        markersize=3)
  _line(loss_ax, eval_x, curves.ema_loss, label=f'{split} loss (moving average)', color='C3',
        marker='s', markersize=3)
  loss_ax.set(xlabel=xlabel, ylabel='loss (label-smoothed)', title='loss')
  if loss_ax.lines:
    loss_ax.legend()
  # The decoded score: BLEU, or a treebank run's F1 (it logs no BLEU).
  name, score, ema = (('F1', curves.eval_f1, curves.ema_f1) if np.isfinite(curves.eval_f1).any()
                      else ('BLEU', curves.eval_bleu, curves.ema_bleu))
  if np.isfinite(score).any():
    _line(score_ax, eval_x, score, color='C2', marker='o', markersize=3, label='trained weights')
    _line(score_ax, eval_x, ema, color='C3', marker='s', markersize=3, label='moving average')
    if len(score_ax.lines) > 1:
      score_ax.legend()
    score_ax.set(xlabel=xlabel, ylabel=name, title=f'{split} {name}')
  else:
    # The panel stays (greyed note) so every PNG has the same layout.
    score_ax.text(0.5, 0.5, f'no {split} BLEU or F1\n(config.eval_bleu_sentences=0?)',
                  ha='center', va='center', color='gray', transform=score_ax.transAxes)
    score_ax.set(xticks=[], yticks=[], title=f'{split} BLEU')
  for ax in (loss_ax, score_ax):
    ax.grid(alpha=0.3)
  fig.suptitle(title)
  return fig


def _save_atomic(fig, path: str) -> None:
  """PNG written in one piece (`paths.write_atomic`): never half a file."""
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png', dpi=DPI)
  paths.write_atomic(path, buffer.getvalue(), overwrite=True)


def write_learning_curves(workdir: str) -> List[str]:
  """Draws `<workdir>/metrics.jsonl` as `<workdir>/plots/learning_curves_{step,time}.png`.

  Each PNG is FIGSIZE at DPI (1000 x 400 pixels): loss (train and eval) and eval BLEU (a
  treebank run: F1) panels, against the step and against cumulative training wall time in
  minutes. The time plot is left out when no training record has `elapsed_s`. Files are
  replaced atomically; nothing else in plots/ is touched.

  Returns the paths written; PlotError when there is nothing to plot (see `load_curves`).
  """
  workdir = layout.of(workdir)
  curves = load_curves(workdir.metrics)
  try:
    import matplotlib  # noqa: F401 - imported here: load_curves and main.py do not need it
  except ImportError:
    raise PlotError('matplotlib is not installed; pip install -r requirements.txt') from None
  last = max(curves.train_steps.max(initial=0), curves.eval_steps.max(initial=0))
  title = f'{os.path.basename(workdir.root)}: step {last}'
  views = [('step', 'step', curves.train_steps, curves.eval_steps)]
  if np.isfinite(curves.train_wall).any():
    views.append(('time', 'training wall time (minutes)', curves.train_wall / 60.0,
                  curves.eval_wall / 60.0))
  written = []
  for name, xlabel, train_x, eval_x in views:
    path = os.path.join(workdir.plots, f'learning_curves_{name}.png')
    _save_atomic(_figure(curves, train_x, eval_x, xlabel, title), path)
    written.append(path)
  return written


def print_learning_curves(workdir: str) -> None:
  """`--mode=plot`: redraws the learning curves of `workdir` and prints their paths."""
  for path in write_learning_curves(workdir):
    print(path)
