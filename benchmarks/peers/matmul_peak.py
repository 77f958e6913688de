"""The machine's practical peak: FLOP/s of one jitted matmul (default float32 2048^3).

`jax_matmul_peak()` is reused by the other benchmarks, which report their model FLOP/s as a
fraction of it (measured in the same run, so machine load affects both alike). The PyTorch
number (torch.mm, interleaved call by call with ours) is context for the peer: what its BLAS
reaches on this machine.

  python -m benchmarks.peers.matmul_peak [--n 2048] [--dtype float32] [--out FILE]

Without torch it stops in one line saying how to install it (`--no-peer`: ours alone).
"""

import argparse
import os
import sys
from typing import Any, Callable, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import common, harness, scripts  # noqa: E402

DTYPES = ('float32', 'bfloat16', 'float16')  # what both jax and torch compute as named


_CACHE = {}


def _jax_matmul(n: int, dtype: str) -> Callable[[], Any]:
  """A blocking call of a jitted [n, n] @ [n, n] matmul. Inputs and the jitted function are
  kept between calls, so repeated measurements compile nothing."""
  import jax
  import jax.numpy as jnp
  if (n, dtype) not in _CACHE:
    rng = np.random.default_rng(0)
    a = jax.device_put(rng.standard_normal((n, n), np.float32).astype(jnp.dtype(dtype)))
    b = jax.device_put(rng.standard_normal((n, n), np.float32).astype(jnp.dtype(dtype)))
    _CACHE[(n, dtype)] = (jax.jit(lambda x, y: x @ y), a, b)
  f, a, b = _CACHE[(n, dtype)]
  return lambda: f(a, b).block_until_ready()


def _torch_matmul(n: int, dtype: str) -> Callable[[], Any]:
  """A blocking call of torch.mm of two [n, n] matrices (on the GPU if torch has one)."""
  import torch
  dt = getattr(torch, dtype)
  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  g = torch.Generator().manual_seed(0)
  a = torch.randn(n, n, generator=g).to(device, dt)
  b = torch.randn(n, n, generator=g).to(device, dt)
  sync = torch.cuda.synchronize if device == 'cuda' else (lambda: None)

  def run():
    with torch.inference_mode():
      torch.mm(a, b)
    sync()
  return run


def _peak(times: List[float], n: int) -> dict:
  t = harness.summarize(times)
  flops = 2 * n ** 3
  return {'flops': flops, 'flops_per_s': flops / t['median_s'], 'time': t}


def jax_matmul_peak(n: int = 2048, dtype: str = 'float32', repeats: int = 10) -> dict:
  """Median FLOP/s (2 n^3 FLOPs a call) of the jitted matmul over `repeats` calls after 2
  untimed ones: {flops, flops_per_s, time (harness.summarize)}."""
  return _peak(harness.interleave({'jax': _jax_matmul(n, dtype)}, repeats, warmup=2)['jax'], n)


def main(argv=None):
  parser = common.add_common_args(argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
  parser.add_argument('--n', type=scripts.positive_int, default=2048,
                      help='the matrices are n x n (n >= 1)')
  # float64 is not offered: without jax_enable_x64 jax would compute float32 under its name.
  parser.add_argument('--dtype', default='float32', choices=DTYPES)
  parser.add_argument('--repeats', type=scripts.positive_int, default=10,
                      help='timed calls of each side (>= 1)')
  args = parser.parse_args(argv)
  common.require_peer(parser, args)
  harness.start_jax()
  emit = harness.Emitter(args.out)
  systems = {'jax': _jax_matmul(args.n, args.dtype)}
  if not args.no_peer:
    import torch
    torch.set_num_threads(os.cpu_count())
    systems['torch'] = _torch_matmul(args.n, args.dtype)
  # Alternating calls: a change of machine load shows in both sides' numbers alike.
  peaks = {name: _peak(times, args.n) for name, times in
           harness.interleave(systems, args.repeats, warmup=2).items()}
  record = {'name': 'matmul_peak', 'config': {'dtype': args.dtype},
            'shapes': {'m': args.n, 'n': args.n, 'k': args.n},
            'jax': {'gflops_per_s': peaks['jax']['flops_per_s'] / 1e9,
                    'time': peaks['jax']['time']}}
  if 'torch' in peaks:
    record['torch'] = {'gflops_per_s': peaks['torch']['flops_per_s'] / 1e9,
                       'time': peaks['torch']['time'], 'threads': torch.get_num_threads()}
    record['ratio_jax_over_torch'] = harness.ratio(peaks['jax']['flops_per_s'],
                                                   peaks['torch']['flops_per_s'])
  emit(record)


if __name__ == '__main__':
  main()
