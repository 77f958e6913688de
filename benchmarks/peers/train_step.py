"""Training-step throughput: t2t_jax's `parallel.make_train_step` against a PyTorch peer.

Ours: `make_train_step` (label smoothing 0.1, dropout as the size says, Adam 0.9/0.98/1e-9
with the paper's schedule) on a mesh of one device on CPU, all devices on GPU. The peer
(`benchmarks/shared/torch_peer.py`): torch.nn.Transformer with the same sizes, loss, optimizer and
batch, eager and (where it works) torch.compile'd, in a child process on CPU, interleaved with
ours round by round so machine load hits both alike (`harness.interleave`: each round the
matmul peak on CPU, `--steps` of ours, of the peer eager and compiled, the order rotated by
one each round; the peer's steps are timed in its process).

Batches are `rows x length` random token ids in [2, vocab) for both sources and targets (no
padding), so "target tokens" = rows * length.

Model FLOPs per step (see `common.forward_flops`): 3 x the forward matmul FLOPs, counting
2*m*n*k for every matmul: Q/K/V/O projections, the FFN, the pre-softmax projection over the
vocabulary, and the attention score (Q K^T) and weighted-sum (A V) matmuls over full
(masked) length x length matrices. Fraction of peak: model FLOP/s over the same-run jitted
float32 matmul FLOP/s (`matmul_peak.py`) on CPU; MFU against the known bf16 dense peak on GPU.

  python -m benchmarks.peers.train_step --sizes tiny,base --tokens 4096 --length 64 --out FILE
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from benchmarks.peers import matmul_peak  # noqa: E402
from benchmarks.shared import common, harness  # noqa: E402


def _jax_setup(size_name, dtype, rows, length, seed=0, attention_impl=''):
  import jax
  from configs import default
  from t2t_jax.model import transformer as model
  from t2t_jax.runtime import parallel
  from t2t_jax.training import optim
  config = default.get_config()
  for key, value in common.SIZES[size_name].items():
    setattr(config, key, value)
  config.dtype = dtype
  config.attention_impl = attention_impl
  cfg = model.TransformerConfig.from_config(config)
  devices = jax.devices()[:1] if jax.default_backend() == 'cpu' else jax.devices()
  mesh = parallel.make_mesh(devices)
  optimizer = optim.make_optimizer(config)
  state = parallel.create_train_state(cfg, optimizer, seed, mesh)
  step = parallel.make_train_step(cfg, optimizer, mesh, label_smoothing=config.label_smoothing,
                                  seed=seed)
  host = _host_batch(config.vocab_size, rows, length, seed)
  return dict(cfg=cfg, config=config, mesh=mesh, state=state, step=step, host=host,
              batch=parallel.shard_batch(host, mesh), devices=devices)


def _host_batch(vocab_size, rows, length, seed):
  """`rows x length` random ids in [2, vocab) for inputs and targets (no padding)."""
  rng = np.random.default_rng(seed)
  return {k: rng.integers(2, vocab_size, (rows, length), dtype=np.int32)
          for k in ('inputs', 'targets')}


class _PeerRunner:
  """The peer's model, optimizer and batch, warmed up; `system(mode)` is one step of 'eager'
  or 'compiled' for `harness.interleave`, `steps(mode, n)` the times of n steps."""

  def __init__(self, size_name, host, dtype, device, warmup, torch_compile, torch_threads):
    import torch
    from benchmarks.shared import torch_peer
    size = common.SIZES[size_name]
    torch.set_num_threads(os.cpu_count())
    autocast = torch.bfloat16 if dtype == 'bfloat16' and device == 'cuda' else None
    torch.manual_seed(0)
    model = torch_peer.PeerTransformer(size).to(device).train()
    opt, sched, opt_impl = torch_peer.make_optimizer(model, size['d_model'])
    src = torch.from_numpy(host['inputs']).long().to(device)
    tgt = torch.from_numpy(host['targets']).long().to(device)
    sync = (torch.cuda.synchronize if device == 'cuda' else (lambda: None))

    def step(fwd):
      torch_peer.train_step(model, fwd, opt, sched, src, tgt, autocast=autocast)
      sync()

    self.step, self.fwd = step, {'eager': model}
    self.info = {'eager': {'optimizer': opt_impl, 'device': device}}
    with harness.timed() as t:
      for _ in range(warmup):
        step(model)
    self.info['eager']['warmup_s'] = t.seconds
    if device == 'cpu':
      self.info['eager']['torch_threads'] = common.pick_torch_threads(lambda: step(model),
                                                                      torch_threads)
    if torch_compile:
      try:
        compiled = torch.compile(model)
        _, first_call_s = harness.time_call(step, compiled)
        self.info['compiled'] = {'first_call_s': first_call_s}
        for _ in range(warmup):
          step(compiled)
        self.fwd['compiled'] = compiled
      except Exception as e:  # noqa: BLE001 - reported, not fatal
        msg = f'{type(e).__name__}: {e}'.splitlines()[0][:300]
        self.info['compiled_error'] = msg
        print(f'torch.compile failed: {msg}', file=sys.stderr)
    if device == 'cuda':
      torch.cuda.reset_peak_memory_stats()

  def system(self, mode):
    return lambda: self.step(self.fwd[mode])

  def steps(self, mode, n):
    return [harness.time_call(self.system(mode))[1] for _ in range(n)]

  def peak_memory(self):
    import torch
    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None


class _PeerProcess:
  """A `_PeerRunner` in a child process, driven round by round over a pipe.

  On CPU the peer runs in its own process, so the sides share the machine and its load but no
  allocator or thread pools. (In one process, our base step went from 19.5 s to 24-30 s once
  the peer had taken steps; a separate process still shows most of that, so it comes from the
  machine's memory system: see docs/performance.md.)
  """

  def __init__(self, spec):
    self.child = harness.ChildProcess('benchmarks.peers.train_step', '--peer-server', 'peer')
    self.info = self.child.call(spec)

  def steps(self, mode, n):
    return self.child.call({'steps': n, 'mode': mode})

  def system(self, mode):
    """One step timed in the child (the pipe's round trip does not count)."""
    return lambda: harness.Measured(self.steps(mode, 1)[0])

  def peak_memory(self):
    return None

  def close(self):
    self.child.close()


def _serve_peer():
  """Child side of `_PeerProcess` (`harness.child_protocol`)."""
  spec, reply = harness.child_protocol()
  host = _host_batch(common.SIZES[spec['size']]['vocab_size'], spec['rows'], spec['length'],
                     spec['seed'])
  runner = _PeerRunner(spec['size'], host, spec['dtype'], 'cpu', spec['warmup'],
                       spec['torch_compile'], spec['torch_threads'])
  reply(runner.info)
  for request in harness.requests():
    reply(runner.steps(request['mode'], request['steps']))


def _check_same_function(size_name, jx, params, peer_cls, load, torch, device):
  """NLL of both models with our parameters on a small batch, no dropout: must agree."""
  import jax
  from t2t_jax.runtime import parallel
  ev = parallel.make_eval_step(jx['cfg'].replace(dtype=np.float32), jx['mesh'],
                               label_smoothing=0.0)
  host = {k: v[:jx['mesh'].size * 2, :16] for k, v in jx['host'].items()}
  m = jax.device_get(ev(params, parallel.shard_batch(host, jx['mesh'])))
  ours = float(m['nll'] / m['weight'])
  peer = peer_cls(common.SIZES[size_name]).to(device).eval()
  load(peer, jax.device_get(params))
  from benchmarks.shared import torch_peer
  with torch.no_grad():
    src = torch.from_numpy(host['inputs']).long().to(device)
    tgt = torch.from_numpy(host['targets']).long().to(device)
    loss, _ = torch_peer.loss_fn(peer(src, torch_peer.shift_right(tgt)), tgt, 0.0)
  return {'ours_nll': ours, 'peer_nll': float(loss), 'abs_diff': abs(ours - float(loss))}


def _ours_first_calls(jx, warmup, counter):
  """Our step's first (compiling) call and `warmup` more: (state, its info)."""
  import jax
  batch, step = jx['batch'], jx['step']

  def call(state):
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    return state

  with counter.window() as compiles:
    state, first_call_s = harness.time_call(call, jx['state'])
    for _ in range(warmup):
      state = call(state)
  ours = {'first_call_s': first_call_s, 'compile_s': compiles['seconds'],
          'functions': compiles['functions']}
  try:
    mem = step.lower(state, batch).compile().memory_analysis()
    ours['xla_memory_analysis'] = {
        k: getattr(mem, k) for k in ('argument_size_in_bytes', 'output_size_in_bytes',
                                     'temp_size_in_bytes', 'generated_code_size_in_bytes')
        if hasattr(mem, k)}
  except Exception as e:  # noqa: BLE001 - informational only
    ours['xla_memory_analysis'] = f'unavailable: {e!r}'
  return state, ours


def _start_peer(size_name, rows, length, jx, args, on_cpu):
  """The peer, on the same device kind, same batch: a child process on CPU (see
  _PeerProcess), in this process on GPU (two processes would split the device's memory)."""
  compile_peer = size_name in args.torch_compile.split(',')
  if on_cpu:
    return _PeerProcess({'size': size_name, 'rows': rows, 'length': length, 'seed': 0,
                         'dtype': args.dtype, 'warmup': args.warmup,
                         'torch_compile': compile_peer, 'torch_threads': args.torch_threads})
  import torch
  return _PeerRunner(size_name, jx['host'], args.dtype,
                     'cuda' if torch.cuda.is_available() else 'cpu', args.warmup,
                     compile_peer, args.torch_threads)


def _timed_rounds(jx, state, runner, args, on_cpu):
  """Interleaved rounds of the matmul peak (CPU), our steps and the peer's (eager, compiled):
  (times {system: [s]}, peak samples [FLOP/s], final state, last metrics)."""
  import jax
  holder, peaks = {'state': state}, []

  def ours():
    holder['state'], holder['metrics'] = jx['step'](holder['state'], jx['batch'])
    jax.block_until_ready(holder['metrics'])

  systems = {}
  if on_cpu:
    systems['matmul_peak'] = lambda: peaks.append(
        matmul_peak.jax_matmul_peak(repeats=args.peak_repeats)['flops_per_s'])
  systems['ours'] = ours
  for mode in ('eager', 'compiled'):
    if runner is not None and mode in runner.info:
      systems[f'peer_{mode}'] = runner.system(mode)
  repeats = {name: 1 if name == 'matmul_peak' else args.steps for name in systems}
  times = harness.interleave(systems, args.rounds, warmup=0, repeats=repeats)
  return times, peaks, holder['state'], holder['metrics']


def _finish(entry, times, tokens, flops, peak):
  entry['step_time'] = t = harness.summarize(times)
  entry['target_tokens_per_s'] = tokens / t['median_s']
  entry['model_flops_per_s'] = flops / t['median_s']
  entry['fraction_of_peak'] = harness.ratio(entry['model_flops_per_s'], peak)
  return entry


def bench(size_name, rows, length, args, emit, counter):
  import jax
  with counter.window() as setup_compiles, harness.timed() as setup:
    jx = _jax_setup(size_name, args.dtype, rows, length, attention_impl=args.attention_impl)
  size = common.SIZES[size_name]
  on_cpu = jax.default_backend() == 'cpu'
  flops = common.train_flops(size, rows, length, length)
  tokens = rows * length
  record = {
      'name': 'train_step', 'config': dict(size=size_name, dtype=args.dtype,
                                           attention_impl=args.attention_impl or 'default', **size),
      'shapes': {'rows': rows, 'src_len': length, 'tgt_len': length, 'target_tokens': tokens,
                 'devices': len(jx['devices'])},
      'model_flops_per_step': flops,
      'flops_breakdown_forward': common.forward_flops(size, rows, length, length),
  }
  state, ours = _ours_first_calls(jx, args.warmup, counter)
  ours.update(setup_s=setup.seconds, setup_compilations=setup_compiles['count'])
  runner = None if args.no_peer else _start_peer(size_name, rows, length, jx, args, on_cpu)
  with counter.window() as loop_compiles:
    times, peaks, state, metrics = _timed_rounds(jx, state, runner, args, on_cpu)
  # Compilations of the train step itself (1 expected: one shape); other functions compiled
  # meanwhile (e.g. by the matmul-peak measurement) are listed apart.
  functions = ours.pop('functions') + loop_compiles['functions']
  ours['compilations'] = functions.count('jit(step)')
  ours['other_compiled_functions'] = sorted(set(functions) - {'jit(step)'})
  ours['loss_finite'] = bool(np.isfinite(float(metrics['loss'])))
  stats = jx['devices'][0].memory_stats() if hasattr(jx['devices'][0], 'memory_stats') else None
  ours['peak_device_memory_bytes'] = (stats or {}).get('peak_bytes_in_use')

  peak = float(np.median(peaks)) if peaks else common.known_peak(jx['devices'][0].device_kind)
  peak = peak * len(jx['devices']) if (peak and not on_cpu) else peak
  record['peak'] = {'flops_per_s': peak,
                    'source': 'same-run jitted f32 matmul (median)' if on_cpu else
                              'known bf16 dense peak x devices',
                    'samples_gflops': [p / 1e9 for p in peaks]}
  record['ours'] = _finish(ours, times['ours'], tokens, flops, peak)
  if runner is not None:
    record['peer'] = _peer_record(runner, times, tokens, flops, peak)
    for mode in ('eager', 'compiled'):
      if mode in record['peer']:
        record[f'ratio_ours_over_peer_{mode}'] = {'tokens_per_s': harness.ratio(
            ours['target_tokens_per_s'], record['peer'][mode]['target_tokens_per_s'])}
    # After the timing: the check loads a second copy of the model into this process.
    import torch
    from benchmarks.shared import torch_peer
    record['same_function_check'] = _check_same_function(
        size_name, jx, state.params, torch_peer.PeerTransformer, torch_peer.load_jax_params,
        torch, record['peer']['eager']['device'])
  return emit(record)


def _peer_record(runner, times, tokens, flops, peak):
  """The peer's part of the record (closes its child process, if any)."""
  peer = {'impl': 'torch.nn.Transformer'}
  for mode in ('eager', 'compiled'):
    if mode in runner.info:
      peer[mode] = _finish(dict(runner.info[mode]), times[f'peer_{mode}'], tokens, flops, peak)
  peer['eager']['peak_device_memory_bytes'] = runner.peak_memory()
  if 'compiled_error' in runner.info:
    peer['compiled_error'] = runner.info['compiled_error']
  if isinstance(runner, _PeerProcess):
    runner.close()
  return peer


def main(argv=None):
  parser = common.add_common_args(argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
  parser.add_argument('--sizes', default='tiny,base', help='comma list of tiny,base,big')
  parser.add_argument('--tokens', default='4096', help='comma list of target tokens per step')
  parser.add_argument('--length', type=int, default=64, help='source = target length')
  parser.add_argument('--dtype', default=None, help='float32 (CPU default) or bfloat16 (GPU)')
  parser.add_argument('--steps', type=int, default=3, help='timed steps per round')
  parser.add_argument('--rounds', type=int, default=2, help='interleaved rounds')
  parser.add_argument('--warmup', type=int, default=1, help='untimed steps after compilation')
  parser.add_argument('--peak-repeats', type=int, default=5)
  parser.add_argument('--torch-compile', default='tiny',
                      help='comma list of sizes for which torch.compile is also timed '
                           '(its first call compiles for minutes on 2 CPU cores)')
  parser.add_argument('--torch-threads', default='auto',
                      help="'auto' (faster of 1 and the core count), or a number (0 = cores)")
  parser.add_argument('--size-tokens', default='',
                      help='per-size override, e.g. "big:1024" (size:tokens[;size:tokens])')
  parser.add_argument('--attention-impl', default='', choices=['', 'xla', 'cudnn'],
                      help="config.attention_impl: '' (backend default), xla, cudnn (GPU)")
  parser.add_argument('--peer-server', action='store_true', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  common.require_peer(parser, args)
  if args.peer_server:
    return _serve_peer()
  harness.start_jax()
  import jax
  if args.dtype is None:
    args.dtype = 'float32' if jax.default_backend() == 'cpu' else 'bfloat16'
  overrides = dict(item.split(':') for item in args.size_tokens.split(';') if item)
  emit = harness.Emitter(args.out)
  counter = common.CompileCounter()
  for size_name in args.sizes.split(','):
    token_list = overrides.get(size_name, args.tokens)
    for tokens in [int(t) for t in token_list.split(',')]:
      rows = max(1, tokens // args.length)
      n = len(jax.devices()) if jax.default_backend() != 'cpu' else 1
      rows = max(n, rows // n * n)
      bench(size_name, rows, args.length, args, emit, counter)


if __name__ == '__main__':
  main()
