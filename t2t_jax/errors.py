"""Which exceptions are a user's mistake or a damaged file rather than a bug: main.py prints
them as one line `error: ...` (their messages name the file, line or key and what was
expected) instead of a traceback. Above every package, so that it may name them all."""

import os
import sys
from typing import NoReturn, Tuple, Type


def user_errors() -> Tuple[Type[BaseException], ...]:
  """The exception types main.py reports in one line."""
  # Imported here: main.py asks only once something was raised, and `import t2t_jax.errors`
  # stays as cheap as the packages a caller already loaded.
  # pylint: disable=import-outside-toplevel
  from t2t_jax import config as config_lib
  from t2t_jax.data import corpora, language_tokens, pipeline, token_store, tokenizer
  from t2t_jax.export.common import ExportError
  from t2t_jax.inference import compare, prefixes, score
  from t2t_jax.inspect import attention_mode
  from t2t_jax.plan import report, topology
  from t2t_jax.pretrained.hf_files import PretrainedError
  from t2t_jax.runtime import backends, checkpoint, parallel
  from t2t_jax.storage import textio, workdir
  from t2t_jax.training import plots, train
  return (config_lib.ConfigError, report.PlanError, topology.TopologyError,
          checkpoint.CheckpointError, train.TrainError,
          attention_mode.AttentionInputError, ExportError,
          workdir.WorkdirError, parallel.DistributedError, backends.BackendError,
          plots.PlotError,
          corpora.DataError, pipeline.PipelineError, token_store.TokenStoreError,
          tokenizer.TokenizerError, textio.TextFileError, score.ScoreInputError,
          compare.CompareError, prefixes.PrefixError, PretrainedError,
          language_tokens.LanguageTokenError, FileNotFoundError,
          FileExistsError)


def exit_with(error: BaseException) -> NoReturn:
  """Ends the process with the one line `error: ...` of a `user_errors()` (exit status 1).

  After a write refused for want of space or by a read-only file system the process exits at
  once: what is left to flush (TensorBoard's writer thread and exit handler, orbax's pending
  writes) would only fail again, each with a traceback under the one line.
  """
  from t2t_jax.inference import translate  # pylint: disable=import-outside-toplevel
  from t2t_jax.storage import workdir  # pylint: disable=import-outside-toplevel
  translate.end_progress_line()  # a decode's bar, stopped mid-line
  if not workdir.write_failures_reported():
    sys.exit(f'error: {error}')
  sys.stderr.write(f'error: {error}\n')
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except OSError:
      pass  # stdout on the full disk
  os._exit(1)  # pylint: disable=protected-access
