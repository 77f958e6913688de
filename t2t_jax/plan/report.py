"""`--mode=plan`: will a config compile on a TPU slice, will it fit, how long will it take?

`make_plan(config, 'v5e:2x4')` compiles the run's train, eval and beam-search decode steps
for the slice's devices on this machine (no TPU needed, nothing read or written), then
reports per chip: HBM against capacity, the largest `tokens_per_batch` that fits, FLOPs (XLA
beside the analytic count), collectives, a roofline step time and the hours of the config's
`num_train_steps`. Keys of the returned dict are documented in `make_plan`.
"""

import importlib.metadata
from typing import Any, Dict, List, Optional

import jax
import ml_collections

from t2t_jax.config import check_config_dict
from t2t_jax.data import pipeline
from t2t_jax.plan import analytic, batch_search, cache as cache_lib, compile as compile_lib
from t2t_jax.plan import compiles as compiles_lib, roofline, topology

GiB = 2 ** 30


class PlanError(ValueError):
  """A plan that cannot be made, or a config that does not fit (one line, with the remedy)."""


def _libtpu_version() -> str:
  try:
    return importlib.metadata.version('libtpu')
  except importlib.metadata.PackageNotFoundError:
    return 'unknown'


def _train_shape(run: compile_lib.Run, tokens: Optional[int] = None):
  try:
    return run.train_shape(tokens)
  except pipeline.PipelineError as e:
    raise PlanError(f'on {len(run.mesh.devices.flat)} chips: {e}') from None


def train_stats(run: compile_lib.Run, tokens: Optional[int] = None):
  """(rows, length, [StepStats] or DoesNotFit) of the train step at a token budget."""
  rows, length = _train_shape(run, tokens)
  try:
    return rows, length, run.compile_train(rows, length)
  except compile_lib.DoesNotFit as e:
    return rows, length, e


def _peak(stats: List[compile_lib.StepStats]) -> int:
  return max(s.hbm_bytes for s in stats)


def _search(run: compile_lib.Run, first, capacity: float) -> batch_search.Found:
  """Largest tokens_per_batch whose train step fits, starting from the config's result."""
  _, length = _train_shape(run)

  def outcome(result):
    if isinstance(result, compile_lib.DoesNotFit):
      return False, result.needed_bytes
    return _peak(result) <= capacity, float(_peak(result))

  def probe(tokens):
    return outcome(train_stats(run, tokens)[2])

  return batch_search.largest_fitting(
      probe, run.config.tokens_per_batch, outcome(first), capacity,
      granule=length * run.mesh.devices.size)


def _step_dict(stats: compile_lib.StepStats) -> Dict[str, Any]:
  return {'shapes': {k: list(v) for k, v in stats.shapes.items()},
          'compile_s': round(stats.compile_s, 1), 'hbm_bytes': stats.hbm_bytes,
          'argument_bytes': stats.argument_bytes, 'output_bytes': stats.output_bytes,
          'alias_bytes': stats.alias_bytes, 'temp_bytes': stats.temp_bytes,
          'code_bytes': stats.code_bytes, 'flops': stats.flops,
          'bytes_accessed': stats.bytes_accessed, 'collectives': stats.collectives}


def _search_fields(run: compile_lib.Run, train, capacity: float,
                   search_batch: bool) -> Dict[str, Any]:
  """The plan's keys of the batch search (see `make_plan`)."""
  found = (_search(run, train, capacity) if search_batch
           else batch_search.Found(None, None, None))
  return dict(largest_tokens_per_batch=found.tokens, batch_searched=search_batch,
              batch_search_converged=found.converged,
              smallest_unfit_tokens_per_batch=found.smallest_unfit)


