"""TPU slices that are not there: their devices, from libtpu's compiler, on any machine.

`devices('v5e:2x4')` returns the compile-only devices of a v5e slice of 2x4 chips:
`jax.jit(...).lower(...).compile()` over a `Mesh` of them produces the real TPU executable
(memory, FLOPs, collectives) on a CPU-only machine. No TPU runtime is started.
"""

import dataclasses
import importlib.util
import os
import re
from typing import List, Tuple

from t2t_jax.runtime.backends import native_stderr_to_debug_log
from t2t_jax.plan.chips import CHIPS, Chip

INSTALL_HINT = 'pip install -r requirements-tpu.txt'
EXAMPLES = 'v4:2x2x1, v5e:2x4, v5p:2x2x1, v6e:2x4, v5e:16x16'


class TopologyError(ValueError):
  """A topology name that libtpu cannot build, or no libtpu to build it."""


@dataclasses.dataclass(frozen=True)
class Topology:
  """A parsed topology name: `chip` generation and torus `shape` in chips ((2, 4) for v5e:2x4)."""
  name: str
  chip: Chip
  shape: Tuple[int, ...]

  @property
  def chips(self) -> int:
    n = 1
    for d in self.shape:
      n *= d
    return n


def parse(name: str) -> Topology:
  """'v5e:2x4' -> Topology; TopologyError listing the accepted forms otherwise."""
  accepted = (f'accepted: GENERATION:SHAPE with GENERATION one of {", ".join(CHIPS)}; SHAPE '
              'AxB for v5e and v6e (2-D torus), AxBxC for v4 and v5p (3-D torus); e.g. '
              f'{EXAMPLES}')
  match = re.fullmatch(r'([a-z0-9]+):(\d+(?:x\d+)*)', (name or '').strip())
  if not match or match.group(1) not in CHIPS:
    raise TopologyError(f'unknown topology {name!r}; {accepted}')
  chip = CHIPS[match.group(1)]
  shape = tuple(int(d) for d in match.group(2).split('x'))
  if len(shape) != chip.dims or min(shape) < 1:
    raise TopologyError(f'topology {name!r}: {chip.name} slices have {chip.dims} positive '
                        f'dimensions; {accepted}')
  return Topology(f'{chip.name}:{"x".join(map(str, shape))}', chip, shape)


def check_compiler() -> None:
  """TopologyError naming the requirements file when libtpu (the TPU compiler) is missing."""
  if importlib.util.find_spec('libtpu') is None:
    raise TopologyError('--mode=plan compiles for TPUs with libtpu, which is not installed: '
                        f'{INSTALL_HINT}')


def _host_bounds(shape: Tuple[int, ...]) -> Tuple[int, int, int]:
  """Chips per host: 2x2 (the TPU VMs of multi-host slices), fewer for smaller slices."""
  padded = tuple(shape) + (1,) * (3 - len(shape))
  return (min(padded[0], 2), min(padded[1], 2), 1)


def devices(topology: Topology) -> List:
  """The compile-only devices of `topology`, in libtpu's order.

  Raises:
    TopologyError: libtpu is missing or refuses the shape (its reason, one line).
  """
  check_compiler()
  os.environ.setdefault('TPU_SKIP_MDS_QUERY', '1')  # no metadata server to ask off a TPU VM
  # libtpu takes /tmp/libtpu_lockfile for the chips of the machine; compiling for chips
  # elsewhere needs none, and two plans (or test workers) at once must not refuse each other.
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  with native_stderr_to_debug_log(f'building topology {topology.name}'):
    try:
      desc = topologies.get_topology_desc(
          topology_name=topology.name, platform='tpu', chip_config_name=topology.chip.chip_config,
          chips_per_host_bounds=_host_bounds(topology.shape))
    except Exception as e:  # pylint: disable=broad-except  (libtpu raises JaxRuntimeError)
      reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise TopologyError(f'libtpu cannot build topology {topology.name!r}: {reason}; '
                          f'e.g. {EXAMPLES}') from None
  return list(desc.devices)
