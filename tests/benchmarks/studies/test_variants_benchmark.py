"""benchmarks/studies/variants.py: the user-code count, the training commands, and a smoke run of
both parts (a tiny model, 20 steps, 8 test sentences)."""

import json
import subprocess
import sys

import pytest

from benchmarks.studies import variants
from conftest import ROOT


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


class _Tokenizer:
  def encode(self, text):
    return [5] * len(text.split())


def _translator(kv_heads):
  """What `cache_bytes` reads of a Translator, for an untrained 8-head model."""
  import types  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import transformer  # pylint: disable=import-outside-toplevel
  cfg = transformer.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=8,
                                      num_kv_heads=kv_heads, num_layers=2, max_len=64)
  return types.SimpleNamespace(cfg=cfg, model=transformer.Transformer(cfg),
                               tokenizer=_Tokenizer(), max_decode_extra=10,
                               params=transformer.param_shapes(cfg))


def test_cache_bytes_shrink_with_the_key_value_heads_and_ratios_are_against_8_8():
  """Per sentence at beam 4: 2 layers x (keys + values) x heads x slots x 4 (d_k) x 4 bytes."""
  sources = ['a b c', 'a b c d e']  # the longest: 5 tokens + EOS = 6, decoding 16 slots
  full, one = (variants.cache_bytes(_translator(k), sources) for k in (None, 1))
  assert full['self_cache_bytes'] == variants.BEAM * 2 * 2 * 8 * 16 * 4 * 4
  assert full['cross_kv_bytes'] == 2 * 2 * 8 * 6 * 4 * 4
  assert full['cache_bytes_per_sentence'] == 8 * one['cache_bytes_per_sentence']
  models = {'heads8_kv8': {'params': 10, 'cache_bytes_per_sentence': 8, 'test_bleu': 20.0},
            'heads8_kv1': {'params': 8, 'cache_bytes_per_sentence': 1, 'test_bleu': 18.5}}
  times = {'heads8_kv8': [2.0, 2.2, 2.0], 'heads8_kv1': [1.0, 1.0, 1.1]}
  assert variants.ratios(models, times)['heads8_kv1'] == {
      'params': 0.8, 'cache_bytes': 0.125, 'decode_speed': 2.0, 'test_bleu_diff': -1.5}


@pytest.mark.slow  # about 40 s on 2 cores: a tiny training run, an export, decodes
def test_smoke_run_records_the_variant_table(tmp_path):
  """Part 1 end to end on a smoke run; Part 2's arithmetic is tested above, and its decode
  timing is `harness.interleave`'s."""
  out = tmp_path / 'variants.jsonl'
  argv = [sys.executable, '-m', 'benchmarks.studies.variants', '--root', str(tmp_path / 'runs'),
          '--smoke', '--rounds', '1', '--only', 'rotary', '--out', str(out)]
  done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  records = {r['part']: r for r in map(json.loads, out.read_text().splitlines())}
  table = records['variant_table']
  assert table['variant'] == 'rotary' and table['steps'] == variants.SMOKE_STEPS
  assert table['user_code_lines'] == variants.user_code('rotary')['lines']
  assert table['incremental_ok'] and table['incremental_gap'] < 1e-4
  assert table['export_identical'] is True and table['export_sentences'] == 8
  assert table['params'] > 0 and table['test_sentences'] == 8
  assert 'gqa' not in records
  assert records['total']['seconds'] > 0
