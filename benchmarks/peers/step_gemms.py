"""Is the training step GEMM-bound? The step beside its own GEMMs, timed alone, same run.

Every matrix multiplication of one training step of the size's model at `rows x length`
(source and target), forward and backward, is listed by shape and operand layout (`gemms`);
each distinct one is jitted alone (float32, random inputs) and timed interleaved with the whole
train step
(`parallel.make_train_step` on one CPU device, as `benchmarks/peers/train_step.py`). The record
gives each shape's GFLOP/s, the step's model GFLOP/s, and `gemm_share`: the seconds the step's GEMMs
take at their own measured rates over the step's seconds. A share near 1 means GEMM-bound; the
rest of the step is the time of everything else (softmaxes, layer norms, dropout, loss,
optimizer, copies, and the runtime between kernels).

  python -m benchmarks.peers.step_gemms --size quickstart --rows 32 --length 64 --out FILE
"""

import argparse
import os
import sys
from typing import Dict, List, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import common, harness  # noqa: E402

# (kind, batch, m, k, n): a forward matmul [batch, m, k] x [batch, k, n] ('fwd'), or one of
# its two backward products ('dx': dY W^T, [m, n] x [k, n]^T; 'dw': X^T dY, [m, k]^T x [m, n]),
# with the operands laid out as the step holds them (no transposed copies).
Gemm = Tuple[str, int, int, int, int]
_EINSUM = {'fwd': 'bmk,bkn->bmn', 'dx': 'bmn,bkn->bmk', 'dw': 'bmk,bmn->bkn'}
_OPERANDS = {'fwd': ('mk', 'kn'), 'dx': ('mn', 'kn'), 'dw': ('mk', 'mn')}


def gemms(size: Dict, rows: int, length: int) -> Dict[Gemm, int]:
  """{(kind, batch, m, k, n): count} of one train step: each forward matmul and its two
  backward products (for attention: dQ/dK and dP/dV)."""
  t, d, f, v = rows * length, size['d_model'], size['d_ff'], size['vocab_size']
  h, n_layers = size['num_heads'], size['num_layers']
  dk = d // h
  forward: Dict[Tuple[int, int, int, int], int] = {}
  for g, count in (
      # Encoder: Q K V O; decoder: self Q K V O, cross Q O (targets) and K V (sources).
      ((1, t, d, d), n_layers * (4 + 8)),
      ((1, t, d, f), 2 * n_layers),
      ((1, t, f, d), 2 * n_layers),
      ((rows * h, length, dk, length), 3 * n_layers),  # scores Q K^T
      ((rows * h, length, length, dk), 3 * n_layers),  # weights x V (the same shape when
      ((1, t, d, v), 1)):                              # length == d_k: counted together)
    forward[g] = forward.get(g, 0) + count
  return {(kind, *g): count for g, count in forward.items() for kind in _EINSUM}


def flops(g: Gemm) -> int:
  _, b, m, k, n = g
  return 2 * b * m * k * n


def _gemm_call(g: Gemm):
  """A blocking call of the jitted product `g` on random float32 operands (2-D when the
  batch is 1, as the step's projections are)."""
  import jax
  import jax.numpy as jnp
  kind, b, m, k, n = g
  dims = {'m': m, 'k': k, 'n': n}
  rng = np.random.default_rng(0)
  spec = _EINSUM[kind] if b > 1 else _EINSUM[kind].replace('b', '')
  operands = [jax.device_put(rng.standard_normal(([b] if b > 1 else []) +
                                                 [dims[c] for c in axes], np.float32))
              for axes in _OPERANDS[kind]]
  f = jax.jit(lambda p, q: jnp.einsum(spec, p, q))
  f(*operands).block_until_ready()
  return lambda: f(*operands).block_until_ready()


def main(argv=None):
  parser = harness.add_out_argument(argparse.ArgumentParser(description=__doc__))
  parser.add_argument('--size', default='quickstart', choices=sorted(common.SIZES))
  parser.add_argument('--rows', type=int, default=32)
  parser.add_argument('--length', type=int, default=64)
  parser.add_argument('--rounds', type=int, default=5)
  args = parser.parse_args(argv)
  harness.start_jax()
  from benchmarks.peers import train_step
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
    seconds = times[str(g)]['median_s']
    gemm_seconds += count * seconds
    rows.append({'gemm': list(g), 'count': count, 'seconds': seconds,
                 'gflop_per_s': flops(g) / seconds / 1e9})
  step_s = times['step']['median_s']
  model_flops = common.train_flops(size, args.rows, args.length, args.length)
  harness.Emitter(args.out)({
      'name': 'step_gemms', 'size': args.size, 'config': size,
      'shapes': {'rows': args.rows, 'length': args.length}, 'step_s': step_s,
      'step_model_gflop_per_s': model_flops / step_s / 1e9,
      'gemm_flops': sum(flops(g) * c for g, c in shapes.items()),
      'model_flops': model_flops, 'gemm_seconds_at_own_rates': gemm_seconds,
      'gemm_share': gemm_seconds / step_s, 'gemms': rows})
  print(f'step {step_s * 1e3:.1f} ms, {model_flops / step_s / 1e9:.0f} GFLOP/s of model FLOPs; '
        f'its GEMMs alone {gemm_seconds * 1e3:.1f} ms ({gemm_seconds / step_s:.0%})',
        file=sys.stderr)
  for r in sorted(rows, key=lambda r: -r['count'] * r['seconds']):
    print(f"  {str(r['gemm']):32s} x{r['count']:3d}  {r['seconds'] * 1e3:7.3f} ms  "
          f"{r['gflop_per_s']:6.0f} GFLOP/s", file=sys.stderr)


if __name__ == '__main__':
  main()
