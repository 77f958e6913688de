"""The rule, for every mode: a read-only or full target stops it before any work in one line
naming the path, with no traceback and nothing left behind (`layout.MODE_WRITES` lists what
each mode writes; docs/reliability.md, "Read-only or full targets").

The file system is made read-only or full under the target by `write_faults` (the tests run
as root, whom `chmod -R a-w` does not stop). Each mode runs against a copy of one tiny trained
workdir (`tiny_workdir`): the workdir itself, or the folder of its `--output`.
"""

import ast
import os
import shutil
import socket

import pytest
import write_faults
from checkpoint_helpers import snapshot
from conftest import ROOT

from t2t_jax.storage import layout


def _main_tables():
  """The command line's MODES and the keys of its MODE_FUNCTIONS (t2t_jax/dispatch.py, which
  main.py runs), read from its source: importing it would parse this process's command line."""
  with open(os.path.join(ROOT, 't2t_jax', 'dispatch.py'), encoding='utf-8') as f:
    tree = ast.parse(f.read())
  tables = {}
  for node in tree.body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
      name = node.targets[0].id
      if name == 'MODES':
        tables[name] = tuple(ast.literal_eval(node.value))
      elif name == 'MODE_FUNCTIONS':
        tables[name] = tuple(ast.literal_eval(key) for key in node.value.keys)
  return tables


MODES = _main_tables()['MODES']
ROWS = {row.mode: row for row in layout.MODE_WRITES}

# What each mode needs besides its target to get as far as writing.
_ARGS = {
    'decode': ['--input={sentences}'],
    'score': ['--input={sentences}', '--targets={sentences}'],
    'attention': ['--input={sentences}'],
    'export': ['--format=stablehlo'],
    'plan': ['--topology=v5e:2x4', '--nosearch_batch', '--noplan_all_shapes'],
}
_REASON = {'EROFS': 'Read-only file system', 'ENOSPC': 'No space left on device'}
_REMEDY = {'EROFS': 'make it writable', 'ENOSPC': 'free space'}


def test_every_mode_of_main_has_a_row():
  tables = _main_tables()
  assert MODES and sorted(tables['MODE_FUNCTIONS']) == sorted(MODES)
  missing = sorted(set(MODES) - set(ROWS))
  assert not missing, f'modes without a row in layout.MODE_WRITES: {missing}'
  assert sorted(ROWS) == sorted(MODES), 'layout.MODE_WRITES has rows of no mode'
  with open(os.path.join(ROOT, 'docs', 'architecture.md'), encoding='utf-8') as f:
    documented = f.read().split('## Files a run writes')[1].split('\n## ')[0]
  for row in layout.MODE_WRITES:
    assert row.target in (layout.WORKDIR_TARGET, layout.OUTPUT_TARGET, layout.NO_TARGET)
    assert row.check and (row.writes or row.target == layout.NO_TARGET), row
    target = f'`{row.target}`' if row.target == layout.OUTPUT_TARGET else row.target or '-'
    assert f'\n| {row.mode} | {target} | ' in documented, f'docs/architecture.md: {row.mode}'


_KEPT_OPEN = []  # sockets holding a port taken for --mode=serve


def _case(row, fault, tiny_workdir, tmp_path):
  """(the folder under which writes fail, argv, the expected last line or None)."""
  target = tmp_path / 'target'
  if row.target == layout.WORKDIR_TARGET:
    shutil.copytree(tiny_workdir, target)
    return target, [f'--workdir={target}', '--config.average_last=1'], (
        f'error: workdir {target} is not writable: {_REASON[fault]}')
  if row.mode == 'serve':  # runs until stopped: here its port is taken, so it stops at once
    shutil.copytree(tiny_workdir, target)
    taken = socket.socket()
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    port = taken.getsockname()[1]
    _KEPT_OPEN.append(taken)
    return target, [f'--workdir={target}', f'--port={port}'], (
        f'error: --port={port}: 127.0.0.1:{port} is in use (another server?); stop it or '
        'choose another --port')
  if row.target == layout.NO_TARGET:  # reads the run (info --workdir), writes nothing
    shutil.copytree(tiny_workdir, target)
    return target, [f'--workdir={target}'], None
  target.mkdir()
  sentences = tmp_path / 'in.txt'
  sentences.write_text('In the beginning\nAmen.\n')
  output = target / 'out'
  args = [arg.format(sentences=sentences) for arg in _ARGS.get(row.mode, [])]
  return target, [f'--workdir={tiny_workdir}', f'--output={output}', *args], (
      f'error: --output={output}: cannot write into {target}: {_REASON[fault]}; '
      f'{_REMEDY[fault]}')


