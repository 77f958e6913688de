"""tests/main_zygote.py: a forked main.py child is `python main.py` as far as a test can see."""

import os
import subprocess
import sys

import pytest

import main_zygote
from conftest import ROOT


def test_only_variables_read_after_importing_may_differ():
  zygote = {'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': '--a', 'HOME': '/root'}
  assert main_zygote.forkable(dict(zygote, XLA_FLAGS='--b', T2T_TEST_STEP_DELAY_S='1'), zygote)
  assert not main_zygote.forkable(dict(zygote, JAX_ENABLE_X64='1'), zygote)
  assert not main_zygote.forkable({k: v for k, v in zygote.items() if k != 'JAX_PLATFORMS'},
                                  zygote)


@pytest.mark.parametrize('args', [['--mode=info', '--config.d_model=64'],
                                  ['--mode=info', '--config.d_modle=64'],
                                  ['--mode=decode', '--workdir=/nowhere', '--input=-']])
def test_a_forked_child_answers_as_python_main_py(args, tmp_path):
  client = main_zygote.Client()
  try:
    forked = client.run(args, input='Amen.\n', cwd=tmp_path)
  finally:
    client.close()
  plain = subprocess.run([sys.executable, os.path.join(ROOT, 'main.py'), *args], cwd=tmp_path,
                         input='Amen.\n', capture_output=True, text=True, timeout=300)
  assert (forked.returncode, forked.stdout) == (plain.returncode, plain.stdout)
  last = [(r.stderr.strip().splitlines() or [''])[-1] for r in (forked, plain)]
  assert last[0] == last[1], last
  assert forked.returncode == (0 if args[1] == '--config.d_model=64' else 1)


def test_a_command_past_its_timeout_is_killed_as_subprocess_run_does(tmp_path):
  client = main_zygote.Client()
  try:
    with pytest.raises(subprocess.TimeoutExpired):
      # reads a stream that never ends: a FIFO nobody writes
      fifo = tmp_path / 'fifo'
      os.mkfifo(fifo)
      client.run(['--mode=info', f'--flagfile={fifo}'], timeout=3)
    assert client.run(['--mode=info']).returncode == 0  # the zygote serves on
  finally:
    client.close()
