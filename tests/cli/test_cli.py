"""Command-line checks: argv reading, config files, paths and the console filter."""

import logging
import os
import subprocess
import sys

import jax
import pytest

from conftest import run_main
from t2t_jax import cli, config as config_lib
from t2t_jax.runtime import backends
from t2t_jax.storage import textio
from t2t_jax.storage.workdir import WorkdirError


def test_argv_reading_follows_absl():
  argv = ['main.py', '--config', 'a.py', '--config.d_model=3', '-config.beam_size', '2',
          '--config=b.py:B1', '--', '--config=c.py', '--config.x=1']
  assert cli.config_argument(argv) == 'b.py:B1'  # the last one before '--' wins
  assert cli.override_paths(argv) == ['d_model', 'beam_size']
  assert cli.config_argument(['main.py', '--mode=info']) is None
  assert cli.override_paths(['main.py', '--config.num_layers.x=3']) == ['num_layers.x']


def test_a_good_config_file_and_row_load():
  assert cli.check_config_file('configs/table3.py:B1').d_k == 16
  assert cli.check_config_file('configs/wmt_base.py').d_model == 512


@pytest.mark.parametrize('name,text,arg,message', [
    (None, None, '', r"no such file '.*missing.py'; expected a Python config file"),
    ('', None, '', r'is a directory; expected a Python config file such as .*/a.py$'),
    ('bad.py', 'def get_config(:\n', '', r'bad.py line 1: invalid syntax'),
    ('noget.py', 'x = 1\n', '', r'noget.py defines no get_config\(\) function$'),
    ('plain.py', 'import ml_collections\ndef get_config():\n'
     '  return ml_collections.ConfigDict()\n', ':A1',
     r'get_config\(\) of .*plain.py takes no argument; use --config=.*plain.py$'),
    ('dict.py', 'def get_config():\n  return {}\n', '',
     r'get_config\(\) returned dict, expected an ml_collections.ConfigDict$'),
    ('boom.py', 'def get_config():\n  return 1 / 0\n', '',
     r'get_config\(\) raised ZeroDivisionError: division by zero$'),
])
def test_bad_config_files_are_named(tmp_path, name, text, arg, message):
  (tmp_path / 'a.py').write_text('')
  path = tmp_path / ('missing.py' if name is None else name)
  if text is not None:
    path.write_text(text)
  with pytest.raises(config_lib.ConfigError, match=message) as raised:
    cli.check_config_file(f'{path}{arg}')
  assert str(raised.value).startswith(f'--config={path}{arg}: ')


def test_table3_row_errors_list_the_rows():
  with pytest.raises(config_lib.ConfigError) as raised:
    cli.check_config_file('configs/table3.py:b1')
  assert str(raised.value) == (
      "--config=configs/table3.py:b1: unknown Table 3 row 'b1' (rows are case-sensitive: did "
      "you mean 'B1'?); valid rows: base, A1, A2, A3, A4, B1, B2, C1, C2, C3, C4, C5, C6, C7, "
      'D1, D2, D3, D4, E, big')


def test_paths_are_checked_without_creating_anything(tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('keep')
  with pytest.raises(WorkdirError, match=rf'^--workdir={blocker} is a file; expected a dir'):
    cli.check_paths(str(blocker), None)
  with pytest.raises(textio.TextFileError, match=rf'^--input={tmp_path} is a directory'):
    cli.check_paths(str(tmp_path / 'run'), str(tmp_path))
  with pytest.raises(FileNotFoundError, match=rf'^--input={tmp_path}/nope: no such file$'):
    cli.check_paths(None, str(tmp_path / 'nope'))
  cli.check_paths(str(tmp_path / 'run'), str(blocker))  # both fine
  assert os.listdir(tmp_path) == ['file'] and blocker.read_text() == 'keep'
  os.symlink(tmp_path / 'gone', tmp_path / 'link')  # issue 43 item 3.13, for every mode
  with pytest.raises(WorkdirError, match=rf'^--workdir={tmp_path}/link: {tmp_path}/link is a '
                     rf'symbolic link to {tmp_path}/gone, which does not exist; '):
    cli.check_paths(str(tmp_path / 'link'), None)


def _record(name, level, msg, pathname='x.py'):
  return logging.LogRecord(name, level, pathname, 1, msg, (), None)


_NO_TPU = ("Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so: "
           'libtpu.so: cannot open shared object file')  # jax logs it formatted, at INFO


def test_console_filter_drops_library_noise_only():
  keep = cli.QuietLibraries().filter
  assert not keep(_record('jax._src.xla_bridge', logging.INFO, _NO_TPU))
  assert not keep(_record('absl', logging.INFO, 'saving', '/site-packages/orbax/x.py'))
  assert keep(_record('jax._src.xla_bridge', logging.WARNING, _NO_TPU))
  assert keep(_record('jax._src.xla_bridge', logging.INFO, 'other'))
  assert keep(_record('absl', logging.INFO, 'step 10'))


@pytest.mark.parametrize('overrides,expected', [
    (['--config.bucket_lengths=(16,32)', '--config.bucket_lengths=(8,16)'], (8, 16)),
    (['--config.bucket_lengths', '(16,32)', '--config.max_length=16',
      '-config.bucket_lengths=(8,16,24)'], (8, 16, 24)),
    (['--config.bucket_lengths=(16,32)'], (16, 32)),
])
def test_the_last_of_repeated_tuple_overrides_wins(overrides, expected):
  from absl import flags
  from ml_collections import config_flags
  argv = ['main.py', '--config=configs/quickstart.py', *overrides]
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', flag_values=flag_values, sys_argv=argv)
  assert cli.parse_flags(argv, flag_values) == ['main.py']
  assert flag_values.config.bucket_lengths == expected
  if len(overrides) > 2:
    assert flag_values.config.max_length == 16  # the arguments between are kept


def test_native_stdout_goes_to_stderr_and_python_keeps_stdout():
  script = ('import os, sys\n'
            'from t2t_jax import cli\n'
            'print("before", flush=True)\n'
            'cli.native_stdout_to_stderr()\n'
            'os.write(1, b"[Gloo] Rank 0 is connected\\n")\n'  # what C++ writes to fd 1
            'print("translation \\u00e9")\n'
            'sys.stdout.write("last\\n")\n')
  result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          env=dict(os.environ, PYTHONIOENCODING='utf-8'), timeout=120)
  assert result.returncode == 0, result.stderr
  assert result.stdout == 'before\ntranslation \u00e9\nlast\n'
  assert '[Gloo] Rank 0 is connected\n' in result.stderr


