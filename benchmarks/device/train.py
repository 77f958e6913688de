"""Device check stages (benchmarks/device/check.py): training speed, feeding, compiling, decoding.

train_base / train_big: `configs/wmt_base.py` / `wmt_big.py` in bfloat16 at their 25,000
target tokens a step, fed by the project's pipeline (`pipeline.make_train_iterator`, token
store, bucketed or packed) from a synthetic corpus with WMT-like lengths, through
`parallel.make_train_step` as the training loop drives it (each step dispatched, then the
previous step's non-finite flag read: the loop's one-step-behind sync). Every batch shape is
compiled first (in threads, at once), then:

  fed     `steps` steps pulling each batch from the iterator and placing it (`shard_batch`)
  staged  the same batches, placed on the device beforehand, back to back

The device waits for data `1 - staged / fed` of the time (the goal: under 2%). Step time,
real and padded target tokens/s, MFU (analytic matmul FLOPs of the padded batch against the
chip's bf16 dense peak, `common.KNOWN_PEAKS`), peak device memory. The PyTorch peer
(`benchmarks/shared/torch_peer.py`, eager and torch.compile, bf16 autocast) trains on a random batch
of the packed shape, and ours on the same shape staged: tokens/s ratio ours / best peer.
"""

import concurrent.futures
import importlib.util
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from benchmarks.device.check import Context, goal
from benchmarks.device.numerics import SMOKE_SIZE
from benchmarks.shared import common, harness

SMOKE_TOKENS = 512


class SyntheticCorpus:
  """`n` pairs of WMT-like token lengths: source ~ lognormal around 24 tokens (WMT14 EN-DE's
  SentencePiece lengths: mean ~27, a long tail to the 256 cap), target = source x
  lognormal(0, 0.15). A pair's "text" names it; `tokenizer` returns its random ids."""

  def __init__(self, n: int, vocab_size: int, max_length: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    src = np.clip(rng.lognormal(np.log(24), 0.6, n), 1, max_length - 1).astype(np.int64)
    tgt = np.clip(src * rng.lognormal(0, 0.15, n), 1, max_length - 1).astype(np.int64)
    self.lengths = {'source': src, 'target': tgt}
    self.ids = {side: rng.integers(2, vocab_size, int(lens.sum())).astype(np.int32)
                for side, lens in self.lengths.items()}
    self.offsets = {side: np.concatenate([[0], np.cumsum(lens)])
                    for side, lens in self.lengths.items()}
    self.tokenizer = _Tokenizer(self, vocab_size)

  def __len__(self) -> int:
    return len(self.lengths['source'])

  def __getitem__(self, i: int) -> Dict[str, str]:
    return {'source': f'source {i}', 'target': f'target {i}'}


class _Tokenizer:
  def __init__(self, corpus: SyntheticCorpus, vocab_size: int):
    self.corpus, self.vocab_size = corpus, vocab_size

  def encode_batch(self, texts: List[str]) -> List[np.ndarray]:
    out = []
    for text in texts:
      side, i = text.split()
      off = self.corpus.offsets[side]
      out.append(self.corpus.ids[side][off[int(i)]:off[int(i) + 1]])
    return out


def wmt_config(ctx: Context, name: str, **changes):
  """configs/wmt_<name>.py (the smoke size and batch with --smoke) in bfloat16."""
  config = importlib.import_module(f'configs.wmt_{name}').get_config()
  config.dtype = 'bfloat16'
  if ctx.smoke:
    for key, value in SMOKE_SIZE.items():
      setattr(config, key, value)
    config.tokens_per_batch, config.max_length = SMOKE_TOKENS, 64
    config.bucket_lengths = (32, 64)  # two shapes, so that bucketing is exercised
    config.decode_batch_sentences = 8
  for key, value in changes.items():
    setattr(config, key, value)
  return config


def _size(config) -> Dict[str, Any]:
  return {k: config[k] for k in ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'num_layers',
                                 'dropout_rate')}


