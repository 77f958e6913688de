"""Compile seconds of every train-step shape a run uses, for a config on a TPU slice.

  python -m benchmarks.scale.compile_shapes --config wmt_base --dtype bfloat16 --topology v5e:2x4 \
      --out benchmarks/results/compile_shapes.jsonl
  python -m benchmarks.scale.compile_shapes --config wmt_base --set num_layers=2 --shapes largest \
      --unrolled                        # a proxy: 2 layers, one shape, the unrolled stack
  python -m benchmarks.scale.compile_shapes --threads 2 --jax_config \
      jax_exec_time_optimization_effort=-1.0   # levers: threads, compiler options

A training run compiles its train step once per batch shape (`Run.train_shapes`: each bucket
of `configs/default.py` `bucket_lengths`, or the one packed shape) as its first batches of
each shape arrive: the time to the first steady step. This lowers and compiles each one with
libtpu for the slice's devices (`t2t_jax.plan`), as `--mode=plan` does, and writes one JSON
line per shape (wall and CPU seconds; CPU seconds depend less on what else the machine runs)
then one with the sums. `--unrolled` compiles the layer stacks unrolled (the model's
`scan_layers=False`) to compare against the default scanned stacks (`t2t_jax/model/stack.py`).
`--threads N` compiles N shapes at once (the wall time of the whole is then the number; the
per-shape times overlap).
"""

import argparse
import concurrent.futures
import json
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

from benchmarks.scale.plan_tpu import _config  # noqa: E402  (config by name, with --set overrides)
from benchmarks.shared import harness  # noqa: E402


def _value(text: str):
  try:
    return json.loads(text)
  except json.JSONDecodeError:
    return text


def _compile_one(run, shape, largest):
  """(shape, seconds of lowering + compiling its train step (harness.Stopwatch), the
  compiled programs' `StepStats`)."""
  with harness.timed() as watch:
    # The apply step of gradient accumulation has one shape per run: counted once.
    stats = run.compile_train(*shape, apply=shape == largest)
  return shape, watch, stats


def _start_jax(options) -> None:
  """CPU only (nothing runs here), then the --jax_config options."""
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update('jax_platforms', 'cpu')
  for item in options:
    key, value = item.split('=', 1)
    jax.config.update(key, _value(value))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--config', default='wmt_base', help='a module of configs/')
  parser.add_argument('--dtype', default='bfloat16')
  parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                      help='config override, e.g. num_layers=2')
  parser.add_argument('--topology', default='v5e:2x4')
  parser.add_argument('--shapes', default='all', choices=('all', 'largest', 'smallest'))
  parser.add_argument('--unrolled', action='store_true',
                      help='compile the layer stacks unrolled (scan_layers=False)')
  parser.add_argument('--threads', type=int, default=1, help='shapes compiled at once')
  parser.add_argument('--jax_config', action='append', default=[], metavar='KEY=VALUE',
                      help='a jax.config option, e.g. jax_exec_time_optimization_effort=-1.0')
  args = harness.add_out_argument(parser).parse_args(argv)
  _start_jax(args.jax_config)
  # pylint: disable=import-outside-toplevel
  from t2t_jax.plan import compile as compile_lib, topology
  config = _config(args.config, args.dtype, args.set)
  run = compile_lib.Run(config, topology.devices(topology.parse(args.topology)))
  run.cfg = run.cfg.replace(scan_layers=not args.unrolled)
  shapes = run.train_shapes()
  largest = shapes[-1]
  chosen = {'all': shapes, 'largest': shapes[-1:], 'smallest': shapes[:1]}[args.shapes]
  common = dict(name='compile_shapes', config_name=args.config, dtype=args.dtype,
                topology=args.topology, overrides=args.set, jax_config=args.jax_config,
                scan_layers=not args.unrolled, threads=args.threads,
                tokens_per_batch=int(config.tokens_per_batch))
  emit = harness.Emitter(args.out)
  results = []
  with harness.timed() as total:
    with concurrent.futures.ThreadPoolExecutor(max(1, args.threads)) as pool:
      for shape, watch, stats in pool.map(lambda s: _compile_one(run, s, largest), chosen):
        results.append(watch.seconds)
        # XLA's FLOPs and bytes count a scanned stack's layer body once, not N times.
        emit(dict(common, batch=list(shape), wall_s=round(watch.seconds, 1),
                  cpu_s=round(watch.cpu_seconds, 1),
                  compiler_s=round(sum(s.compile_s for s in stats), 1),
                  hbm_bytes=max(s.hbm_bytes for s in stats),
                  temp_bytes=max(s.temp_bytes for s in stats),
                  xla_flops=sum(s.flops for s in stats),
                  xla_bytes_accessed=sum(s.bytes_accessed for s in stats)))
  emit(dict(common, shapes=[list(s) for s in chosen], shape_count=len(chosen),
            run_shape_count=len(shapes), sum_wall_s=round(sum(results), 1),
            total_wall_s=round(total.seconds, 1), total_cpu_s=round(total.cpu_seconds, 1)))


if __name__ == '__main__':
  main()