def test_a_platform_this_machine_lacks_is_one_line_naming_it_and_the_remedy():
  """Issue 43 item 3.6: JAX_PLATFORMS=cuda without CUDA ended in a bare AssertionError of
  jax's, JAX_PLATFORMS=tpu off a TPU VM in two chained tracebacks."""
  result = run_main('--mode=info', env=dict(os.environ, JAX_PLATFORMS='cuda'), timeout=300)
  assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert result.stderr.strip().splitlines()[-1] == (
      'error: JAX_PLATFORMS=cuda: jax cannot start cuda here (this machine shows no NVIDIA '
      f'GPU); to use cuda, on a machine with an NVIDIA GPU, pip install "jax[cuda13]=='
      f'{jax.__version__}" (or jax[cuda12]); or unset JAX_PLATFORMS to run on the devices jax '
      'finds (the CPU at least)')
  tpu = RuntimeError("Unable to initialize backend 'tpu': NOT_FOUND: TPU initialization "
                     "failed: No jellyfish device found. (set JAX_PLATFORMS='' to "
                     'automatically choose an available backend)')
  assert str(backends.platform_error('tpu', tpu)) == (
      'JAX_PLATFORMS=tpu: jax cannot start tpu here (NOT_FOUND: TPU initialization failed: '
      f'No jellyfish device found); to use tpu, on a Cloud TPU VM, pip install "jax[tpu]=='
      f'{jax.__version__}"; or unset JAX_PLATFORMS to run on the devices jax finds (the CPU '
      'at least)')
  assert backends.platform_error('', tpu) is None  # jax's own choice failing: not the user's
  assert backends.platform_error('cpu', ValueError('x')) is None


@pytest.mark.parametrize('stop', ['interrupted', 'user_error'])
def test_a_command_stopped_mid_progress_bar_writes_its_error_on_a_line_of_its_own(
    capsys, stop):
  """A decode's progress bar is redrawn in place (no newline until the last sentence); the
  one line of a command stopped before that used to trail the bar on the same line."""
  from t2t_jax import errors  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference import translate  # pylint: disable=import-outside-toplevel
  translate.print_progress(40, 20_000, 0.5)
  with pytest.raises(SystemExit) as stopped:
    if stop == 'interrupted':
      cli.exit_interrupted(KeyboardInterrupt('SIGTERM'))
    else:
      errors.exit_with(ValueError('the disk is full'))
  bar = f'\r[{"." * 30}] 40/20000 sentences 80.0 sent/s\n'
  if stop == 'interrupted':
    assert capsys.readouterr().err == bar + (
        'error: interrupted by SIGTERM; what this command had not finished is not kept: run '
        'the same command again\n')
  else:  # Python writes the SystemExit's text after what is on stderr now
    assert capsys.readouterr().err == bar and stopped.value.code == 'error: the disk is full'
  # A finished bar has its newline already: nothing more is added.
  translate.print_progress(2, 2, 1.0)
  translate.end_progress_line()
  assert capsys.readouterr().err.endswith('2/2 sentences 2.0 sent/s\n')