def make_plan(config: ml_collections.ConfigDict, topology_name: str, *,
              search_batch: bool = True, all_shapes: bool = True,
              cache_dir: Optional[str] = None) -> Dict[str, Any]:
  """The plan of `config` on `topology_name` as a JSON-ready dict.

  Keys: topology, chip, chips, processes, dtype, tokens_per_batch, train_batch [rows,
  length], hbm_bytes_per_chip (the largest of: the train step; the decode step; when the
  config evaluates during training, the eval (and dev-BLEU decode) step beside the optimizer
  state), hbm_capacity_bytes_per_chip,
  memory (per chip: params, optimizer_state, temporaries of the train step), fits,
  largest_tokens_per_batch (None unless searched), batch_search_converged (False: the probes
  ran out first and largest_tokens_per_batch is only a lower bound; None unless searched),
  smallest_unfit_tokens_per_batch (the smallest probed that does not fit), flops_per_step
  (XLA's per-chip count x chips), analytic_flops_per_step, collectives (the train step's
  [{kind, count, bytes}]), roofline (compute_s, hbm_s, ici_s, step_s, bound), step_time_s,
  xla_loop_scale (what XLA's train-step FLOPs were multiplied by, `loop_scale`),
  tokens_per_s (padded target tokens, what tokens_per_batch counts), num_train_steps,
  train_hours, steps (train / eval / decode: every compiled program's numbers of the
  largest batch), versions;
  train_compiles ([{batch, compile_s, compile_cpu_s, hbm_bytes, cached, spent_s}] per train
  batch shape the run compiles: each bucket, or the packed shape; the largest alone unless
  `all_shapes`), train_compile_s (their sum), train_compile_cpu_s, train_shape_count,
  all_shapes; the same of the dev-loss step (eval_compiles, eval_compile_s, ...: one per
  eval bucket) and of beam search (decode_compiles [{inputs, outputs, ...}], ...);
  run_compile_parts (which of train, eval, decode a training run compiles, `compiles.
  run_parts`), run_compile_s and run_compile_cpu_s (their sums: what the run spends
  compiling before its steady step), plan_compile_s (what this plan spent on them: less
  where `cache_dir` held them), plan_cache_hits. hbm_bytes_per_chip and fits count every
  compiled train shape. `cache_dir`: a `cache.PlanCache` directory (None: compile all).

  Raises:
    topology.TopologyError: libtpu is missing or the topology is unknown.
    PlanError: the slice cannot hold the config's batch at all (fewer rows than chips).
  """
  check_config_dict('make_plan', config)
  topo = topology.parse(topology_name)
  cache = cache_lib.PlanCache(cache_dir) if cache_dir else None
  run = compile_lib.Run(config, topology.devices(topo), cache)
  chip, chips = topo.chip, run.mesh.devices.size
  rows, length, train = train_stats(run)
  plan = {
      'topology': topo.name, 'chip': chip.device_kind, 'chips': chips,
      'processes': run.processes, 'dtype': str(config.dtype),
      'tokens_per_batch': int(config.tokens_per_batch), 'train_batch': [rows, length],
      'hbm_capacity_bytes_per_chip': chip.hbm_bytes, 'num_train_steps': config.num_train_steps,
      'chip_source': chip.source,
      'versions': {'jax': jax.__version__, 'libtpu': _libtpu_version()},
      'memory': run.state_bytes(), 'steps': {},
  }
  plan.update(_search_fields(run, train, chip.hbm_bytes, search_batch))
  if isinstance(train, compile_lib.DoesNotFit):
    plan.update(fits=False, hbm_bytes_per_chip=train.needed_bytes,
                compiler_message=str(train))
    return plan
  return _with_other_steps(plan, config, run, train, chip, all_shapes)


def _with_other_steps(plan: Dict[str, Any], config: ml_collections.ConfigDict,
                      run: compile_lib.Run, train: List[Any], chip: Any,
                      all_shapes: bool) -> Dict[str, Any]:
  """`plan` (its train step fits) completed with the eval and decode steps of the largest
  shapes; one of them too big for a chip makes the plan `fits` False, with the compiler's
  message."""
  rows, length = plan['train_batch']
  try:
    evaluated, decoded = run.compile_eval(rows, length), run.compile_decode()
  except compile_lib.DoesNotFit as e:  # the train step fits, but not the eval or decode step
    plan.update(fits=False, hbm_bytes_per_chip=e.needed_bytes, compiler_message=str(e))
    return plan
  plan.update(_fitted(config, run, train, evaluated, decoded, plan['memory']['optimizer_state'],
                      plan['steps'], chip, run.mesh.devices.size))
  plan['memory']['temporaries'] = max(s.temp_bytes for s in train)
  plan.update(compiles_lib.fields(run, train, evaluated, decoded, all_shapes))
  return _every_train_shape_fits(plan, chip.hbm_bytes)


def _every_train_shape_fits(plan: Dict[str, Any], capacity: int) -> Dict[str, Any]:
  """`plan` with hbm_bytes_per_chip and fits over every train shape: a run that reaches a
  bucket its chips cannot hold stops there."""
  compiles = plan['train_compiles']
  plan['hbm_bytes_per_chip'] = max([plan['hbm_bytes_per_chip']] + [
      c.get('hbm_bytes') or c.get('needed_bytes') or 0 for c in compiles])
  plan['fits'] = (plan['hbm_bytes_per_chip'] <= capacity and
                  not any('does_not_fit' in c for c in compiles))
  return plan


