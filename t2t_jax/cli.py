"""Command-line checks that turn a user's mistake into one line `error: ...` before jax starts.

config_flags loads `--config=FILE[:ARG]` and defines the `--config.KEY` override flags while
main.py is imported; it reports a missing file, a bad Table 3 row or a sub-key of a plain value
as a traceback. absl prints its flag errors on two lines and exits 1 after `--help`. The
functions here run first (`check_argv`), replace absl's flag parser (`parse_flags`), check the
paths a mode will use (`check_paths`) and keep library noise off the console
(`QuietLibraries`) and off stdout (`native_stdout_to_stderr`).
"""

import atexit
import glob
import importlib.machinery
import importlib.util
import inspect
import logging
import os
import re
import signal
import sys
from typing import List, NoReturn, Optional, Sequence

import ml_collections
from absl import flags
from etils import epath

from t2t_jax import config as config_lib
from t2t_jax.runtime import backends, interruptible
from t2t_jax.runtime.backends import native_stderr_to_debug_log
from t2t_jax.storage import textio
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.storage.workdir import WorkdirError

_HELP = re.compile(r'--?(help|helpshort|helpfull|helpxml|\?)')


def _flag_arguments(argv: Sequence[str]) -> List[str]:
  """The arguments absl reads as flags: those before a bare '--'."""
  args = list(argv[1:])
  return args[:args.index('--')] if '--' in args else args


def override_paths(argv: Sequence[str]) -> List[str]:
  """The dotted PATHs of `--config.PATH=VALUE` arguments, in order."""
  return [arg.lstrip('-')[len('config.'):].split('=', 1)[0] for arg in _flag_arguments(argv)
          if re.match(r'--?config\.', arg)]


def config_argument(argv: Sequence[str]) -> Optional[str]:
  """The value of the last `--config=FILE[:ARG]` (or `--config FILE`), None if there is none."""
  args, value = _flag_arguments(argv), None
  for i, arg in enumerate(args):
    name, eq, rest = arg.lstrip('-').partition('=')
    if arg.startswith('-') and name == 'config':
      value = rest if eq else (args[i + 1] if i + 1 < len(args) else None)
  return value


def _load_module(path: str):
  """Executes a config file as a module, as config_flags does (any extension)."""
  loader = importlib.machinery.SourceFileLoader('_t2t_jax_config_check', path)
  module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
  loader.exec_module(module)
  return module


def check_config_file(value: str) -> ml_collections.ConfigDict:
  """Loads `--config=value` (`FILE` or `FILE:ARG`) and returns `get_config([ARG])`.

  Raises:
    ConfigError: one line naming the file (and ARG) and what was expected.
  """
  path, has_arg, arg = value.partition(':')
  where = f'--config={value}'
  if os.path.isdir(path):
    files = sorted(n for n in os.listdir(path) if n.endswith('.py') and n != '__init__.py')
    raise config_lib.ConfigError(
        f'{where}: {path} is a directory; expected a Python config file'
        + (f' such as {os.path.join(path, files[0])}' if files else ''))
  if not os.path.isfile(path):
    raise config_lib.ConfigError(f'{where}: no such file {path!r}; expected a Python config '
                                 'file such as configs/wmt_base.py or configs/table3.py:B1')
  try:
    module = _load_module(path)
  except SyntaxError as e:
    raise config_lib.ConfigError(f'{where}: {path} line {e.lineno}: {e.msg}; expected a '
                                 'Python file defining get_config()') from None
  except Exception as e:  # pylint: disable=broad-except  (a user's file can raise anything)
    raise config_lib.ConfigError(f'{where}: {path} fails to load: {type(e).__name__}: {e}'
                                 ) from None
  get_config = getattr(module, 'get_config', None)
  if not callable(get_config):
    raise config_lib.ConfigError(f'{where}: {path} defines no get_config() function')
  args = (arg,) if has_arg else ()
  try:
    inspect.signature(get_config).bind(*args)
  except TypeError:
    raise config_lib.ConfigError(
        f'{where}: the get_config() of {path} takes no argument; use --config={path}'
        if has_arg else f'{where}: the get_config() of {path} needs an argument; use '
        f'--config={path}:ARG') from None
  try:
    config = get_config(*args)
  except ValueError as e:  # ConfigError included: the file's own message names the problem
    raise config_lib.ConfigError(f'{where}: {e}') from None
  except Exception as e:  # pylint: disable=broad-except
    raise config_lib.ConfigError(f'{where}: get_config() raised {type(e).__name__}: {e}'
                                 ) from None
  if not isinstance(config, ml_collections.ConfigDict):
    raise config_lib.ConfigError(f'{where}: get_config() returned {type(config).__name__}, '
                                 'expected an ml_collections.ConfigDict')
  return config


