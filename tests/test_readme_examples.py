"""The documentation's worked examples run as they stand (docs/library.md, which the README
links for the library and changing the model): a section's python blocks, top to bottom, as one
script in a fresh process, from a folder outside the repository."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = os.path.join('docs', 'library.md')  # the page with the library's examples


def python_blocks(heading: str, page: str = LIBRARY) -> str:
  """The ```python blocks of `page`'s section `heading` (up to the next heading of the same or
  a higher level), joined into one script."""
  with open(os.path.join(ROOT, page), encoding='utf-8') as f:
    text = f.read()
  level = heading.split(' ')[0]
  start = text.index(f'\n{heading}\n')
  following = re.compile(rf'\n#{{1,{len(level)}}} ', re.M).search(text, start + 1)
  section = text[start:following.start() if following else len(text)]
  blocks = re.findall(r'```python\n(.*?)```', section, re.S)
  assert blocks, f'{page} section {heading!r} has no python block'
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
  assert 'class SwiGLU' in script and 'def rotate' in script
  assert '## Conventions' not in script and 'class RelativeBias' in script


def test_the_documented_variants_are_examples_variants_as_written():
  """Every python block of "Changing the model" but the last is in examples/variants.py
  verbatim (what `--config.model=examples/variants.py:NAME` trains), and each variant is at
  most 30 lines of code (blank lines and comments not counted)."""
  text = open(os.path.join(ROOT, LIBRARY), encoding='utf-8').read()
  start = text.index('\n## Changing the model\n')
  section = text[start:text.index('\n## ', start + 1)]
  blocks = re.findall(r'```python\n(.*?)```', section, re.S)
  source = open(os.path.join(ROOT, 'examples', 'variants.py')).read()
  assert len(blocks) == 7
  for block in blocks[:-1]:
    assert block in source, block
  for block in blocks[1:-1]:
    code = [line for line in block.splitlines() if line.strip() and
            not line.strip().startswith('#')]
    assert len(code) <= 30, block


@pytest.mark.slow
def test_changing_the_model_examples_run(tmp_path):
  """The five variants train on the toy copy task and pass the incremental check."""
  result = run_script(python_blocks('## Changing the model'), str(tmp_path))
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.splitlines()
  names = [line.split(':')[0] for line in lines]
  assert names == ['gqa', 'rotary', 't5_bias', 'pre_rmsnorm', 'swiglu'], lines
  losses = [float(line.split('loss per token ')[1].split(',')[0]) for line in lines]
  gaps = [float(line.split()[-1]) for line in lines]
  assert max(losses) < 3.0, lines  # ln(30) = 3.4 untrained, label-smoothed
  assert max(gaps) < 1e-4, lines


@pytest.mark.slow
def test_nnx_example_runs(tmp_path):
  """The NNX snippet trains through the bridge and beam-decodes with its Linen parameters."""
  script = python_blocks('## NNX') + '\nprint(best.shape)\n'
  result = run_script(script, str(tmp_path))
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().splitlines()[-1] == '(1, 9)', result.stdout
