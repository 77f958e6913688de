"""The installed command (issue 63, 5): `t2t-jax` is `python main.py`, flag for flag, and
`--version` names the installed distribution."""

import os
import subprocess
import sys
from importlib import metadata

import pytest
from conftest import ROOT

import t2t_jax
from t2t_jax import command

SCRIPT = os.path.join(os.path.dirname(sys.executable), 't2t-jax')


def test_version_is_the_installed_distributions():
  assert command.version() == t2t_jax.__version__ == metadata.version('t2t_jax')
  out = subprocess.run([sys.executable, os.path.join(ROOT, 'main.py'), '--version'],
                       capture_output=True, text=True, check=True).stdout
  assert out == f't2t-jax {metadata.version("t2t_jax")}\n'


@pytest.mark.skipif(not os.path.exists(SCRIPT), reason='t2t_jax is not pip-installed here')
def test_the_installed_command_is_main_py():
  # Run from elsewhere: the command needs no checkout as its working folder.
  run = lambda argv: subprocess.run(argv, capture_output=True, text=True, cwd='/')  # noqa: E731
  help_text = run([SCRIPT, '--help']).stdout
  assert '--mode' in help_text and '--workdir' in help_text and '--config' in help_text
  assert run([SCRIPT, '--version']).stdout == f't2t-jax {metadata.version("t2t_jax")}\n'
  info = ['--mode=info', '--config.d_model=64']
  installed = run([SCRIPT, *info])
  checkout = run([sys.executable, os.path.join(ROOT, 'main.py'), *info])
  assert installed.returncode == checkout.returncode == 0, installed.stderr[-2000:]
  assert installed.stdout == checkout.stdout and 'd_model=64' in installed.stdout
  refused = run([SCRIPT, '--mode=decode'])
  assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1].startswith('error:')
