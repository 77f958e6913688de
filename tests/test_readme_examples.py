"""The README's worked examples run as they stand: a section's python blocks, top to bottom,
as one script in a fresh process, from a folder outside the repository."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_blocks(heading: str) -> str:
  """The ```python blocks of README.md's section `heading` (up to the next heading of the
  same or a higher level), joined into one script."""
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  level = heading.split(' ')[0]
  start = text.index(f'\n{heading}\n')
  following = re.compile(rf'\n#{{1,{len(level)}}} ', re.M).search(text, start + 1)
  section = text[start:following.start() if following else len(text)]
  blocks = re.findall(r'```python\n(.*?)```', section, re.S)
  assert blocks, f'README.md section {heading!r} has no python block'
  return '\n'.join(blocks)


def run_script(script: str, folder: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=ROOT)  # the package importable, as after `pip install`
  # As a reader runs it: one CPU device, not the 8 that conftest simulates (collectives
  # across simulated devices on 2 loaded cores can miss XLA's 40 s rendezvous deadline).
  env.pop('XLA_FLAGS', None)
  return subprocess.run([sys.executable, '-c', script], cwd=folder, env=env,
                        capture_output=True, text=True, timeout=900)


def test_python_blocks_are_found_per_section():
  script = python_blocks('## Changing the model')
  assert 'class SwiGLU' in script and 'def rotary_attention' in script
  assert '## Performance' not in script


@pytest.mark.slow
def test_changing_the_model_examples_run(tmp_path):
  """Both variants train, pass the incremental check, copy the toy inputs with beam search,
  and their exported StableHLO decodes as beam search does."""
  result = run_script(python_blocks('## Changing the model'), str(tmp_path))
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.splitlines()
  assert sum(line.startswith('artifact = beam search: True') for line in lines) == 2, lines
  losses = [float(line.split()[-1]) for line in lines if line.startswith('loss per token')]
  gaps = [float(line.split()[-1]) for line in lines
          if line.startswith('teacher-forced vs incremental')]
  assert len(losses) == 2 and max(losses) < 0.05, lines  # ln(30) = 3.4 untrained
  assert len(gaps) == 2 and max(gaps) < 1e-4, lines
  copied = [int(line.split()[1]) for line in lines if line.startswith('copied')]
  assert copied and min(copied) >= 6, lines


@pytest.mark.slow
def test_nnx_example_runs(tmp_path):
  """The NNX snippet trains through the bridge and beam-decodes with its Linen parameters."""
  script = python_blocks('### NNX') + '\nprint(best.shape)\n'
  result = run_script(script, str(tmp_path))
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().splitlines()[-1] == '(1, 4, 8)', result.stdout