class _Trainer:
  """The run's model, optimizer, state and train step on every device, each batch shape
  compiled ahead (`compiled[(rows, length)]`)."""

  def __init__(self, config):
    import jax  # pylint: disable=import-outside-toplevel
    from t2t_jax.model import transformer  # pylint: disable=import-outside-toplevel
    from t2t_jax.runtime import parallel  # pylint: disable=import-outside-toplevel
    from t2t_jax.training import optim  # pylint: disable=import-outside-toplevel
    self.config, self.parallel = config, parallel
    self.mesh = parallel.make_mesh(jax.devices())
    self.cfg = transformer.TransformerConfig.from_config(config)
    optimizer = optim.make_optimizer(config)
    self.state = parallel.create_train_state(self.cfg, optimizer, 0, self.mesh)
    self.step = parallel.make_train_step(self.cfg, optimizer, self.mesh,
                                         label_smoothing=config.label_smoothing, seed=0)
    self.compiled: Dict[Tuple[int, int], Any] = {}

  def compile(self, shapes: List[Tuple[int, int]], packed: bool) -> Dict[str, float]:
    """Compiles the step for every `(rows, length)` at once (threads); seconds per shape."""
    import jax  # pylint: disable=import-outside-toplevel
    import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
    keys = ('inputs', 'targets') + (self.parallel.PACKING_KEYS if packed else ())
    sharding = self.parallel.data_sharded(self.mesh)

    def one(shape):
      spec = jax.ShapeDtypeStruct(shape, jnp.int32, sharding=sharding)
      compiled, seconds = harness.time_call(
          lambda: self.step.lower(self.state, {k: spec for k in keys}).compile())
      return shape, compiled, seconds

    todo = [s for s in shapes if (s, packed) not in self.compiled]
    seconds = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, min(8, len(todo)))) as pool:
      for shape, compiled, s in pool.map(one, todo):
        self.compiled[shape, packed], seconds[f'{shape[0]}x{shape[1]}'] = compiled, s
    return seconds

  def run(self, batches, flops_of, metrics_out: Optional[list] = None) -> Dict[str, float]:
    """Steps over `batches` (host dicts, or placed ones) as the loop drives them: each step
    dispatched, then the previous step's non-finite flag read. Returns seconds and sums;
    each step's metrics (on the device, read after the clock) are appended to `metrics_out`."""
    import jax  # pylint: disable=import-outside-toplevel
    pending, flops, padded = None, 0, 0
    clock = harness.timed().start()
    for batch in batches:
      shape = tuple(batch['targets'].shape)
      placed = batch if isinstance(batch['targets'], jax.Array) else self.parallel.shard_batch(
          batch, self.mesh)
      packed = self.parallel.PACKING_KEYS[0] in batch
      self.state, metrics = self.compiled[shape, packed](self.state, placed)
      if pending is not None:
        float(pending)
      pending = metrics['nonfinite']
      if metrics_out is not None:
        metrics_out.append(metrics)
      flops, padded = flops + flops_of(shape), padded + shape[0] * shape[1]
    jax.block_until_ready(self.state)
    seconds = clock.stop().seconds
    return {'seconds': seconds, 'flops': flops, 'padded_tokens': padded}


