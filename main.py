"""t2t_jax command line: `python main.py --config=configs/wmt_base.py --workdir=DIR --mode=...`.

Dispatch only; every mode lives in the library. With no --config the embedded default
`configs/quickstart.py` (the bundled EN->ES corpus) is used.
"""

import os
import sys

import logging as logging_std

from absl import app, flags, logging
from ml_collections import config_flags

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
  sys.path.insert(0, _HERE)

from t2t_jax import config as config_lib  # noqa: E402

MODES = ('train', 'info')


def _check_override_keys(argv) -> None:
  """Refuses `--config.KEY=...` for unknown keys: config_flags would raise a raw traceback
  while the flag is being defined, before absl can report anything."""
  keys = [arg[len('--config.'):].split('=', 1)[0].split('.', 1)[0]
          for arg in argv[1:] if arg.startswith('--config.')]
  try:
    config_lib.unknown_keys(keys)
  except config_lib.ConfigError as e:
    sys.exit(f'error: {e}')


_check_override_keys(sys.argv)
config_flags.DEFINE_config_file('config', os.path.join(_HERE, 'configs', 'quickstart.py'),
                                'Configuration file (configs/*.py[:ROW]).', lock_config=True)
flags.DEFINE_string('workdir', None, 'Directory for the vocabulary, checkpoints and metrics.')
flags.DEFINE_enum('mode', 'train', MODES, 'What to do.')
FLAGS = flags.FLAGS


class _QuietLibraries(logging_std.Filter):
  """Drops the INFO chatter of orbax (several lines per checkpoint); warnings still show."""

  def filter(self, record: logging_std.LogRecord) -> bool:
    return record.levelno >= logging_std.WARNING or '/orbax/' not in record.pathname


def main(argv) -> None:
  logging.get_absl_handler().addFilter(_QuietLibraries())
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  config = config_lib.validate(FLAGS.config)
  if FLAGS.mode == 'info':
    from t2t_jax import info
    print(info.describe(config))
    return
  if not FLAGS.workdir:
    raise app.UsageError(f'--workdir is required for --mode={FLAGS.mode}')
  if FLAGS.mode == 'train':
    from t2t_jax import train
    train.train(config, FLAGS.workdir)


def _user_errors():
  """Exceptions that mean bad input, reported as one line instead of a traceback."""
  from t2t_jax import checkpoint, train
  from t2t_jax.data import corpora, pipeline, tokenizer
  return (config_lib.ConfigError, checkpoint.CheckpointError, train.TrainError,
          corpora.DataError, pipeline.PipelineError, tokenizer.TokenizerError)


if __name__ == '__main__':
  try:
    app.run(main)
  except _user_errors() as e:
    sys.exit(f'error: {e}')
