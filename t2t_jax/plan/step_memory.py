"""`--mode=info`'s compiled part: the train step compiled for the run's mesh on this machine's
devices, and what XLA's memory analysis says it needs per device (`compile.Run`, the same
program training runs, at the largest bucket's batch).

Temporaries are the step's activations and workspace; the peak adds the arguments (training
state and batch), the outputs not donated back into them, and the program. A mesh of more
devices than this machine has is not compiled here: `--mode=plan` compiles for a TPU slice.
"""

import contextlib
import io

import jax
import ml_collections

from t2t_jax.choices import ConfigError
from t2t_jax.model import variant
from t2t_jax.plan import compile as compile_lib


def _mib(n: int) -> str:
  return f'{n / 2 ** 20:.1f} MiB'


def describe(config: ml_collections.ConfigDict) -> str:
  """The lines (see the module doc)."""
  devices = jax.devices()
  try:
    run = compile_lib.Run(config, devices)
  except (ConfigError, variant.VariantError) as e:  # a mesh of other devices: MeshError
    return (f'compiled train step: not compiled on this machine ({str(e).splitlines()[0]}); '
            '--mode=plan compiles for a slice')
  rows, length = run.train_shape()
  head = (f'compiled train step, per device (XLA\'s memory analysis on this machine\'s '
          f'{len(devices)} {devices[0].platform} devices, mesh '
          f"{', '.join(f'{a}:{n}' for a, n in run.mesh.shape.items())}, the largest bucket's "
          f'global batch {rows} x {length}):')
  with contextlib.redirect_stderr(io.StringIO()):  # the plan's progress lines: not info's
    compiled = run.compile_train(rows, length)
  lines = [f'  {s.name}: temporaries (activations) {_mib(s.temp_bytes)}, peak '
           f'{_mib(s.hbm_bytes)} (arguments {_mib(s.argument_bytes)}, outputs '
           f'{_mib(s.output_bytes - s.alias_bytes)} not donated, code {_mib(s.code_bytes)})'
           for s in compiled]
  return '\n'.join([head] + lines)
