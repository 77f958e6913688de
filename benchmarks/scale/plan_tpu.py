"""--mode=plan for the paper's configs on TPU slices: base and big, float32 and bfloat16.

  python -m benchmarks.scale.plan_tpu --out benchmarks/results/plan_tpu.jsonl
  python -m benchmarks.scale.plan_tpu --configs wmt_big --dtypes bfloat16 --topologies v5e:2x4 \
      --search --set shard_optimizer_state=True --set remat_policy=full

Every plan compiles the train, eval and beam-search decode steps with libtpu on this machine
(about 1-3 minutes each for base and big on 2 CPU cores; --search adds a few train-step
compilations). One JSON line per (config, dtype, topology, overrides): the plan's dict
(`t2t_jax.plan.make_plan`) plus the paper's reference time and the projected hours of the
paper's schedule. Rows already in --out are skipped, so an interrupted run resumes; --tag
names a new series of rows (kept in each row, and part of what counts as done).
--plan_cache DIR keeps what each compilation reported (`t2t_jax/plan/cache.py`): a second run
with the same DIR reads them back (`plan_cache_hits`, `plan_compile_s`).

On slices of more than 8 chips the batch grows with the chips (weak scaling: each chip gets
the tokens it gets on an 8-chip slice, `tokens_per_batch x chips / 8`): the paper's 25k tokens
cannot give each of 256 chips a row of the longest bucket. A plan that cannot be made is
recorded with its one-line reason.
"""

import argparse
import importlib
import json
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

from benchmarks.shared import harness  # noqa: E402

# §6.1 / Table 3: base 100k steps in 12 hours, big 300k steps in 3.5 days, on 8 P100 GPUs.
PAPER_HOURS = {'wmt_base': 12.0, 'wmt_big': 84.0}


def _key(config_name, dtype, topology, overrides, tag=''):
  return json.dumps([config_name, dtype, topology, sorted(overrides)] + ([tag] if tag else []))


def _done(path):
  keys = set()
  if path and os.path.exists(path):
    with open(path) as f:
      for line in f:
        r = json.loads(line)
        keys.add(_key(r['config_name'], r['dtype'], r['topology'], r['overrides'],
                      r.get('tag', '')))
  return keys


def _config(name, dtype, overrides):
  config = importlib.import_module(f'configs.{name}').get_config()
  config.dtype = dtype
  for item in overrides:
    key, value = item.split('=', 1)
    config[key] = type(config[key])(json.loads(value.lower()) if value in (
        'True', 'False', 'true', 'false') else value)
  return config


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--configs', default='wmt_base,wmt_big')
  parser.add_argument('--dtypes', default='float32,bfloat16')
  parser.add_argument('--topologies', default='v4:2x2x1,v5e:2x4,v5p:2x2x1,v6e:2x4,v5e:16x16')
  parser.add_argument('--search', action='store_true',
                      help='also find the largest tokens_per_batch that fits (slow)')
  parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                      help='config override, e.g. shard_optimizer_state=True')
  parser.add_argument('--tag', default='', help='a label of this series of rows')
  parser.add_argument('--plan_cache', default=None, metavar='DIR',
                      help='keep and reuse compile records here (default: none)')
  harness.add_out_argument(parser)
  args = parser.parse_args(argv)
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update('jax_platforms', 'cpu')
  # pylint: disable=import-outside-toplevel
  from t2t_jax.plan import PlanError, make_plan
  from t2t_jax.plan.topology import parse
  emit, done = harness.Emitter(args.out), _done(args.out)
  for name in args.configs.split(','):
    for dtype in args.dtypes.split(','):
      for topology in args.topologies.split(','):
        if _key(name, dtype, topology, args.set, args.tag) in done:
          continue
        with harness.timed() as wall:
          config = _config(name, dtype, args.set)
          chips = parse(topology).chips
          if chips > 8:
            config.tokens_per_batch = config.tokens_per_batch * chips // 8
          try:
            plan = make_plan(config, topology, search_batch=args.search,
                             cache_dir=args.plan_cache)
          except PlanError as e:
            plan = {'topology': topology, 'dtype': dtype, 'error': str(e)}
        plan.update({'tag': args.tag} if args.tag else {})
        plan.update(name='plan_tpu', config_name=name, overrides=args.set,
                    wall_s=round(wall.seconds, 1),
                    paper_hours_8_p100=PAPER_HOURS.get(name))
        emit(plan)
        jax.clear_caches()  # compiled executables of every plan would otherwise pile up (GBs)


if __name__ == '__main__':
  main()