def check_argv(argv: Sequence[str], default_config: str) -> None:
  """Exits with one line `error: ...` for a bad `--config` file or `--config.KEY`.

  Runs before config_flags reads the command line (it defines the override flags and loads
  the file while main.py is imported).
  """
  try:
    value = config_argument(argv)
    check_config_file(default_config if value is None else value)
    config_lib.check_override_paths(override_paths(argv))
  except config_lib.ConfigError as e:
    sys.exit(f'error: {e}')


def _asked_for_help(argv: Sequence[str]) -> bool:
  return any(_HELP.fullmatch(arg) for arg in _flag_arguments(argv))


def last_tuple_override_wins(argv: Sequence[str]) -> List[str]:
  """`argv` without the earlier `--config.KEY=VALUE` (or `--config.KEY VALUE`) of a tuple KEY
  given more than once.

  config_flags defines tuple keys (`bucket_lengths`) as absl multi-flags, which concatenate
  repeated values: `--config.bucket_lengths=(16,32) --config.bucket_lengths=(8,16)` would give
  (16, 32, 8, 16). A repeated override replaces the earlier ones, as it does for scalars.
  """
  tuple_keys = config_lib.tuple_keys()
  flag_count = len(_flag_arguments(argv))
  spans = {}  # path -> the argv index ranges of its occurrences, in order
  i = 1
  while i <= flag_count:
    arg = argv[i]
    match = re.match(r'--?config\.([^=]+)(=?)', arg)
    width = 1
    if match and match.group(1) in tuple_keys:
      width = 1 if match.group(2) else 2  # a tuple flag takes the next argument as its value
      spans.setdefault(match.group(1), []).append(range(i, min(i + width, flag_count + 1)))
    i += width
  dropped = {index for occurrences in spans.values() for span in occurrences[:-1]
             for index in span}
  return [arg for index, arg in enumerate(argv) if index not in dropped]


def parse_flags(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS) -> List[str]:
  """absl's flag parsing (`app.run(main, flags_parser=parse_flags)`), with `-h` for `--help`,
  exit status 0 after help, the last of repeated tuple overrides winning and a flag error as
  one line `error: ...` (exit status 1)."""
  argv = [argv[0]] + ['--help' if arg == '-h' else arg for arg in argv[1:]]
  argv = last_tuple_override_wins(argv)
  try:
    return flag_values(argv)
  except flags.Error as e:
    sys.exit(f'error: {e}')
  except SystemExit as e:
    if e.code == 1 and _asked_for_help(argv):  # absl exits 1 after printing the help
      sys.exit(0)
    raise


def check_paths(workdir: Optional[str], input_path: Optional[str]) -> None:
  """Refuses a `--workdir` that is a file and an `--input` that is not a readable file.

  Raises:
    WorkdirError, FileNotFoundError, TextFileError: naming the flag, the path and what was
      expected; nothing is created.
  """
  # Local or remote (gs://...) paths alike.
  broken = workdir and workdir_lib.broken_symlink(workdir)
  if broken:  # every mode: a reading one would otherwise say 'no checkpoint'
    raise WorkdirError(f'--workdir={workdir}: {broken}')
  if workdir and epath.Path(workdir).exists() and not epath.Path(workdir).is_dir():
    raise WorkdirError(f'--workdir={workdir} is a file; expected a directory (one that does '
                       'not exist yet is created)')
  if input_path and input_path != '-':  # '-': standard input, decoded as it arrives
    if not epath.Path(input_path).exists():
      raise FileNotFoundError(f'--input={input_path}: no such file')
    if epath.Path(input_path).is_dir():
      raise textio.TextFileError(f'--input={input_path} is a directory; expected a UTF-8 text '
                                 'file with one sentence per line')


class QuietLibraries(logging.Filter):
  """Drops library chatter from the console: orbax's INFO lines (several per checkpoint) and
  jax's INFO line about backends it could not start (`Unable to initialize backend 'tpu'`
  on every machine without one). Warnings and errors always show."""

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.WARNING:
      return True
    if '/orbax/' in record.pathname:
      return False
    return not (record.name.startswith('jax') and
                str(record.msg).startswith('Unable to initialize backend'))