def loop_scale(cfg: Any, rows: int, length: int) -> float:
  """What XLA's FLOPs of a train step at `[rows, length]` are multiplied by to count every
  layer. XLA's cost analysis counts a loop's body once, and the model runs each stack's N
  identical layers (§3.1) as one loop (`scan_layers`, t2t_jax/model/stack.py): its count
  holds one layer per stack. The analytic matmul count's ratio, N layers over one, puts the
  other N - 1 back: for base at 96 x 256 on v5e:2x4, 1.5% below the unrolled program's count.
  Bytes accessed are left as XLA counts them, one layer per stack (35% below the unrolled
  count there; the logits and the optimizer dominate them, so this ratio would overshoot
  by 63%): the roofline's HBM time is then a lower bound. 1.0 for an unrolled stack."""
  if not cfg.scan_layers or (cfg.encoder_layers, cfg.decoder_layers) == (1, 1):
    return 1.0
  # XLA counts one layer of each scanned stack; a stack of one layer is not scanned.
  one = cfg.replace(num_layers=1, num_encoder_layers=None, num_decoder_layers=None)
  return (analytic.train_flops(cfg, rows, length, length) /
          analytic.train_flops(one, rows, length, length))


def train_roofline(config: ml_collections.ConfigDict, run: 'compile_lib.Run', train: List[Any],
                   chip: Any, chips: int):
  """(xla_loop_scale, FLOPs per chip, collectives, `roofline.step_seconds`) of one update
  made of the compiled `train` programs."""
  rows, length = train[0].shapes['batch']
  # Gradient steps run `accum` times; their FLOPs also count every scanned layer (loop_scale).
  steps_of = {'train_gradients': config.grad_accum_steps}
  scale = loop_scale(run.cfg, rows, length)
  flops = sum(s.flops * steps_of.get(s.name, 1) * (1 if s.name == 'train_apply' else scale)
              for s in train)
  traffic = sum(s.bytes_accessed * steps_of.get(s.name, 1) for s in train)
  collectives = [c for s in train for c in s.collectives]
  return scale, flops, collectives, roofline.step_seconds(flops, traffic, collectives, chips,
                                                          chip)


def _fitted(config: ml_collections.ConfigDict, run: 'compile_lib.Run', train: List[Any],
            evaluated: Any, decoded: Any, beside: int, steps: Dict[str, Any], chip: Any,
            chips: int) -> Dict[str, Any]:
  """The plan's numbers for a train step that compiled, beside the eval and decode steps of
  the largest shapes (all added to `steps`): HBM per chip and whether it fits, FLOPs,
  collectives and the roofline."""
  accum = config.grad_accum_steps
  rows, length = train[0].shapes['batch']
  scale, flops, collectives, times = train_roofline(config, run, train, chip, chips)
  for s in train + [evaluated, decoded]:
    steps[s.name] = _step_dict(s)
  # Training's dev evaluations run beside the optimizer state it keeps in HBM (`beside`); a
  # decode job (--mode=decode) holds the parameters alone.
  hbm = max(_peak(train), decoded.hbm_bytes,
            evaluated.hbm_bytes + beside if config.eval_every_steps else 0,
            decoded.hbm_bytes + beside if config.eval_every_steps and
            config.eval_bleu_sentences else 0)
  return dict(
      xla_loop_scale=scale,
      hbm_bytes_per_chip=hbm, fits=hbm <= chip.hbm_bytes,
      flops_per_step=flops * chips,
      analytic_flops_per_step=accum * analytic.train_flops(run.cfg, rows, length, length),
      collectives=collectives, roofline=times, step_time_s=times['step_s'],
      tokens_per_s=accum * rows * length / times['step_s'],
      train_hours=config.num_train_steps * times['step_s'] / 3600)


def gib(n: Optional[float]) -> str:
  return '?' if n is None else f'{n / GiB:.2f} GiB'


def collectives_text(collectives) -> str:
  if not collectives:
    return 'none'
  return ', '.join(f'{c["kind"]} x{c["count"]} ({c["bytes"] / 2 ** 20:,.1f} MiB)'
                   for c in collectives)


