"""The house rules the layout promises (docs/architecture.md): the package
layers hold (import-linter's contracts in pyproject.toml), and modules and functions stay
small enough to read (no file over 400 lines, no function over 60)."""

import ast
import os
import subprocess
import sys

from conftest import ROOT

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources():
  yield os.path.join(ROOT, 'main.py')
  for folder, _, names in os.walk(os.path.join(ROOT, 't2t_jax')):
    yield from (os.path.join(folder, n) for n in sorted(names) if n.endswith('.py'))


def test_import_layers_hold():
  # A child process, so grimp reads this checkout's t2t_jax (not an installed copy).
  code = 'import sys; from importlinter import cli; sys.exit(cli.lint_imports(no_cache=True))'
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, 'PYTHONPATH': ROOT}, timeout=120)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert 'BROKEN' not in result.stdout and ' 0 broken' in result.stdout


def _too_long(path):
  with open(path, encoding='utf-8') as f:
    source = f.read()
  found = []
  if source.count('\n') > MAX_FILE_LINES:
    found.append(f'{path}: {source.count(chr(10))} lines')
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      lines = node.end_lineno - node.lineno + 1
      if lines > MAX_FUNCTION_LINES:
        found.append(f'{path}:{node.lineno} {node.name}: {lines} lines')
  return found


def test_files_and_functions_are_small():
  found = [problem for path in _sources() for problem in _too_long(path)]
  assert not found, 'split these into named steps:\n' + '\n'.join(found)


def test_size_check_sees_a_long_function(tmp_path):
  body = ''.join(f'  x{i} = {i}\n' for i in range(MAX_FUNCTION_LINES))
  path = tmp_path / 'long.py'
  path.write_text(f'def short():\n  return 1\n\n\ndef long():\n{body}  return 0\n')
  assert _too_long(str(path)) == [f'{path}:5 long: {MAX_FUNCTION_LINES + 2} lines']
