"""Device check part `sweep` (issue 55): what could move the big model's MFU, one candidate at a
time, and the fastest that keeps the numerics.

Every candidate is `configs/wmt_big.py` in bfloat16 at its ~25,000 target tokens a step in
packed rows (the smoke size with --smoke), built and timed by the train stages' own code
(`train._Trainer`: `parallel.make_train_step` compiled ahead for the batch shape, the loop's
one-step-behind sync; the clock is `benchmarks/shared/harness.py`'s), with the stage's
changes (`stages.SWEEP_STAGES`: config keys, `row_length`, or XLA flags in the stage's own
process). The same synthetic corpus and pipeline give every candidate the same batches (a
different row length: the same pairs, packed into other rows). `WARM` steps (first
executions), then `STEPS` staged steps timed; the loss per target token of all of them.

A candidate's record (emitted the moment it is measured, `part` = its name): its settings and
flags (and whether the flags were in effect: `--in-process` cannot set them), the batch shape,
compile seconds, step time, real and padded target tokens/s, MFU against the datasheet peak
(`common.KNOWN_PEAKS`, where the device is known) and against the GEMM rate this run measured
(the environment stage's, else the baseline's own), peak device memory, its losses and
`numerics`: every loss finite and the losses within `NUMERICS_RTOL` of the baseline's (each
step's on the same batches; their mean where the rows differ). Early in the paper's warmup
the weights barely move, so this catches what breaks a step (non-finite values, a wrong
mask, a gross error), not subtle drift: the attention forms are checked tightly by part 2.

`summary` (the last stage) names the winner: the most real target tokens per second among
the candidates whose numerics hold, its settings, its speed-up over the baseline, and each
candidate's status (a stage that timed out or aborted has no candidate record).
"""

import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from benchmarks.device import numerics as numerics_stage
from benchmarks.device import stages as stage_table
from benchmarks.device import train
from benchmarks.device.check import Context, goal
from benchmarks.shared import common

WARM, STEPS, SMOKE_STEPS = 2, 10, 3
SMOKE_TOKENS = 1024  # 16 rows of 64 (rows of 32 and of 128 too) on the tests' 8 CPU devices
FULL_ROW, SMOKE_ROW = 256, 64  # today's packed row length (train.wmt_config's with --smoke)
NUMERICS_RTOL = 0.02  # bf16 programs that differ in fusion and order: ~1e-3 apart at init
BASELINE = 'baseline'


def adam_mu_bf16(config, schedule):
  """`--config.optimizer` factory: the paper's Adam with its first moment in bfloat16
  (optax's `mu_dtype`; optax keeps the second moment in the parameters' float32)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import optax  # pylint: disable=import-outside-toplevel
  return optax.adam(learning_rate=schedule, b1=config.adam_b1, b2=config.adam_b2,
                    eps=config.adam_eps, mu_dtype=jnp.bfloat16)


def _stage(name: str) -> stage_table.Stage:
  return next(s for s in stage_table.STAGES if s.name == name)


def _row_config(ctx: Context, changes: Dict[str, Any], row: Optional[int]):
  """wmt_big in bf16 with `changes`; packed rows of `row` tokens (None: today's 256; the
  smoke size scales it by 64/256). The corpus is the same: pairs stay under 256 tokens."""
  config = train.wmt_config(ctx, 'big', **changes)
  if ctx.smoke:
    config.tokens_per_batch = SMOKE_TOKENS
  if row is not None:
    length = row * SMOKE_ROW // FULL_ROW if ctx.smoke else row
    config.max_length, config.bucket_lengths = length, (length // 2, length)
  config.pack_examples = True
  return config


def _batches(trainer, config, corpus, n: int) -> Tuple[Tuple[int, int], List[Dict]]:
  """The packed batch shape of `config` and its first `n` batches from the pipeline."""
  from t2t_jax.data import pipeline  # pylint: disable=import-outside-toplevel
  lengths, rows = pipeline.bucket_rows(config, trainer.mesh.size, 1)
  iterator = pipeline.make_train_iterator(config, corpus, corpus.tokenizer,
                                          rows_multiple=trainer.mesh.size)
  try:
    host = [next(iterator) for _ in range(n)]
  finally:
    iterator.close()
  return (rows[-1], lengths[-1]), host


def gemm_peak(ctx: Context) -> Optional[float]:
  """The GEMM rate this run measured: the environment stage's, else the sweep baseline's."""
  for record in reversed(ctx.records()):
    if record.get('stage') in ('environment', 'sweep_baseline') and record.get('gemm'):
      return record['gemm']['flops_per_s']
  return None


def _peaks(ctx: Context) -> Dict[str, float]:
  import jax  # pylint: disable=import-outside-toplevel
  peaks = {'datasheet': common.known_peak(jax.devices()[0].device_kind),
           'measured_gemm': gemm_peak(ctx)}
  return {k: v * len(jax.devices()) for k, v in peaks.items() if v}


def _baseline_losses(ctx: Context) -> Optional[Dict[str, Any]]:
  for record in reversed(ctx.records()):
    if record.get('candidate') == BASELINE and record.get('losses'):
      return record
  return None


def numerics(losses: List[float], baseline: Optional[Dict[str, Any]],
             same_batches: bool) -> Dict[str, Any]:
  """Whether `losses` (per target token, one a step) are finite and within NUMERICS_RTOL of
  the baseline's: step by step on the same batches, their means on other rows."""
  finite = bool(np.all(np.isfinite(losses)))
  if baseline is None:
    return {'ok': finite, 'finite': finite, 'checked_against': 'itself (the reference)'}
  ref = np.asarray(baseline['losses'], np.float64)
  ours = np.asarray(losses, np.float64)
  if same_batches and len(ref) == len(ours):
    error = float(np.max(np.abs(ours - ref) / np.abs(ref)))
  else:
    error = float(abs(ours.mean() - ref.mean()) / abs(ref.mean()))
  return {'ok': finite and error <= NUMERICS_RTOL, 'finite': finite, 'rel_error': error,
          'bound': NUMERICS_RTOL, 'same_batches': same_batches,
          'compared': 'each step' if same_batches else 'the mean over the steps'}