@pytest.mark.slow
@pytest.mark.parametrize('fault', ['EROFS', 'ENOSPC'])
@pytest.mark.parametrize('mode', MODES)
def test_every_mode_stops_in_one_line_on_a_read_only_or_full_target(
    mode, fault, tiny_workdir, tmp_path):
  assert mode in ROWS, f'--mode={mode} has no row in layout.MODE_WRITES: list what it writes'
  target, args, expected = _case(ROWS[mode], fault, tiny_workdir, tmp_path)
  before = snapshot(target)
  result = write_faults.run(fault, str(target), f'--mode={mode}', *args, timeout=300)
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert snapshot(target) == before  # nothing written, nothing partial left
  if expected is None:  # writes nothing: unaffected
    assert result.returncode == 0, result.stderr[-3000:]
    return
  assert result.returncode == 1, result.stderr[-3000:]
  assert result.stderr.splitlines()[-1] == expected, result.stderr[-3000:]
  assert result.stderr.count('error:') == 1 and result.stdout == ''
  # Before any work: no checkpoint read (its log line), nothing decoded (no progress bar),
  # no vocabulary, corpus or step.
  for work in ('inference parameters', 'sentences', 'vocabulary', 'Preparing', 'step'):
    assert work not in result.stderr, result.stderr[-3000:]


def test_an_output_inside_a_file_says_the_file_is_not_a_folder(tmp_path):
  # `--output=FILE/x.txt` was refused as 'FILE/x.txt already exists' (decode's claim).
  from conftest import run_main
  blocker = tmp_path / 'file'
  blocker.write_text('keep me\n')
  output = blocker / 'x.txt'
  result = run_main('--mode=decode', f'--workdir={tmp_path}/run', f'--input={blocker}',
                    f'--output={output}', timeout=300)
  assert result.returncode == 1
  assert result.stderr == (f'error: --output={output}: {blocker} is a file, not a folder; the '
                           'output must go into a folder\n')
  assert os.listdir(tmp_path) == ['file'] and blocker.read_text() == 'keep me\n'


def _full_during_the_work(mode, prefix, tiny_workdir, tmp_path, *args):
  """`--mode=MODE` into `<tmp>/target/out`, its folder writable but the disk full under
  `prefix` (what the mode writes after its work): the result."""
  target = tmp_path / 'target'
  target.mkdir()
  sentences = tmp_path / 'in.txt'
  sentences.write_text('In the beginning\n')
  result = write_faults.run('ENOSPC', str(target / prefix), f'--mode={mode}',
                            f'--workdir={tiny_workdir}', f'--output={target / "out"}',
                            *[arg.format(sentences=sentences) for arg in args], timeout=300)
  assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert result.stderr.count('error:') == 1 and result.stdout == ''
  assert os.listdir(target) == []  # no output, no temporary folder, no probe
  return target / 'out', result.stderr.splitlines()[-1]


@pytest.mark.slow
def test_export_onto_a_disk_that_fills_fails_in_one_line_naming_the_file(tiny_workdir,
                                                                          tmp_path):
  # It ended in a 24-line traceback from write_artifact (Errno 28).
  output, last = _full_during_the_work('export', '.out.', tiny_workdir, tmp_path,
                                       '--format=stablehlo')
  assert last.startswith(f'error: cannot write {output}/decode_') and last.endswith(
      '.stablehlo: No space left on device; free space'), last


@pytest.mark.slow
def test_attention_onto_a_disk_that_fills_fails_in_one_line_and_leaves_nothing(
    tiny_workdir, tmp_path):
  # It ended in a traceback and left a partial --output folder, which a rerun then refused.
  from t2t_jax.inspect import attention_mode
  output, last = _full_during_the_work('attention', 'out/sentence_', tiny_workdir, tmp_path,
                                       '--input={sentences}')
  assert last == (f'error: cannot write {output}/sentence_1/encoder_layer1.png: No space left '
                  'on device; free space'), last
  attention_mode.check_output(str(output))  # the same command may run again
