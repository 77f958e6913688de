"""Starting native backends quietly: what libtpu prints off a TPU VM goes to the debug log.

Used by `cli.start_backends` (every mode that runs jax) and `plan.topology` (building a TPU
topology on a machine without one). `platform_error`: a JAX_PLATFORMS that names a platform
this machine cannot start, in one line. `with_autotune_level`: XLA_FLAGS for training a small
model on a GPU, whose kernels XLA's autotuner cannot make worth its compile time.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile
from typing import Optional


@contextlib.contextmanager
def native_stderr_to_debug_log(what: str):
  """Sends what native code writes to stderr (file descriptor 2) meanwhile to the debug log.

  libtpu, installed (requirements-tpu.txt) on a machine that is not a TPU VM, prints warnings
  about TPU_ACCELERATOR_TYPE and worker hostnames when jax starts its backends or builds a
  topology; they say nothing to our users.
  """
  with tempfile.TemporaryFile(mode='w+b') as sink:
    saved = os.dup(2)
    sys.stderr.flush()
    os.dup2(sink.fileno(), 2)
    try:
      yield
    finally:
      os.dup2(saved, 2)
      os.close(saved)
      sink.seek(0)
      text = sink.read().decode('utf-8', 'replace').strip()
      if text:
        logging.getLogger(__name__).debug('native stderr while %s:\n%s', what, text)


class BackendError(RuntimeError):
  """JAX_PLATFORMS names a platform jax cannot start on this machine."""


def _remedy(platform: str, version: str) -> str:
  """How to get jax's build for `platform` (docs/install.md, "Installing for a GPU or a TPU")."""
  install = {
      'cuda': f'on a machine with an NVIDIA GPU, pip install "jax[cuda13]=={version}" (or '
              'jax[cuda12])',
      'rocm': f'on a machine with an AMD GPU, pip install "jax[rocm7-local]=={version}"',
      'tpu': f'on a Cloud TPU VM, pip install "jax[tpu]=={version}"',
  }.get(platform)
  return (f'to use {platform}, {install}' if install else
          "name one of jax's platforms (cpu, cuda, rocm, tpu)")


def platform_error(requested: Optional[str], error: BaseException) -> Optional[BackendError]:
  """The one-line BackendError of jax failing to start the platforms `requested` (the value
  of JAX_PLATFORMS), or None where none was requested (then `error` is not the user's).

  jax 0.10.2 fails in two ways: a platform it tried raises RuntimeError("Unable to initialize
  backend 'tpu': ... (set JAX_PLATFORMS='' ...)"), chained to libtpu's own error; a platform
  it skips (cuda where no NVIDIA GPU shows) leaves it none, and it asserts.
  """
  if not requested:
    return None
  import jax  # pylint: disable=import-outside-toplevel
  match = re.match(r"Unable to initialize backend '([^']+)': (.*?)"
                   r"(?: \(set JAX_PLATFORMS=.*)?$", str(error), re.S)
  if match:
    platform, why = match.group(1), match.group(2).strip().splitlines()[0].rstrip('.')
  elif isinstance(error, AssertionError):
    names = [name.strip() for name in requested.split(',')]
    platform = 'cuda' if {'cuda', 'gpu'} & set(names) else names[0]
    why = ('this machine shows no NVIDIA GPU' if platform == 'cuda'
           else 'jax started none of them')
  else:
    return None
  return BackendError(
      f'JAX_PLATFORMS={requested}: jax cannot start {platform} here ({why}); '
      f'{_remedy(platform, jax.__version__)}; or unset JAX_PLATFORMS to run '
      'on the devices jax finds (the CPU at least)')


# XLA's GPU compiler times candidate kernels for each GEMM and fusion of a program (level 4 by
# default). At the embedded default's d_model 128 a GEMM takes microseconds, so the search
# cannot pay for itself: on one H200 the train step alone autotuned for 46 s of the whole
# command's 166 s (docs/performance.md, issue 55). Level 0 keeps XLA's default kernels.
AUTOTUNE_FLAG = '--xla_gpu_autotune_level'
SMALL_MODEL_D_MODEL = 256


def with_autotune_level(xla_flags: str, d_model: Optional[int]) -> str:
  """`xla_flags` (XLA_FLAGS' value) with `--xla_gpu_autotune_level=0` added for a model of
  d_model <= 256; unchanged for a larger or unknown model, or where the flags set the level
  already (the user's choice wins). Other backends' XLA parses the flag and ignores it."""
  if d_model is None or d_model > SMALL_MODEL_D_MODEL or AUTOTUNE_FLAG in xla_flags:
    return xla_flags
  return f'{xla_flags} {AUTOTUNE_FLAG}=0'.strip()
