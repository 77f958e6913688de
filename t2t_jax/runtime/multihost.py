"""Work split across processes for decoding: each process its share, every result in order.

On a pod every process runs the same command. Decoding (`--mode=decode`, the BLEU part of
`--mode=eval` and dev BLEU during training) gives process p the sentences p, p + P, p + 2P,
... (P processes; interleaved, so every share has the same mix of lengths), decodes them
on its own devices, then gathers the strings from all processes, so that every process
holds every translation in input order. Only process 0 writes files (`is_writer`).
With one process all of this reduces to plain local calls. Within a process a batch may be
split further over the process's devices (`local_mesh`, `translate.Translator`).
"""

from typing import Any, Callable, List, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

ROWS = 'rows'  # the axis of `local_mesh`: a decode batch's rows are split along it


def is_writer() -> bool:
  """Whether this process writes the shared outputs (decode output, eval JSON, reports)."""
  return jax.process_index() == 0


def barrier(name: str) -> None:
  """Waits until every process got here (a no-op for one process)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(f't2t_jax_{name}')


def share(n: int, index: Optional[int] = None, count: Optional[int] = None) -> range:
  """The indices of `n` items that process `index` of `count` works on (interleaved)."""
  index = jax.process_index() if index is None else index
  count = jax.process_count() if count is None else count
  return range(index, n, count)


def _allgather(array: np.ndarray) -> np.ndarray:
  """`[count, *array.shape]`: the same-shaped array of every process, by process index."""
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(array))


def gather_strings(local: Sequence[str], n: int,
                   allgather: Callable[[np.ndarray], np.ndarray] = _allgather,
                   count: Optional[int] = None) -> List[str]:
  """All `n` strings in input order, given this process's `local` ones (its `share(n)`).

  Strings travel as UTF-8 bytes padded to a common length: two all-gathers (lengths, then
  bytes) whose shapes are the same on every process, as the collectives require.
  """
  count = jax.process_count() if count is None else count
  if count == 1:
    return list(local)
  rows = -(-n // count)
  encoded = [s.encode('utf-8') for s in local]
  lengths = np.zeros((rows,), np.int32)
  lengths[:len(encoded)] = [len(b) for b in encoded]
  all_lengths = allgather(lengths)
  width = max(int(all_lengths.max()), 1)
  data = np.zeros((rows, width), np.uint8)
  for r, b in enumerate(encoded):
    data[r, :len(b)] = np.frombuffer(b, np.uint8)
  all_data = allgather(data)
  result = [''] * n
  for p in range(count):
    for r, i in enumerate(share(n, p, count)):
      result[i] = all_data[p, r, :all_lengths[p, r]].tobytes().decode('utf-8')
  return result


def local_mesh(devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """A one-axis mesh, 'rows', over this process's devices (default: all of them): where a
  process decodes its share of the sentences, each device a slice of a batch's rows."""
  devices = jax.local_devices() if devices is None else devices
  return Mesh(np.asarray(devices), (ROWS,))


def local_replicas(tree: Any, mesh: Mesh) -> Any:
  """Every leaf of `tree` replicated over `mesh`, a mesh of this process's devices.

  Leaves may be host arrays, arrays on some device, or global arrays of a multi-process mesh
  (a jit that mixes arrays spanning several processes with process-local ones fails, so the
  decoder of each process runs on local arrays only). A replicated array that already has a
  copy on every device of `mesh` (training parameters on the training mesh) is reused
  without copying; sharded ones are gathered.
  """
  sharding = NamedSharding(mesh, P())
  devices = list(mesh.devices.flat)

  def one(x):
    if isinstance(x, jax.Array) and x.is_fully_replicated:
      shards = {s.device: s.data for s in x.addressable_shards}
      if all(d in shards for d in devices):
        return jax.make_array_from_single_device_arrays(x.shape, sharding,
                                                        [shards[d] for d in devices])
      x = x.addressable_data(0)
    elif isinstance(x, jax.Array) and not x.is_fully_addressable:
      from jax.experimental import multihost_utils
      x = np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return jax.device_put(x, sharding)
  return jax.tree_util.tree_map(one, tree)


def translate_all(translator: Any, sentences: Sequence[str],
                  progress: Optional[Callable[[int, int, float], None]] = None) -> List[str]:
  """`translator.translate(sentences)` with the work split across processes (see module doc).

  `progress` reports this process's share only (it is given to process 0 alone). Within
  a process, the translator decides how its devices share the work (`translate.Translator`,
  `parallelism`): there are no collectives, so processes may run different numbers of
  batches.
  """
  indices = share(len(sentences))
  local = translator.translate([sentences[i] for i in indices],
                               progress=progress if is_writer() else None,
                               line_numbers=[i + 1 for i in indices])
  return gather_strings(local, len(sentences))
