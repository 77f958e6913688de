"""Every public name that takes user data refuses each class of bad argument in its row of
tests/public_api_table.py: the documented exception, a message naming the argument and
speaking to a caller (no `--flags`, no workdir unless one is the argument), nothing written.
The scripts a user runs directly (benchmarks/device/check.py, an export's serve.py) stop in one
line naming the argument, without a traceback."""

import os
import re
import subprocess
import sys

import pytest
from checkpoint_helpers import snapshot
from conftest import ROOT
from public_api_table import CLASSES, EXEMPT, KNOWN_GAPS, ROWS, SCRIPTS, Context

import t2t_jax


def _id(row):
  return f'{row.name}-{row.klass.replace(" ", "_")}'


def test_every_public_name_has_a_row_or_a_reason():
  covered = {row.name for row in ROWS}
  missing = sorted(set(t2t_jax.__all__) - covered - set(EXEMPT))
  assert not missing, f'public names without a row in tests/public_api_table.py: {missing}'
  assert not covered & set(EXEMPT), 'a name is both exempt and in the table'
  assert not (covered | set(EXEMPT)) - set(t2t_jax.__all__), 'rows of names not public'
  assert all(row.klass in CLASSES for row in ROWS)
  assert all(reason for reason in EXEMPT.values())
  assert KNOWN_GAPS <= {(row.name, row.klass) for row in ROWS}


@pytest.fixture(scope='module')
def context():
  return Context()


def _param(row):
  marks = [pytest.mark.xfail(strict=True, reason='a known gap (public_api_table.KNOWN_GAPS)')
           ] if (row.name, row.klass) in KNOWN_GAPS else []
  return pytest.param(row, marks=marks, id=_id(row))


@pytest.mark.parametrize('row', [_param(r) for r in ROWS])
def test_a_bad_argument_is_refused_naming_it(row, context, tmp_path):
  c = context.at(str(tmp_path))
  before = snapshot(tmp_path)
  with pytest.raises(row.raises) as info:
    row.call(c)
  message = str(info.value)
  for word in row.names:
    assert word in message, f'{row.name} ({row.klass}): {word!r} not in {message!r}'
  assert not re.search(r'(^|\s|`)--[a-z]', message), f'a --flag in {message!r}'
  if not row.workdir:
    assert 'workdir' not in message.lower(), message
  assert snapshot(tmp_path) == before, 'something was written'


def _script_command(script, c):
  if script == 'serve.py':
    return [sys.executable, os.path.join(ROOT, 't2t_jax', 'inference', 'portable.py')]
  return [sys.executable, os.path.join(ROOT, script)]


@pytest.mark.parametrize('script,klass,argv,words', SCRIPTS,
                         ids=[f'{s[0]}-{s[1].replace(" ", "_")}-{i}'
                              for i, s in enumerate(SCRIPTS)])
def test_a_script_stops_in_one_line_naming_the_argument(script, klass, argv, words, context,
                                                         tmp_path):
  del klass
  c = context.at(str(tmp_path))
  before = snapshot(tmp_path)
  args = [a.format(tmp=c.tmp, file=c.file) for a in argv]
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  result = subprocess.run(_script_command(script, c) + args, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env, input='')
  assert result.returncode != 0
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  for word in words:
    assert word in last, f'{script}: {word!r} not in {last!r}'
  assert snapshot(tmp_path) == before, 'something was written'
