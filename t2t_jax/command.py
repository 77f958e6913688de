"""The installed command `t2t-jax` (pyproject's `[project.scripts]`), and what `python main.py`
runs: `t2t-jax --mode=decode --workdir=W ...` is `python main.py --mode=decode --workdir=W ...`,
flag for flag (the flags and modes: `t2t_jax/dispatch.py`); `t2t-jax --version` prints the
installed version.
"""

import atexit
import gc
import sys


def version() -> str:
  """`t2t_jax.__version__`, which pyproject.toml reads as the distribution's."""
  import t2t_jax  # pylint: disable=import-outside-toplevel
  return t2t_jax.__version__


def entry() -> None:
  """Runs the command line in `sys.argv`."""
  if sys.argv[1:] == ['--version']:
    print(f't2t-jax {version()}')
    return
  # First, before the imports: the command again with huge pages for malloc (a third of the
  # embedded default's CPU time went to page faults; t2t_jax/runtime/huge_pages.py).
  from t2t_jax.runtime import huge_pages  # pylint: disable=import-outside-toplevel
  try:
    huge_pages.reexec()
  except huge_pages.HugePagesError as e:
    sys.exit(f'error: {e}')
  # Python's cycle collector walks every live object on each full collection, and the imports
  # of `dispatch` make ~175k (jax, flax, TFDS, orbax): collections during the imports, during
  # the run and at interpreter exit took ~0.9 s of a 3.6 s tiny train or decode command
  # (docs/performance.md, "A command's start and end"). Not collecting while importing, then
  # freezing what the imports made (alive until exit anyway), spares every later collection
  # from walking it. `gc.freeze` again at exit: the interpreter's own collections while it
  # tears itself down then walk nothing either.
  gc.disable()
  from t2t_jax import dispatch  # pylint: disable=import-outside-toplevel  (defines the flags)
  gc.freeze()
  gc.enable()
  atexit.register(gc.freeze)
  dispatch.run()