def _layout(trainer: _Trainer, corpus: SyntheticCorpus, packed: bool, steps: int,
            peaks: Dict[str, float], ctx: Context) -> Dict[str, Any]:
  """One layout (packed or bucketed): compile, fed steps, staged steps."""
  from t2t_jax.data import pipeline  # pylint: disable=import-outside-toplevel
  config = trainer.config
  config.pack_examples = packed
  lengths, rows = pipeline.bucket_rows(config, trainer.mesh.size, 1)
  shapes = [(r, n) for r, n in zip(rows, lengths)][-1:] if packed else list(zip(rows, lengths))
  with harness.timed() as t:
    compile_s = trainer.compile(shapes, packed)
  iterator = pipeline.make_train_iterator(config, corpus, corpus.tokenizer,
                                          rows_multiple=trainer.mesh.size)
  size = _size(config)
  flops_of = lambda shape: common.train_flops(size, shape[0], shape[1], shape[1])  # noqa: E731
  trainer.run([next(iterator) for _ in range(2)], flops_of)  # warm: first executions
  host: List[Dict[str, np.ndarray]] = []

  def pulled():
    for _ in range(steps):
      host.append(next(iterator))
      yield host[-1]

  fed = trainer.run(pulled(), flops_of)
  iterator.close()
  placed = [trainer.parallel.shard_batch(b, trainer.mesh) for b in host]
  staged = trainer.run(placed, flops_of)
  real = sum(int(np.count_nonzero(b['targets'])) for b in host)
  record = {
      'shapes': [f'{r}x{n}' for r, n in shapes], 'compile_s': compile_s,
      'compile_wall_s': t.seconds, 'steps': steps,
      'step_time_s': fed['seconds'] / steps, 'staged_step_time_s': staged['seconds'] / steps,
      'real_target_tokens_per_batch': real / steps,
      'padded_target_tokens_per_batch': fed['padded_tokens'] / steps,
      'real_target_tokens_per_s': real / fed['seconds'],
      'padded_target_tokens_per_s': fed['padded_tokens'] / fed['seconds'],
      'mfu': {k: fed['flops'] / fed['seconds'] / v for k, v in peaks.items()},
      'wait_fraction': max(0.0, 1.0 - staged['seconds'] / fed['seconds'])}
  return record


# Seconds torch.compile needs before its first step on an H100 (a guess until the first GPU
# run measures it): it starts only with that much of the box left.
TORCH_COMPILE_S = {'base': 40, 'big': 50}


def _train(ctx: Context, name: str) -> Dict[str, Any]:
  """Ours packed, then the peer eager on its shape, then the peer torch.compile'd (while the
  box allows): each recorded the moment it is measured, so a kill keeps the ones before."""
  import jax  # pylint: disable=import-outside-toplevel
  from benchmarks.device import numerics  # pylint: disable=import-outside-toplevel
  config = wmt_config(ctx, name)
  peaks = {'datasheet': common.known_peak(jax.devices()[0].device_kind),
           'measured_gemm': numerics.measured_peak(ctx)}
  peaks = {k: v * len(jax.devices()) for k, v in peaks.items() if v}
  corpus = SyntheticCorpus(3_000 if ctx.smoke else 60_000, config.vocab_size, config.max_length)
  trainer = _Trainer(config)
  steps = 3 if ctx.smoke else (20 if name == 'base' else 10)
  record: Dict[str, Any] = {'config': f'wmt_{name} bfloat16', 'tokens_per_batch':
                            config.tokens_per_batch, 'peak_flops': peaks, 'goals': [],
                            'peer': {}}
  packed = _layout(trainer, corpus, True, steps, peaks, ctx)
  packed['peak_device_memory_bytes'] = _peak_memory()
  _emit_layout(ctx, record, 'packed', packed)
  shape = tuple(int(x) for x in packed['shapes'][0].split('x'))
  peer = _Peer(f'device_check_{name}', _size(config), shape)
  for mode in ('eager', 'compiled'):
    if mode == 'compiled' and ctx.left() < (5 if ctx.smoke else TORCH_COMPILE_S[name]):
      record['peer']['compiled_skipped'] = f'{ctx.left():.0f} s left in the box'
      break
    try:
      result = peer.run(mode, steps)
    except Exception as e:  # pylint: disable=broad-except  (ours stays recorded)
      result = {f'{mode}_error': f'{type(e).__name__}: {e}'.splitlines()[0][:300]}
    record['peer'].update(result)
    if mode in result:
      ctx.emit({'part': f'peer_{mode}', 'status': 'partial', **result[mode], 'summary': {
          'step_ms': 1e3 * result[mode]['step_time_s'],
          'ours_over_peer': result[mode]['step_time_s'] / packed['staged_step_time_s']}})
  ours_s = packed['staged_step_time_s']
  peer_best = min((record['peer'][m]['step_time_s'] for m in ('eager', 'compiled')
                   if m in record['peer']), default=None)
  record['ratio_ours_over_best_peer'] = peer_best / ours_s if peer_best else None
  record['goals'].append(goal('the device waits for batches < 2% of the time (packed)',
                              packed['wait_fraction'], packed['wait_fraction'] < 0.02))
  if record['ratio_ours_over_best_peer'] is not None:
    record['goals'].append(goal('ours >= 1.0x the best PyTorch peer (same shape)',
                                record['ratio_ours_over_best_peer'],
                                record['ratio_ours_over_best_peer'] >= 1.0))
  mfu = packed['mfu']
  if name == 'big' and mfu.get('datasheet') is not None:
    record['goals'].append(goal('MFU >= 40% of the datasheet peak (big, packed)',
                                mfu['datasheet'], mfu['datasheet'] >= 0.4))
  record['summary'] = {'packed_ms': 1e3 * packed['step_time_s'],
                       'real_tok_per_s': packed['real_target_tokens_per_s'],
                       'mfu_datasheet': mfu.get('datasheet'),
                       'mfu_gemm': mfu.get('measured_gemm'), 'wait': packed['wait_fraction'],
                       'vs_peer': record['ratio_ours_over_best_peer'],
                       'peak_mem_GiB': (packed['peak_device_memory_bytes'] or 0) / 2 ** 30}
  return record


