"""Starting native backends quietly: what libtpu prints off a TPU VM goes to the debug log.

Used by `cli.start_backends` (every mode that runs jax) and `plan.topology` (building a TPU
topology on a machine without one).
"""

import contextlib
import logging
import os
import sys
import tempfile


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
