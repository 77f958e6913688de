"""The machine's practical peak: FLOP/s of one jitted matmul (default float32 2048^3).

`jax_matmul_peak()` is reused by the other benchmarks, which report their model FLOP/s as a
fraction of it (measured in the same run, so machine load affects both alike). The PyTorch
number (`torch_matmul_peak`) is context for the peer: what its BLAS reaches on this machine.

  python -m benchmarks.matmul_peak [--n 2048] [--dtype float32] [--out FILE]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # noqa: E402


_CACHE = {}


def jax_matmul_peak(n: int = 2048, dtype: str = 'float32', repeats: int = 10) -> dict:
  """Median FLOP/s of a jitted [n, n] @ [n, n] matmul after a warmup (2 n^3 FLOPs).

  Inputs and the jitted function are kept between calls, so repeated calls compile nothing.
  """
  import jax
  import jax.numpy as jnp
  if (n, dtype) not in _CACHE:
    rng = np.random.default_rng(0)
    a = jax.device_put(rng.standard_normal((n, n), np.float32).astype(jnp.dtype(dtype)))
    b = jax.device_put(rng.standard_normal((n, n), np.float32).astype(jnp.dtype(dtype)))
    _CACHE[(n, dtype)] = (jax.jit(lambda x, y: x @ y), a, b)
  f, a, b = _CACHE[(n, dtype)]
  t = common.median_time(lambda: f(a, b).block_until_ready(), repeats, warmup=2)
  flops = 2 * n ** 3
  return {'flops': flops, 'flops_per_s': flops / t['median_s'], 'time': t}


def torch_matmul_peak(n: int = 2048, dtype: str = 'float32', repeats: int = 10) -> dict:
  import torch
  dt = getattr(torch, dtype)
  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  g = torch.Generator().manual_seed(0)
  a = torch.randn(n, n, generator=g).to(device, dt)
  b = torch.randn(n, n, generator=g).to(device, dt)
  sync = torch.cuda.synchronize if device == 'cuda' else (lambda: None)

  def run():
    torch.mm(a, b)
    sync()
  with torch.inference_mode():
    t = common.median_time(run, repeats, warmup=2)
  flops = 2 * n ** 3
  return {'flops': flops, 'flops_per_s': flops / t['median_s'], 'time': t}


def main(argv=None):
  parser = common.add_common_args(argparse.ArgumentParser(description=__doc__))
  parser.add_argument('--n', type=int, default=2048)
  parser.add_argument('--dtype', default='float32')
  parser.add_argument('--repeats', type=int, default=10)
  args = parser.parse_args(argv)
  emit = common.Emitter(args.out)
  ours = jax_matmul_peak(args.n, args.dtype, args.repeats)
  record = {'name': 'matmul_peak', 'config': {'dtype': args.dtype},
            'shapes': {'m': args.n, 'n': args.n, 'k': args.n},
            'device': common.jax_device_info(),
            'jax': {'gflops_per_s': ours['flops_per_s'] / 1e9, 'time': ours['time']}}
  if not args.no_peer:
    import torch
    torch.set_num_threads(os.cpu_count())
    peer = torch_matmul_peak(args.n, args.dtype, args.repeats)
    record['torch'] = {'gflops_per_s': peer['flops_per_s'] / 1e9, 'time': peer['time'],
                       'threads': torch.get_num_threads()}
    record['ratio_jax_over_torch'] = common.ratio(ours['flops_per_s'], peer['flops_per_s'])
  emit(record)


if __name__ == '__main__':
  main()
