"""benchmarks/variants.py: the user-code count, the training commands, and a smoke run of both
parts (a tiny model, 20 steps, 8 test sentences)."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import variants

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_user_code_counts_the_factory_and_what_it_uses(tmp_path):
  path = tmp_path / 'mine.py'
  path.write_text('import flax.linen as nn\n\n\n'
                  '# a comment\n'
                  'def helper(x):\n'
                  '  # inside\n\n'
                  '  return x\n\n\n'
                  'class Block(nn.Module):\n'
                  '  @nn.compact\n'
                  '  def __call__(self, x):\n'
                  '    return helper(x)\n\n\n'
                  'def unused():\n'
                  '  return 1\n\n\n'
                  'def factory(cfg):\n'
                  '  return Block(cfg)\n')
  assert variants.user_code('factory', str(path)) == {'lines': 8,
                                                      'parts': ['Block', 'factory', 'helper']}
  assert variants.user_code('paper', str(path)) == {'lines': 0, 'parts': []}
  with pytest.raises(ValueError, match='no top-level function'):
    variants.user_code('missing', str(path))


def test_every_variant_of_the_examples_is_counted():
  for name in variants.PART1[1:]:
    code = variants.user_code(name)
    assert name in code['parts'] and 0 < code['lines'] < 60
  assert variants.user_code('gqa') == {'lines': 2, 'parts': ['gqa']}


def test_commands_select_the_model_and_the_short_run(tmp_path):
  paper = variants.command('paper', str(tmp_path), smoke=False)
  assert paper[1].endswith('main.py') and paper[2] == f'--workdir={tmp_path}/paper'
  assert '--config.num_train_steps=1300' in paper and '--config.final_eval_split=' in paper
  assert not [a for a in paper if a.startswith(('--config.model', '--config.num_heads'))]
  assert variants.command('swiglu', str(tmp_path), False)[-1] == (
      '--config.model=examples/variants.py:swiglu')
  assert variants.command('heads8_kv1', str(tmp_path), True)[-2:] == [
      '--config.num_heads=8', '--config.num_kv_heads=1']
  assert '--config.num_train_steps=20' in variants.command('gqa', str(tmp_path), True)


@pytest.mark.slow  # about 90 s on 2 cores: three tiny training runs, an export, decodes
def test_smoke_run_records_both_parts(tmp_path):
  out = tmp_path / 'variants.jsonl'
  argv = [sys.executable, '-m', 'benchmarks.variants', '--root', str(tmp_path / 'runs'),
          '--smoke', '--rounds', '1', '--only', 'rotary,heads8_kv8,heads8_kv1', '--out', str(out)]
  done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  records = {r['part']: r for r in map(json.loads, out.read_text().splitlines())}
  table = records['variant_table']
  assert table['variant'] == 'rotary' and table['steps'] == variants.SMOKE_STEPS
  assert table['user_code_lines'] == variants.user_code('rotary')['lines']
  assert table['incremental_ok'] and table['incremental_gap'] < 1e-4
  assert table['export_identical'] is True and table['export_sentences'] == 8
  assert table['params'] > 0 and table['test_sentences'] == 8
  gqa = records['gqa']['models']
  assert gqa['heads8_kv8']['params'] > gqa['heads8_kv1']['params']
  assert (gqa['heads8_kv8']['self_cache_bytes'] == 8 * gqa['heads8_kv1']['self_cache_bytes'])
  assert records['gqa']['vs_8_8']['heads8_kv8']['decode_speed'] == 1.0
  assert records['total']['seconds'] > 0
