"""Each mesh layout on one machine's devices (`--config.mesh`, runtime/meshes.py): the training
state's bytes on one device (its parameter and optimizer shards, as placed) and the median
train step time, against data parallelism over the same devices, in one run.

On CPU (the point is memory and correctness: XLA:CPU's simulated devices share two cores, and
its collectives are copies) run it with simulated devices:

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m benchmarks.scale.meshes \
      --out benchmarks/results/meshes_cpu.jsonl [--layouts data:8,fsdp:8,...] [--steps 10]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from benchmarks.shared import harness, scripts  # noqa: E402

LAYOUTS = ('data:8', 'fsdp:8', 'data:2,tensor:4', 'data:2,fsdp:2,tensor:2')


def _device0_bytes(tree) -> int:
  """Bytes of `tree`'s shards on the first device."""
  import jax  # pylint: disable=import-outside-toplevel
  first = jax.devices()[0]
  return sum(int(np.prod(s.data.shape)) * s.data.dtype.itemsize
             for x in jax.tree_util.tree_leaves(tree) for s in x.addressable_shards
             if s.device == first)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--layouts', default=';'.join(LAYOUTS),
                      help='";"-separated meshes, each a --config.mesh value; the first is '
                      'the reference of step_time_vs_first')
  parser.add_argument('--steps', type=scripts.positive_int, default=10, help='timed steps')
  parser.add_argument('--rows', type=scripts.positive_int, default=32, help='rows per batch')
  harness.add_out_argument(parser)
  args = parser.parse_args(argv)
  harness.start_jax()
  emit = harness.Emitter(args.out)
  import jax  # pylint: disable=import-outside-toplevel
  import optax  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import transformer as model_lib  # pylint: disable=import-outside-toplevel
  from t2t_jax.runtime import meshes, parallel  # pylint: disable=import-outside-toplevel
  cfg = model_lib.TransformerConfig(vocab_size=8000, d_model=256, d_ff=1024, num_heads=8,
                                    num_layers=3, max_len=64, dropout_rate=0.1)
  rng = np.random.RandomState(0)
  batch = {k: rng.randint(2, 8000, (args.rows, 32)).astype(np.int32)
           for k in ('inputs', 'targets')}
  optimizer = optax.adam(1e-4)
  layouts = [part.strip() for part in args.layouts.split(';') if part.strip()]
  reference = None
  for layout in layouts:
    mesh = meshes.make(layout)
    state = parallel.create_train_state(cfg, optimizer, 0, mesh)
    step = parallel.make_train_step(cfg, optimizer, mesh, label_smoothing=0.1, seed=0)
    sharded = parallel.shard_batch(batch, mesh)
    holder = {'state': state}

    def run():
      holder['state'], metrics = step(holder['state'], sharded)
      jax.block_until_ready(metrics)
    times = harness.median_time(run, args.steps)
    reference = reference or times['median_s']
    state = holder['state']
    emit({'name': 'mesh_layout', 'mesh': layout, 'model': 'd_model 256, d_ff 1024, 8 heads, '
          '3+3 layers, vocabulary 8000', 'rows': args.rows, 'length': 32,
          'params_bytes_device0': _device0_bytes(state.params),
          'optimizer_bytes_device0': _device0_bytes(state.opt_state),
          'step_s': times, 'step_time_vs_first': times['median_s'] / reference})


if __name__ == '__main__':
  main()
