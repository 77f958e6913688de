"""Is the training step GEMM-bound? The step beside its own GEMMs, timed alone, same run.

Every matrix multiplication of one training step of the size's model at `rows x length`
(source and target), forward and backward, is listed by shape (`gemms`); each distinct shape is
jitted alone (float32, random inputs) and timed interleaved with the whole train step
(`parallel.make_train_step` on one CPU device, as `benchmarks/train_step.py`). The record gives
each shape's GFLOP/s, the step's model GFLOP/s, and `gemm_share`: the seconds the step's GEMMs
take at their own measured rates over the step's seconds. A share near 1 means GEMM-bound; the
rest of the step is the time of everything else (softmaxes, layer norms, dropout, loss,
optimizer, copies, and the runtime between kernels).

  python -m benchmarks.step_gemms --size quickstart --rows 32 --length 64 --out FILE
"""

import argparse
import os
import sys
from typing import Dict, List, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, harness  # noqa: E402

Gemm = Tuple[int, int, int, int]  # (batch, m, k, n): [batch, m, k] x [batch, k, n]


def gemms(size: Dict, rows: int, length: int) -> Dict[Gemm, int]:
  """{(batch, m, k, n): count} of one train step: forward, then per forward GEMM [m,k]x[k,n]
  its two backward ones, dX [m,n]x[n,k] and dW [k,m]x[m,n] (for attention: dQ/dK, dP/dV)."""
  t, d, f, v = rows * length, size['d_model'], size['d_ff'], size['vocab_size']
  h, n_layers = size['num_heads'], size['num_layers']
  dk = d // h
  forward: Dict[Gemm, int] = {}

  def add(g: Gemm, count: int):
    forward[g] = forward.get(g, 0) + count
  # Encoder: Q K V O; decoder: self Q K V O, cross Q O (targets) and K V (sources).
  add((1, t, d, d), n_layers * (4 + 8))
  add((1, t, d, f), 2 * n_layers)
  add((1, t, f, d), 2 * n_layers)
  add((rows * h, length, dk, length), 3 * n_layers)  # scores QK^T
  add((rows * h, length, length, dk), 3 * n_layers)  # weights x V
  add((1, t, d, v), 1)                               # pre-softmax
  total = dict(forward)
  for (b, m, k, n), count in forward.items():
    for g in ((b, m, n, k), (b, k, m, n)):
      total[g] = total.get(g, 0) + count
  return total


def _gemm_call(g: Gemm):
  import jax
  import jax.numpy as jnp
  b, m, k, n = g
  rng = np.random.default_rng(0)
  x = jax.device_put(rng.standard_normal((b, m, k), np.float32))
  y = jax.device_put(rng.standard_normal((b, k, n), np.float32))
  f = jax.jit(lambda p, q: jnp.einsum('bmk,bkn->bmn', p, q))
  f(x, y).block_until_ready()
  return lambda: f(x, y).block_until_ready()


def main(argv=None):
  parser = harness.add_out_argument(argparse.ArgumentParser(description=__doc__))
  parser.add_argument('--size', default='quickstart', choices=sorted(common.SIZES))
  parser.add_argument('--rows', type=int, default=32)
  parser.add_argument('--length', type=int, default=64)
  parser.add_argument('--rounds', type=int, default=5)
  args = parser.parse_args(argv)
  from benchmarks import train_step
  size = common.SIZES[args.size]
  setup = train_step._jax_setup(args.size, 'float32', args.rows, args.length)
  holder = {'state': setup['state']}

  def step():
    holder['state'], _ = setup['step'](holder['state'], setup['batch'])
    holder['state'].step.block_until_ready()
  shapes = gemms(size, args.rows, args.length)
  systems = {'step': step, **{str(g): _gemm_call(g) for g in shapes}}
  times = harness.summaries(harness.interleave(systems, args.rounds, warmup=1))
  rows: List[Dict] = []
  gemm_seconds = 0.0
  for g, count in shapes.items():
    b, m, k, n = g
    seconds = times[str(g)]['median_s']
    gemm_seconds += count * seconds
    rows.append({'shape': list(g), 'count': count, 'seconds': seconds,
                 'gflop_per_s': 2 * b * m * k * n / seconds / 1e9})
  step_s = times['step']['median_s']
  model_flops = common.train_flops(size, args.rows, args.length, args.length)
  harness.Emitter(args.out)({
      'name': 'step_gemms', 'size': args.size, 'config': size,
      'shapes': {'rows': args.rows, 'length': args.length}, 'step_s': step_s,
      'step_model_gflop_per_s': model_flops / step_s / 1e9,
      'gemm_flops': sum(2 * b * m * k * n * c for (b, m, k, n), c in shapes.items()),
      'model_flops': model_flops, 'gemm_seconds_at_own_rates': gemm_seconds,
      'gemm_share': gemm_seconds / step_s, 'gemms': rows})
  print(f'step {step_s * 1e3:.1f} ms, {model_flops / step_s / 1e9:.0f} GFLOP/s of model FLOPs; '
        f'its GEMMs alone {gemm_seconds * 1e3:.1f} ms ({gemm_seconds / step_s:.0%})',
        file=sys.stderr)
  for r in sorted(rows, key=lambda r: -r['count'] * r['seconds']):
    print(f"  {str(r['shape']):24s} x{r['count']:3d}  {r['seconds'] * 1e3:7.3f} ms  "
          f"{r['gflop_per_s']:6.0f} GFLOP/s", file=sys.stderr)


if __name__ == '__main__':
  main()