def _peak_memory():
  import jax  # pylint: disable=import-outside-toplevel
  device = jax.devices()[0]
  stats = device.memory_stats() if hasattr(device, 'memory_stats') else None
  return (stats or {}).get('peak_bytes_in_use')


def train_bucketed(ctx: Context) -> Dict[str, Any]:
  """wmt_base's bucketed layout (every bucket shape compiled, fed and staged steps): part 3,
  run when the two commands left time."""
  import jax  # pylint: disable=import-outside-toplevel
  from benchmarks.device import numerics  # pylint: disable=import-outside-toplevel
  config = wmt_config(ctx, 'base')
  peaks = {'datasheet': common.known_peak(jax.devices()[0].device_kind),
           'measured_gemm': numerics.measured_peak(ctx)}
  peaks = {k: v * len(jax.devices()) for k, v in peaks.items() if v}
  corpus = SyntheticCorpus(3_000 if ctx.smoke else 60_000, config.vocab_size, config.max_length)
  record = _layout(_Trainer(config), corpus, False, 3 if ctx.smoke else 20, peaks, ctx)
  record['summary'] = {'step_ms': 1e3 * record['step_time_s'],
                       'real_tok_per_s': record['real_target_tokens_per_s'],
                       'real_per_batch': record['real_target_tokens_per_batch'],
                       'wait': record['wait_fraction'],
                       'compile_s': sum(record['compile_s'].values())}
  return record


def _emit_layout(ctx: Context, record: Dict[str, Any], layout: str, r: Dict[str, Any]) -> None:
  record[layout] = r
  ctx.emit({'part': layout, 'status': 'partial', **r, 'summary': {
      'step_ms': 1e3 * r['step_time_s'], 'real_tok_per_s': r['real_target_tokens_per_s'],
      'real_per_batch': r['real_target_tokens_per_batch'],
      'mfu_datasheet': r['mfu'].get('datasheet'), 'mfu_gemm': r['mfu'].get('measured_gemm'),
      'wait': r['wait_fraction'], 'compile_s': sum(r['compile_s'].values())}})


