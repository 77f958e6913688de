"""The peak FLOP/s that MFU (model FLOPs utilisation) is reported against: the datasheet's dense
bf16 matmul rate of an accelerator we know (`KNOWN_PEAKS`, by `device_kind`), and on a CPU the
host's measured float32 matmul rate (`cpu_matmul_peak`: a jitted 2048 x 2048 matmul, the fastest
of 5 timed calls, kept per machine in `~/.cache/t2t_jax/cpu_peak.json`, so a run measures it
once and never mid-training: delete it to measure again, on an idle machine). The benchmarks
use the same table (benchmarks/shared/common.py).
"""

import json
import os
import platform
import time
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.storage import paths

# Dense bf16 peak of the accelerators we know (FLOP/s, per chip).
KNOWN_PEAKS = {
    'H100': 989e12,   # H100 SXM, bf16 dense tensor core
    'H200': 989e12,   # same compute die as H100 SXM
    'A100': 312e12,
    'TPU v4': 275e12,
    'TPU v5 lite': 197e12,  # v5e
    'TPU v5p': 459e12,
    'TPU v6 lite': 918e12,  # v6e (Trillium)
}
_CPU_N, _CPU_CALLS = 2048, 5


def known_peak(device_kind: str) -> Optional[float]:
  """The `KNOWN_PEAKS` entry whose key is in `device_kind` (case-insensitive), else None."""
  for key, value in KNOWN_PEAKS.items():
    if key.lower() in device_kind.lower():
      return value
  return None


def _cpu_key() -> str:
  return f'{platform.processor() or platform.machine()}|{os.cpu_count()}|jax {jax.__version__}'


def cpu_matmul_peak(cache: Optional[str] = None) -> float:
  """This host's float32 matmul FLOP/s on jax's CPU backend (all its cores), measured once per
  machine and jax version and kept in `cache` (default $T2T_CPU_PEAK_CACHE, else
  ~/.cache/t2t_jax/cpu_peak.json; delete it to measure again, on an idle machine)."""
  cache = cache or os.environ.get('T2T_CPU_PEAK_CACHE') or os.path.join(
      os.path.expanduser('~'), '.cache', 't2t_jax', 'cpu_peak.json')
  try:
    with open(cache, encoding='utf-8') as f:
      known = json.load(f)
  except (OSError, ValueError):
    known = {}
  if _cpu_key() in known:
    return float(known[_cpu_key()])
  device = jax.devices('cpu')[0]
  a = jax.device_put(jnp.ones((_CPU_N, _CPU_N), jnp.float32), device)
  matmul = jax.jit(lambda x: x @ x)
  matmul(a).block_until_ready()
  times = []
  for _ in range(_CPU_CALLS):
    start = time.perf_counter()
    matmul(a).block_until_ready()
    times.append(time.perf_counter() - start)
  peak = 2 * _CPU_N ** 3 / float(np.min(times))  # a peak: the best the cores did
  try:
    paths.makedirs(os.path.dirname(cache))
    paths.write_atomic(cache, json.dumps({**known, _cpu_key(): peak}).encode(), overwrite=True)
  except OSError:
    pass  # measured again next time
  return peak


def run_peak() -> Tuple[Optional[float], str]:
  """(peak FLOP/s of all of this process's devices together, what it is): the known chips'
  datasheet rate times the device count, on CPU the host's measured rate (its simulated
  devices share the cores); (None, why) for an accelerator not in the table."""
  devices = jax.local_devices()
  if devices[0].platform == 'cpu':
    return cpu_matmul_peak(), 'the CPU\'s measured float32 matmul rate'
  peak = known_peak(devices[0].device_kind)
  if peak is None:
    return None, f'no datasheet peak for {devices[0].device_kind}'
  return peak * len(devices), f'{len(devices)} x {devices[0].device_kind} bf16 dense datasheet'
