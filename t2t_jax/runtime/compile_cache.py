"""A persistent cache of compiled XLA programs, so a restarted job does not compile again.

Compiling the base model's train step takes ~90 s on a 2-core CPU (one compilation per batch
shape, see `train.py`), and every resume, eval and decode job used to pay it again. JAX's
persistent compilation cache stores each compiled program on disk, keyed by the program, the
jax/XLA versions, the XLA flags and the device, so a second process with the same shapes loads
it instead (measured: the tiny train step 15.6 s -> 2.0 s). Compilations longer than
`MIN_COMPILE_SECONDS` (0.1 s; JAX's default is 1 s) are stored.

The cache holds executable code: keep it in a directory only you can write to (the default is
in your home directory).
"""

import os
from typing import Optional

from absl import logging

ENV_VAR = 'T2T_COMPILATION_CACHE_DIR'
DEFAULT_DIR = os.path.join('~', '.cache', 't2t_jax', 'xla')
# The embedded default's decode programs compile in well under JAX's default threshold (1 s):
# 9 compilations, 3.7 s in all, that every decode process paid again (bundled test set: 23.2 s
# -> 19.7 s from the second process on, 9 entries, 1.1 MB). JAX's own
# JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS, when set, wins.
MIN_COMPILE_SECONDS = 0.1


def default_dir() -> str:
  """`$T2T_COMPILATION_CACHE_DIR` if set (empty: off), else `~/.cache/t2t_jax/xla`."""
  return os.environ.get(ENV_VAR, DEFAULT_DIR)


def enable(path: Optional[str]) -> Optional[str]:
  """Turns the cache on at `path` ('' or None: off); call before the first compilation.

  A directory that cannot be created or written is not an error (the job runs, compiling as
  usual): a warning names it. If JAX's own `JAX_COMPILATION_CACHE_DIR` is set it wins.

  Returns:
    The directory in use, or None when the cache is off.
  """
  import jax
  if os.environ.get('JAX_COMPILATION_CACHE_DIR'):
    return os.environ['JAX_COMPILATION_CACHE_DIR']
  if not path:
    return None
  path = os.path.abspath(os.path.expanduser(path))
  try:
    os.makedirs(path, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
      raise PermissionError(f'{path} is not writable')
  except OSError as e:
    logging.warning('compilation cache off: cannot use %s (%s); pass --compilation_cache= to '
                    'silence this, or a writable directory', path, e)
    return None
  jax.config.update('jax_compilation_cache_dir', path)
  if 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS' not in os.environ:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', MIN_COMPILE_SECONDS)
  return path