def _measure(ctx: Context, trainer, shape, host, peaks) -> Dict[str, Any]:
  """WARM then the timed steps on `host` (placed first) from the trainer's state; the
  record's numbers."""
  placed = [trainer.parallel.shard_batch(b, trainer.mesh) for b in host]
  size = train._size(trainer.config)  # pylint: disable=protected-access
  flops_of = lambda s: common.train_flops(size, s[0], s[1], s[1])  # noqa: E731
  metrics: List[Dict[str, Any]] = []
  trainer.run(placed[:WARM], flops_of, metrics)
  timed = trainer.run(placed[WARM:], flops_of, metrics)
  steps = len(placed) - WARM
  weights = [float(m['weight']) for m in metrics]
  losses = [float(m['loss']) / max(w, 1.0) for m, w in zip(metrics, weights)]
  real = sum(int(np.count_nonzero(b['targets'])) for b in host[WARM:])
  seconds = timed['seconds']
  return {'shape': f'{shape[0]}x{shape[1]}', 'steps': steps, 'step_time_s': seconds / steps,
          'real_target_tokens_per_s': real / seconds,
          'padded_target_tokens_per_s': timed['padded_tokens'] / seconds,
          'mfu': {k: timed['flops'] / seconds / v for k, v in peaks.items()},
          'losses': losses, 'nonfinite_steps': int(sum(float(m['nonfinite']) for m in metrics))}