class _Peer:
  """The PyTorch peer (`train_step._PeerRunner`: torch.nn.Transformer, the same loss and Adam,
  bf16 autocast on a GPU) on a random `[rows, length]` batch; None of it without torch."""

  def __init__(self, size_name: str, size: Dict[str, Any], shape: Tuple[int, int]):
    try:
      import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
      self.torch = None
      return
    common.SIZES.setdefault(size_name, size)
    self.torch, self.size_name, self.shape = torch, size_name, shape
    self.host = {k: np.random.default_rng(0).integers(2, size['vocab_size'], shape,
                                                       dtype=np.int32)
                 for k in ('inputs', 'targets')}
    self.device = 'cuda' if torch.cuda.is_available() else 'cpu'

  def _runner(self, torch_compile: bool):
    from benchmarks.peers import train_step  # pylint: disable=import-outside-toplevel
    return train_step._PeerRunner(self.size_name, self.host, 'bfloat16', self.device, 1,  # pylint: disable=protected-access
                                  torch_compile, '0')

  def _free(self) -> None:
    if self.device == 'cuda':
      self.torch.cuda.empty_cache()

  def run(self, mode: str, steps: int) -> Dict[str, Any]:
    """{mode: step time, ...} of the peer 'eager' or 'compiled' (torch.compile); where it
    cannot run, {mode + '_skipped' or '_error': why}."""
    if self.torch is None:
      return {f'{mode}_skipped': 'torch is not installed'}
    runner = self._runner(mode == 'compiled')
    if mode not in runner.info:
      return {f'{mode}_error': runner.info.get(f'{mode}_error', 'did not run')}
    out = {'device': self.device, mode: dict(
        runner.info[mode], step_time_s=float(np.median(runner.steps(mode, steps))),
        peak_device_memory_bytes=runner.peak_memory())}
    del runner
    self._free()
    return out


def train_base(ctx: Context) -> Dict[str, Any]:
  return _train(ctx, 'base')


def train_big(ctx: Context) -> Dict[str, Any]:
  return _train(ctx, 'big')


def compile_times(ctx: Context) -> Dict[str, Any]:
  """Seconds to compile every program a base run compiles on this device (`plan.compile.Run`,
  as `--mode=plan` lists them): the train step per batch shape, the dev eval per shape, and
  beam-search decoding per source bucket (a run decodes for dev BLEU or a final evaluation)."""
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax.plan import compile as plan_compile, compiles  # pylint: disable=import-outside-toplevel
  run = plan_compile.Run(wmt_config(ctx, 'base'), jax.devices())
  seconds: Dict[str, float] = {}
  for label, compile_program in compiles.programs(run):
    if ctx.left() < 5:
      break
    seconds[label] = sum(s.compile_s for s in compile_program())
    ctx.emit({'part': label.split()[0], 'status': 'partial', 'program': label,
              'compile_s': seconds[label], 'summary': {'program': label,
                                                       'compile_s': seconds[label]}})
  total = sum(seconds.values())
  return {'compile_s': seconds, 'total_s': total,
          'summary': {'programs': len(seconds), 'total_s': total}}


def decode_speed(ctx: Context) -> Dict[str, Any]:
  """Beam 4 at base size on 128 sentences of 32 tokens (random weights run every hypothesis to
  the length limit, 82 steps: the worst case), ours against the peer on the same device."""
  import argparse  # pylint: disable=import-outside-toplevel
  from benchmarks.peers import decode  # pylint: disable=import-outside-toplevel
  size_name = 'base'
  if ctx.smoke:
    size_name = 'device_check_smoke'
    common.SIZES.setdefault(size_name, SMOKE_SIZE)
  no_peer = importlib.util.find_spec('torch') is None
  args = argparse.Namespace(alpha=0.6, rounds=1 if ctx.smoke else 3, torch_threads='0',
                            no_peer=no_peer)
  batch, src_len = (8, 8) if ctx.smoke else (128, 32)
  records = []
  record = decode.bench(size_name, batch, src_len, src_len + 50, 4, args, records.append,
                        common.CompileCounter())
  record = records[-1] if records else record
  ours = record['ours']['sentences_per_s']
  ratio = (record.get('ratio_ours_over_peer') or {}).get('sentences_per_s')
  out = {'decode': record, 'goals': [], 'summary': {'sentences_per_s': ours, 'vs_peer': ratio}}
  if ratio is not None:
    out['goals'].append(goal('beam-4 decode >= 1.0x the PyTorch peer', ratio, ratio >= 1.0))
  return out