def format_plan(plan: Dict[str, Any], config_name: str = '') -> str:
  """The plan as the lines `--mode=plan` prints."""
  rows, length = plan['train_batch']
  head = (f'plan{" for " + config_name if config_name else ""} on {plan["topology"]}: '
          f'{plan["chips"]} x {plan["chip"]} ({gib(plan["hbm_capacity_bytes_per_chip"])} '
          f'HBM each), {plan["processes"]} host(s); {plan["dtype"]}; libtpu '
          f'{plan["versions"]["libtpu"]}, jax {plan["versions"]["jax"]}')
  lines = [head, f'train batch: {rows} rows x {length} tokens (the largest bucket; '
                 f'tokens_per_batch={plan["tokens_per_batch"]:,})']
  largest_line = _largest_line(plan)
  memory = plan['memory']
  if 'compiler_message' in plan:
    lines += [f'does not fit: the TPU compiler says: {plan["compiler_message"]}', largest_line]
    return '\n'.join(lines)
  steps = plan['steps']
  train_names = [n for n in steps if n.startswith('train')]
  lines += [
      f'HBM per chip: {gib(plan["hbm_bytes_per_chip"])} of '
      f'{gib(plan["hbm_capacity_bytes_per_chip"])} '
      f'({100 * plan["hbm_bytes_per_chip"] / plan["hbm_capacity_bytes_per_chip"]:.0f}%): '
      f'parameters {gib(memory["params"])}, optimizer state '
      f'{gib(memory["optimizer_state"])}, temporaries (gradients, activations) '
      f'{gib(memory["temporaries"])}; fits: {"yes" if plan["fits"] else "NO"}',
      largest_line,
      f'FLOPs per step: {plan["flops_per_step"]:.3e} (XLA) vs '
      f'{plan["analytic_flops_per_step"]:.3e} analytic (matmuls: '
      f'{plan["flops_per_step"] / plan["analytic_flops_per_step"]:.2f}x)',
      f'collectives per step: {collectives_text(plan["collectives"])}',
  ]
  r = plan['roofline']
  lines += [
      f'roofline: compute {1e3 * r["compute_s"]:.1f} ms, HBM {1e3 * r["hbm_s"]:.1f} ms, ICI '
      f'{1e3 * r["ici_s"]:.1f} ms -> {1e3 * r["step_s"]:.1f} ms per step ({r["bound"]}-bound)',
      f'{plan["tokens_per_s"]:,.0f} padded tokens/s; {plan["num_train_steps"]:,} steps in '
      f'{plan["train_hours"]:.1f} h at the roofline',
  ]
  for name in train_names + ['eval', 'decode']:
    s = steps[name]
    shapes = ', '.join(f'{k} {"x".join(map(str, v))}' for k, v in s['shapes'].items())
    lines.append(f'  {name}: {shapes}; HBM {gib(s["hbm_bytes"])}; '
                 f'{s["flops"]:.3e} FLOPs per chip; compiled in {s["compile_s"]:.0f} s')
  return '\n'.join(lines + compiles_lib.lines(plan))


def _largest_line(plan: Dict[str, Any]) -> str:
  """What the batch search found, as one line; 'at least' where it stopped unconverged."""
  largest, unfit = plan['largest_tokens_per_batch'], plan.get('smallest_unfit_tokens_per_batch')
  if not plan['batch_searched']:
    found = 'not searched'
  elif plan.get('batch_search_converged') is False:
    found = (f'at least {largest:,}' if largest else 'none of those compiled') + (
        ' (search stopped' + (f'; {unfit:,} does not fit)' if unfit else ')'))
  else:
    found = f'{largest:,} (found by compiling)' if largest else 'none of those compiled'
  return 'largest tokens_per_batch that fits: ' + found


def check_fits(plan: Dict[str, Any]) -> None:
  """PlanError (one line: by how much, and the largest batch that fits) unless it fits."""
  if plan['fits']:
    return
  capacity, needed = plan['hbm_capacity_bytes_per_chip'], plan['hbm_bytes_per_chip']
  over = (f'needs {gib(needed)} of HBM per chip, {gib(needed - capacity)} more than '
          f"{plan['chip']}'s {gib(capacity)}" if needed else
          f"does not fit {plan['chip']}'s {gib(capacity)} of HBM")
  largest = plan['largest_tokens_per_batch']
  stopped = plan.get('batch_search_converged') is False
  if not plan['batch_searched']:
    remedy = 'drop --search_batch=false to find the largest batch that fits'
  elif largest and stopped:
    remedy = (f'--config.tokens_per_batch={largest} fits (the search stopped before finding '
              'the largest)')
  elif largest:
    remedy = f'the largest batch that fits is --config.tokens_per_batch={largest}'
  elif stopped:
    remedy = ('the search stopped before any batch fitted, at --config.tokens_per_batch='
              f'{plan["smallest_unfit_tokens_per_batch"]}: try a smaller one')
  else:
    remedy = ('no batch of one row per chip fits: try --config.dtype=bfloat16, '
              '--config.remat_policy=full or --config.shard_optimizer_state=True')
  raise PlanError(f'tokens_per_batch={plan["tokens_per_batch"]} on {plan["topology"]} {over}; '
                  f'{remedy}')