def candidate(ctx: Context) -> Dict[str, Any]:
  """The stage's candidate(s) (`stages.SWEEP_STAGES`): each recorded when measured."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  stage = _stage(ctx.stage)
  changes = dict(stage.settings)
  rows = changes.pop('row_length', None)
  rows = rows if isinstance(rows, tuple) else (rows,)
  record: Dict[str, Any] = {'candidates': {}}
  if stage.name == 'sweep_baseline' and gemm_peak(ctx) is None:  # no environment stage ran
    record['gemm'] = numerics_stage.gemm_rate(
        64 if ctx.smoke else numerics_stage.GEMM if jax.default_backend() != 'cpu' else 1024)
    ctx.emit({'part': 'gemm', 'status': 'partial', 'gemm': record['gemm'], 'summary': {
        'gemm_bf16_TFLOPs': record['gemm']['flops_per_s'] / 1e12}})
  substituted = {}
  if changes.get('attention_impl') == 'cudnn' and jax.default_backend() != 'gpu':
    # cuDNN's attention needs an NVIDIA GPU: a rehearsal elsewhere runs XLA's (recorded).
    changes['attention_impl'] = substituted['attention_impl'] = 'xla'
  configs = [_row_config(ctx, changes, row) for row in rows]
  trainer = train._Trainer(configs[0])  # pylint: disable=protected-access
  corpus = train.SyntheticCorpus(3_000 if ctx.smoke else 20_000, configs[0].vocab_size,
                                 FULL_ROW if not ctx.smoke else SMOKE_ROW)
  steps = WARM + (SMOKE_STEPS if ctx.smoke else STEPS)
  data = [_batches(trainer, config, corpus, steps) for config in configs]
  compile_s = trainer.compile([shape for shape, _ in data], packed=True)
  initial = jax.tree_util.tree_map(jnp.copy, trainer.state) if len(rows) > 1 else None
  peaks, baseline = _peaks(ctx), _baseline_losses(ctx)
  for row, config, (shape, host) in zip(rows, configs, data):
    name = stage.name[len('sweep_'):] + (f'_{row}' if len(rows) > 1 else '')
    if initial is not None:
      trainer.state = jax.tree_util.tree_map(jnp.copy, initial)
    result = _measure(ctx, trainer, shape, host, peaks)
    result.update(_settings_record(stage, config, row), substituted=substituted,
                  compile_s=compile_s[result['shape']],
                  peak_device_memory_bytes=train._peak_memory(),  # pylint: disable=protected-access
                  numerics=numerics(result['losses'], baseline, row is None))
    result['summary'] = _line(result)
    record['candidates'][name] = ctx.emit(dict(result, part=name, status='partial',
                                               candidate=name))
  record['summary'] = {name: f'{r["step_time_s"] * 1e3:.1f} ms' for name, r in
                       record['candidates'].items()}
  return record


def _settings_record(stage, config, row) -> Dict[str, Any]:
  """The candidate's exact settings: its config changes, row length and XLA flags."""
  settings = {k: v for k, v in stage.settings if k != 'row_length'}
  if row is not None:
    settings.update(max_length=config.max_length, bucket_lengths=list(config.bucket_lengths))
  flags = os.environ.get('XLA_FLAGS', '')
  return {'settings': settings, 'xla_flags': stage.xla_flags,
          'xla_flags_in_effect': bool(stage.xla_flags) and stage.xla_flags in flags,
          'tokens_per_batch': config.tokens_per_batch}


def _line(r: Dict[str, Any]) -> Dict[str, Any]:
  return {'step_ms': 1e3 * r['step_time_s'], 'real_tok_per_s': r['real_target_tokens_per_s'],
          'mfu_datasheet': r['mfu'].get('datasheet'), 'mfu_gemm': r['mfu'].get('measured_gemm'),
          'compile_s': r['compile_s'], 'numerics_ok': r['numerics']['ok'],
          'peak_mem_GiB': (r['peak_device_memory_bytes'] or 0) / 2 ** 30}


def summary(ctx: Context) -> Dict[str, Any]:
  """The winner among this run's candidate records: the most real target tokens/s whose
  numerics hold; each sweep stage's status beside."""
  records = ctx.records()
  found = {r['candidate']: r for r in records if r.get('candidate')
           and r.get('stage', '').startswith('sweep_')}
  statuses = {r['stage']: r['status'] for r in records if r.get('stage', '').startswith('sweep_')
              and r.get('stage') != 'sweep_summary' and r.get('status') != 'partial'}
  base = found.get(BASELINE)
  rate = lambda r: r['real_target_tokens_per_s']  # noqa: E731
  table = {name: {'step_ms': 1e3 * r['step_time_s'], 'real_tok_per_s': rate(r),
                  'mfu': r['mfu'], 'numerics_ok': r['numerics']['ok'],
                  'vs_baseline': rate(r) / rate(base) if base else None,
                  'settings': r['settings'], 'xla_flags': r['xla_flags']}
           for name, r in found.items()}
  eligible = [n for n, r in found.items() if r['numerics']['ok']]
  winner = max(eligible, key=lambda n: rate(found[n]), default=None)
  best = table.get(winner, {})
  record = {'candidates': table, 'stage_status': statuses, 'winner': winner,
            'winner_settings': {'settings': best.get('settings'),
                                'xla_flags': best.get('xla_flags')},
            'goals': [], 'summary': {
                'winner': winner, 'vs_baseline': best.get('vs_baseline'),
                'mfu_datasheet': best.get('mfu', {}).get('datasheet'),
                'measured': len(found), 'numerics_failed': len(found) - len(eligible)}}
  if winner and best.get('mfu', {}).get('datasheet') is not None:
    mfu = best['mfu']['datasheet']
    record['goals'].append(goal('MFU >= 40% of the datasheet peak (big, the winner)', mfu,
                                mfu >= 0.4))
  record['status'] = 'ok' if found else 'error'
  return record
