"""A restarted run with the persistent compilation cache: seconds to compile its programs.

  python -m benchmarks.scale.compile_cache_rerun --config wmt_base \\
      --out benchmarks/results/compile_shapes.jsonl

A run compiles its train step at every batch shape and its dev eval at every eval shape
before its steady step (`plan.compile.Run`, what `--mode=plan` lists). A preempted or resumed
run compiles the same programs again, unless JAX's persistent compilation cache
(`runtime/compile_cache.py`, main.py's `--compilation_cache`) holds them. This compiles them
for this machine's first device (the CPU here: the backend a rerun's cache can be measured
on without the hardware; libtpu's compile-only client cannot read cache entries back) in two
fresh processes over one new cache folder: the first fills it, the second is the rerun. One
JSON line with each process's seconds per program and in all (tracing and lowering, which
no cache saves, included), and JAX's own event durations: tracing, lowering to StableHLO,
XLA compiling (`backend_compile_duration`) and reading the cache (`cache_retrieval_time_sec`).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

from benchmarks.scale.plan_tpu import _config  # noqa: E402  (config by name, with --set overrides)
from benchmarks.shared import harness  # noqa: E402


def compile_run(config_name: str, dtype: str, overrides, cache: str) -> dict:
  """In this process: the cache on at `cache`, then every train and eval program of the run
  on the first device, each timed (lowering and compiling, or loading from the cache)."""
  harness.start_jax()
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax.plan import compile as plan_compile, compiles  # pylint: disable=import-outside-toplevel
  from t2t_jax.runtime import compile_cache  # pylint: disable=import-outside-toplevel
  compile_cache.enable(cache)
  events: dict = {}

  def listen(event, duration, **_):
    if event.startswith(('/jax/core/compile', '/jax/compilation_cache')):
      events[event] = events.get(event, 0.0) + duration

  jax.monitoring.register_event_duration_secs_listener(listen)
  run = plan_compile.Run(_config(config_name, dtype, overrides), jax.devices()[:1])
  seconds = {label: harness.time_call(compile_program)[1]
             for label, compile_program in compiles.programs(run, ('train', 'eval'))}
  return {'seconds': seconds, 'total_s': sum(seconds.values()), 'jax_events_s': events,
          'cache_files': sum(len(files) for _, _, files in os.walk(cache))}


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--config', default='wmt_base')
  parser.add_argument('--dtype', default='float32')
  parser.add_argument('--set', action='append', default=[], help='KEY=VALUE config overrides')
  parser.add_argument('--child', default=None, help=argparse.SUPPRESS)
  harness.add_out_argument(parser)
  args = parser.parse_args(argv)
  if args.child:
    print(json.dumps(compile_run(args.config, args.dtype, args.set, args.child)))
    return
  cache = tempfile.mkdtemp(prefix='t2t_jax_cache_rerun_')
  try:
    runs = []
    for _ in ('first', 'rerun'):
      command = [sys.executable, '-m', 'benchmarks.scale.compile_cache_rerun',
                 '--config', args.config, '--dtype', args.dtype, '--child', cache]
      for item in args.set:
        command += ['--set', item]
      with harness.timed() as t:
        done = subprocess.run(command, cwd=_ROOT, capture_output=True, text=True, check=True)
      runs.append(dict(json.loads(done.stdout.strip().splitlines()[-1]), process_s=t.seconds))
  finally:
    shutil.rmtree(cache, ignore_errors=True)
  harness.Emitter(args.out)({
      'name': 'compile_cache_rerun', 'config_name': args.config, 'dtype': args.dtype,
      'overrides': args.set, 'first': runs[0], 'rerun': runs[1],
      'rerun_over_first': runs[1]['total_s'] / runs[0]['total_s']})


if __name__ == '__main__':
  main()