def native_stdout_to_stderr() -> None:
  """From now on what native code writes to stdout (file descriptor 1) goes to stderr, while
  Python's `sys.stdout` keeps the real stdout.

  gloo, the CPU collectives of multi-process runs, prints `[Gloo] Rank 0 is connected to 1
  peer ranks ...` from C++ each time it connects a group of processes, which happens during
  the run and not only when it starts; stdout carries only what the user asked for (the
  translations of `--mode=decode` without `--output`, the JSON of `--mode=eval`).
  """
  sys.stdout.flush()
  stdout = sys.stdout
  real_stdout = os.dup(1)
  os.dup2(2, 1)
  sys.stdout = os.fdopen(real_stdout, 'w', buffering=1 if stdout.line_buffering else -1,
                         encoding=stdout.encoding, errors=stdout.errors)


def start_backends() -> None:
  """Starts jax's backends now; off a TPU VM with libtpu installed, without libtpu's noise.
  A JAX_PLATFORMS naming a platform this machine lacks raises `backends.BackendError`.

  A TPU VM has TPU device files (/dev/accel*, /dev/vfio/N): there libtpu's messages matter
  and stay on the console.
  """
  import jax  # pylint: disable=import-outside-toplevel  (after the flags that configure it)
  try:
    if glob.glob('/dev/accel*') or glob.glob('/dev/vfio/[0-9]*'):
      jax.devices()
      return
    with native_stderr_to_debug_log('starting jax backends'):
      jax.devices()
  except (AssertionError, RuntimeError) as e:  # what jax raises for JAX_PLATFORMS (0.10.2)
    error = backends.platform_error(jax.config.jax_platforms, e)
    if error is None:
      raise
    raise error from None


def raise_on_sigterm() -> None:
  """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so that each mode's own cleanup runs:
  decode removes its still-empty claim on `--output`, attention the output it began, export
  its temporary folder. Without it, SIGTERM ends the process before any of that, and a rerun
  of the same command is refused (the claimed output exists). For every mode but train,
  whose `PreemptionHandler` replaces it to finish the step and checkpoint first.

  Both signals go through `interruptible.raise_on_signals`, which never loses one: a
  KeyboardInterrupt raised inside a finalizer (where Python prints and drops it) is raised
  again, an export checks before its output takes its name, and a command that received one
  never exits 0: should the interrupt still have been swallowed where nothing reported it,
  the process ends at exit with one line saying so and status 130 (`_exit_if_signalled`).
  """
  interruptible.raise_on_signals((signal.SIGINT, signal.SIGTERM))
  atexit.unregister(_exit_if_signalled)  # once, however often this is called
  atexit.register(_exit_if_signalled)


def _interrupted_line(name: str, kept: str = '') -> str:
  """The line of an interrupted command; `kept`: what it had written and keeps (a streaming
  decode's translations, a finished training run), said instead of 'nothing kept'."""
  if kept:
    return f'error: interrupted by {name}; {kept}\n'
  return (f'error: interrupted by {name}; what this command had not finished is not kept: '
          'run the same command again\n')


def _signal_name(signum: int) -> str:
  return str(interruptible.interrupt(signum)) or 'SIGINT (Ctrl-C)'


def _exit_if_signalled() -> None:
  """At exit (atexit), after a signal whose KeyboardInterrupt never reached
  `exit_interrupted` (swallowed where nothing reported it, so the command ran on): one line,
  exit status 130, at once (`os._exit`: atexit cannot change the status otherwise; the
  atexit functions registered before this one do not run)."""
  signum = interruptible.signal_received()
  if signum is None or interruptible.settled():
    return
  interruptible.settle()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  try:
    sys.stderr.write(f'error: interrupted by {_signal_name(signum)}, which this command '
                     'noticed only as it ended (exit status 130): check what it wrote before '
                     'using it\n')
    sys.stderr.flush()
  finally:
    os._exit(130)  # pylint: disable=protected-access


def exit_interrupted(interrupt: KeyboardInterrupt) -> NoReturn:
  """The one line of a command stopped by Ctrl-C or SIGTERM (exit status 130, the shell's
  for SIGINT), instead of the traceback of wherever it was."""
  interruptible.settle()  # no signal raised again while the process ends
  from t2t_jax.inference import translate  # pylint: disable=import-outside-toplevel
  translate.end_progress_line()  # a decode's bar, stopped mid-line
  name = str(interrupt) or 'SIGINT (Ctrl-C)'
  sys.stderr.write(_interrupted_line(name, getattr(interrupt, 'kept', '')))
  sys.exit(130)
