"""The command line: `--mode=info` and bad-input handling, as a user runs it."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_main(*args, timeout=300):
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, os.path.join(ROOT, 'main.py'), *args], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=timeout)


def test_info_prints_base_parameter_count():
  result = run_main('--mode=info', '--config=configs/wmt_base.py')
  assert result.returncode == 0, result.stderr
  assert 'total                63,045,632' in result.stdout
  assert 'shared_embedding/embedding' in result.stdout and '(37000, 512)' in result.stdout


def test_info_for_a_table3_row_with_override():
  result = run_main('--mode=info', '--config=configs/table3.py:A1', '--config.vocab_size=1000')
  assert result.returncode == 0, result.stderr
  assert 'num_heads=1 d_k=512 d_v=512' in result.stdout
  assert '(1000, 512)' in result.stdout


def test_unknown_key_and_bad_value_fail_before_computation():
  result = run_main('--mode=info', '--config.d_modle=3')
  assert result.returncode != 0
  assert "unknown config key 'd_modle'; did you mean d_model" in result.stderr
  result = run_main('--mode=info', '--config=configs/wmt_base.py', '--config.num_heads=7')
  assert result.returncode != 0
  assert "config key 'd_model': expected a multiple of num_heads=7" in result.stderr


def test_unknown_table3_row_names_valid_choices():
  result = run_main('--mode=info', '--config=configs/table3.py:C9')
  assert result.returncode != 0
  assert "unknown Table 3 row 'C9'; valid rows: base, A1" in result.stderr
