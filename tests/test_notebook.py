"""The Colab notebook: its reviewed .py twin matches the .ipynb, the .ipynb is committed
without outputs, and it runs top to bottom (a tiny model, a few steps, on the test CPU)."""

import ast
import json
import os
import sys

import pytest

from conftest import ROOT, TINY

nbformat = pytest.importorskip('nbformat', reason='pip install -r requirements-notebook.txt')

NOTEBOOKS = os.path.join(ROOT, 'notebooks')
NOTEBOOK = os.path.join(NOTEBOOKS, 't2t_jax.ipynb')
TWIN = os.path.join(NOTEBOOKS, 't2t_jax.py')
KERNEL = 't2t-jax-test'
STEPS = 20


def _cells(notebook):
  return [(cell.cell_type, cell.source) for cell in notebook.cells]


def test_py_twin_matches_notebook():
  jupytext = pytest.importorskip('jupytext')
  assert _cells(jupytext.read(TWIN)) == _cells(nbformat.read(NOTEBOOK, as_version=4)), (
      'notebooks/t2t_jax.py and .ipynb differ: run `jupytext --sync notebooks/t2t_jax.py`')


def test_notebook_committed_without_outputs():
  code = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == 'code']
  assert len(code) >= 8
  assert all(c.outputs == [] and c.execution_count is None for c in code), (
      'strip the outputs: jupytext --sync notebooks/t2t_jax.py after clearing them')


def _tiny_overrides(corpus):
  """conftest.TINY's `--config.KEY=VALUE` as the notebook's JSON overrides, on `corpus`."""
  overrides = {}
  for arg in TINY:
    if arg.startswith('--config.'):
      key, value = arg[len('--config.'):].split('=', 1)
      try:
        overrides[key] = ast.literal_eval(value)
      except (ValueError, SyntaxError):  # a bare string, e.g. final_eval_split=
        overrides[key] = value
  # Four checkpoints (5, 10, 15, 20) for the notebook to average the last three of.
  overrides.update(checkpoint_every_steps=5, log_every_steps=5, eval_every_steps=10,
                   local_corpus_dir=corpus)
  return overrides


def _kernel_spec(folder):
  """A kernel spec running this interpreter, so the notebook sees this environment."""
  spec_dir = os.path.join(folder, 'kernels', KERNEL)
  os.makedirs(spec_dir)
  with open(os.path.join(spec_dir, 'kernel.json'), 'w') as f:
    json.dump({'argv': [sys.executable, '-m', 'ipykernel_launcher', '-f', '{connection_file}'],
               'display_name': 't2t_jax test', 'language': 'python'}, f)


def _text(cell):
  return ''.join(o.get('text', '') for o in cell.outputs if o.output_type == 'stream')


def _cell_after(notebook, heading):
  """The first code cell after the markdown cell that starts with `heading`."""
  cells = notebook.cells
  start = next(i for i, c in enumerate(cells)
               if c.cell_type == 'markdown' and c.source.startswith(heading))
  return next(c for c in cells[start:] if c.cell_type == 'code')


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(corpus, tmp_path, monkeypatch):
  nbclient = pytest.importorskip('nbclient')
  workdir = str(tmp_path / 'run')
  _kernel_spec(str(tmp_path / 'jupyter'))
  monkeypatch.setenv('JUPYTER_PATH', str(tmp_path / 'jupyter'))
  monkeypatch.setenv('T2T_NOTEBOOK_STEPS', str(STEPS))
  monkeypatch.setenv('T2T_NOTEBOOK_CONFIG', json.dumps(_tiny_overrides(corpus)))
  monkeypatch.setenv('T2T_NOTEBOOK_TEST_SENTENCES', '16')
  monkeypatch.setenv('T2T_NOTEBOOK_WORKDIR', workdir)
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  # A failing cell raises CellExecutionError, naming the cell and its traceback.
  nbclient.NotebookClient(notebook, timeout=300, kernel_name=KERNEL,
                          resources={'metadata': {'path': NOTEBOOKS}}).execute()

  assert 'over 8 device(s)' in _text(_cell_after(notebook, '## Devices'))
  assert f'trained to step {STEPS}' in _text(_cell_after(notebook, '## Train'))
  curves = _cell_after(notebook, '## Learning curves')
  assert 'step    10: dev loss' in _text(curves)
  pngs = [o for o in curves.outputs if 'image/png' in o.get('data', {})]
  assert len(pngs) == 2  # against step and against wall time
  assert os.path.isfile(os.path.join(workdir, 'plots', 'learning_curves_step.png'))
  average = _text(_cell_after(notebook, '## Average'))
  assert 'averaged steps (10, 15, 20)' in average
  assert 'orbax-checkpoint-tmp' not in average  # the library chatter main.py hides, hidden
  assert os.path.isdir(os.path.join(workdir, 'averaged', 'step_20_last_3'))
  assert _text(_cell_after(notebook, '## Decode')).count('\n  -> ') == 3
  bleu = _text(_cell_after(notebook, '## BLEU'))
  assert '16 sentences' in bleu and 'averaged steps 10,15,20' in bleu
  assert 'BLEU ' in bleu and 'nrefs:1' in bleu
  api = _text(_cell_after(notebook, '## The library API'))
  assert 'beam_search: sequences (1, 4, ' in api and 'best beam:' in api
  attention = _cell_after(notebook, '## Attention maps')
  assert "'encoder_decoder': (1, 1, 4, " in _text(attention)  # [layers, batch, heads, q, k]
  assert len([o for o in attention.outputs if 'image/png' in o.get('data', {})]) == 2
