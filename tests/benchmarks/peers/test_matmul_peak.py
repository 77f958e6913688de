"""benchmarks/peers/matmul_peak.py: without torch it says in one line what to install (or
--no-peer), a number it cannot honour is refused, and --no-peer measures ours alone."""

import json
import os
import sys

import pytest

from benchmarks.peers import matmul_peak
from conftest import ROOT


def test_without_torch_it_says_what_to_install(monkeypatch, capsys):
  monkeypatch.setitem(sys.modules, 'torch', None)  # `import torch` fails, installed or not
  with pytest.raises(SystemExit) as exit_:
    matmul_peak.main(['--n', '8'])
  err = capsys.readouterr().err
  assert exit_.value.code == 2 and 'Traceback' not in err
  last = err.strip().splitlines()[-1]
  assert 'the PyTorch peer needs torch' in last
  assert 'pip install -r requirements-bench.txt' in last and '--no-peer' in last
  with open(os.path.join(ROOT, 'requirements-bench.txt'), encoding='utf-8') as f:
    assert any(line.startswith('torch') for line in f)  # the file the hint names has torch


@pytest.mark.parametrize('argv, says', [
    (['--n', '0'], "argument --n: expected a whole number of at least 1, not '0'"),
    (['--repeats', '0'], "argument --repeats: expected a whole number of at least 1, not '0'"),
    (['--dtype', 'float64'], "argument --dtype: invalid choice: 'float64'"),
])
def test_a_number_it_cannot_honour_is_refused(argv, says, capsys):
  with pytest.raises(SystemExit) as exit_:
    matmul_peak.main(argv + ['--no-peer'])
  assert exit_.value.code == 2 and says in capsys.readouterr().err.strip().splitlines()[-1]


def test_no_peer_measures_ours_alone(monkeypatch, capsys):
  monkeypatch.setitem(sys.modules, 'torch', None)
  matmul_peak.main(['--n', '8', '--repeats', '2', '--no-peer'])
  record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert record['name'] == 'matmul_peak' and record['shapes'] == {'m': 8, 'n': 8, 'k': 8}
  assert record['jax']['gflops_per_s'] > 0 and record['jax']['time']['n'] == 2
  assert 'torch' not in record
