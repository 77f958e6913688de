"""Where the time goes: an op-level profile of our train step or decode, and of the peer's.

Ours: `jax.profiler.trace(create_perfetto_trace=True)` over a few calls; every XLA thunk in
the trace is mapped back to its HLO instruction in the compiled module, and from there to the
JAX op name (module path) and innermost Python source frame, then grouped into categories
(matmuls forward/backward, attention softmax/masking, dropout random bits, layer norm, loss,
optimizer, cache gathers, ...). Times are self times summed over threads, so they add up to
CPU time, not wall time. The peer: `torch.profiler` self CPU time per aten op.

  python -m benchmarks.peers.profile_step --what train --size base --rows 64 --length 64
  python -m benchmarks.peers.profile_step --what beam --size base --batch 32 --src-len 32 \\
      --max-len 40
"""

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import common, harness  # noqa: E402


def _hlo_index(hlo_text: str):
  """instruction name -> (opcode, op_name, innermost 'file:function')."""
  files, funcs, locs, frames = {}, {}, {}, {}
  section = None
  lines = hlo_text.splitlines()
  for line in lines:
    if line in ('FileNames', 'FunctionNames', 'FileLocations', 'StackFrames'):
      section = line
      continue
    if section and not line.strip():
      if section == 'StackFrames':
        break
      continue
    if section == 'FileNames':
      i, name = line.split(' ', 1)
      files[i] = os.path.basename(name.strip('"'))
    elif section == 'FunctionNames':
      i, name = line.split(' ', 1)
      funcs[i] = name.strip('"')
    elif section == 'FileLocations':
      m = re.match(r'(\d+) \{file_name_id=(\d+) function_name_id=(\d+) line=(\d+)', line)
      if m:
        locs[m[1]] = f'{files.get(m[2])}:{funcs.get(m[3])}:{m[4]}'
    elif section == 'StackFrames':
      m = re.match(r'(\d+) \{file_location_id=(\d+) parent_frame_id=(\d+)', line)
      if m:
        frames[m[1]] = (m[2], m[3])
  index = {}
  inst = re.compile(r'^\s*(?:ROOT )?%?([\w.\-]+) = .*? ([a-z][\w\-]*)\(')
  for line in lines:
    m = inst.match(line)
    if not m:
      continue
    name, opcode = m[1], m[2]
    op = re.search(r'op_name="([^"]*)"', line)
    sf = re.search(r'stack_frame_id=(\d+)', line)
    src = ''
    if sf and sf[1] in frames:
      src = locs.get(frames[sf[1]][0], '')
    if opcode == 'fusion':
      kind = re.search(r'kind=(\w+)', line)
      opcode = f'fusion:{kind[1] if kind else "?"}'
      if re.search(r'calls=%?[\w.\-]*(dot|gemm|ynn)', line):
        opcode += ':dot'
    index[name] = (opcode, op[1] if op else '', src)
  return index


def categorize(name: str, info) -> str:
  opcode, op, src = info
  phase = 'bwd' if 'transpose(jvp' in op else 'fwd'
  if 'Dropout' in op or 'stochastic.py' in src:
    if any(k in op for k in ('bernoulli', 'uniform', 'threefry', 'random_bits')):
      return 'dropout: random bits (threefry)'
    return f'dropout: mask apply ({phase})'
  if 'threefry' in op or 'random' in op:
    return 'rng (other)'
  if 'optax' in src or 'optim.py' in src or 'apply_gradients' in src or 'apply_updates' in src:
    return 'optimizer (Adam) + non-finite guard'
  if op.endswith('reduce_and') or 'is_finite' in op:
    return 'optimizer (Adam) + non-finite guard'
  if 'losses.py' in src or 'compute_metrics' in op or 'log_softmax' in op:
    return f'loss / log-softmax over vocab ({phase})'
  if 'search.py' in src:
    if 'gather_beams' in src or '_gather_beams' in op:
      return 'search: cache reorder (gather)'
    return 'search: top-k / bookkeeping'
  is_dot = ('dot' in opcode or name.startswith(('dot', 'ynn')) or op.endswith('dot_general')
            or 'ynn' in name)
  if is_dot:
    where = 'attention scores/AV' if re.search(r'vmap\(|BTNH|bqhd|bhqk', op) else \
        ('pre-softmax projection' if 'attend' in src or 'shared_embedding' in op else
         'projections/FFN')
    return f'matmul: {where} ({phase})'
  if 'cache' in src or '_use_cache' in src or 'dynamic-update-slice' in opcode:
    return 'decode: cache update'
  if '/norm/' in op or 'normalization.py' in src:
    return f'layer norm ({phase})'
  if 'attention' in op:
    return f'attention: softmax/mask/transpose ({phase})'
  if 'embedding' in op or 'take' in op:
    return f'embedding gather/scatter ({phase})'
  if opcode.startswith('copy') or name.startswith('copy') or opcode == 'transpose':
    return 'copy/transpose (layout)'
  if opcode == 'while' or name.startswith('while'):
    return 'while loop (control)'
  return f'other ({opcode})'


def _self_times(events):
  """Self time of each complete event ('X'), nesting per (pid, tid)."""
  by_thread = collections.defaultdict(list)
  for e in events:
    if e.get('ph') == 'X' and 'dur' in e:
      by_thread[(e.get('pid'), e.get('tid'))].append(e)
  out = []
  for evs in by_thread.values():
    evs.sort(key=lambda e: (e['ts'], -e['dur']))
    stack = []
    for e in evs:
      e = dict(e, self=e['dur'])
      while stack and e['ts'] >= stack[-1]['ts'] + stack[-1]['dur']:
        out.append(stack.pop())
      if stack:
        stack[-1]['self'] -= e['dur']
      stack.append(e)
    out.extend(stack)
  return out


def profile_jax(fn, args, calls: int, compiled_text: str, top: int = 25):
  import jax
  index = _hlo_index(compiled_text)
  logdir = tempfile.mkdtemp(prefix='t2t_prof_')
  with harness.timed() as t, jax.profiler.trace(logdir, create_perfetto_trace=True):
    for _ in range(calls):
      args = fn(*args)
  wall = t.seconds / calls
  path = glob.glob(os.path.join(logdir, '**', 'perfetto_trace.json.gz'), recursive=True)[0]
  with gzip.open(path) as f:
    data = json.load(f)
  events = data['traceEvents'] if isinstance(data, dict) else data
  cats = collections.Counter()
  ops = collections.Counter()
  for e in _self_times(events):
    name = e['name']
    key = name[5:] if name.startswith('end: ') else name
    if key not in index:
      continue
    cat = categorize(key, index[key])
    cats[cat] += e['self'] / 1e6 / calls
    ops[(key, index[key][1][-90:], index[key][2])] += e['self'] / 1e6 / calls
  total = sum(cats.values())
  return {'wall_s_per_call': wall, 'thunk_cpu_s_per_call': total,
          'categories': [(k, v, v / total) for k, v in cats.most_common()],
          'top_ops': [(k[0], k[1], k[2], v) for k, v in ops.most_common(top)]}


def profile_torch(fn, calls: int, top: int = 25):
  from torch.profiler import profile
  with harness.timed() as t, profile() as p:
    for _ in range(calls):
      fn()
  wall = t.seconds / calls
  rows = sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)
  total = sum(e.self_cpu_time_total for e in rows) / 1e6 / calls
  return {'wall_s_per_call': wall, 'self_cpu_s_per_call': total,
          'top_ops': [(e.key, e.count // calls, e.self_cpu_time_total / 1e6 / calls)
                      for e in rows[:top]]}


def _print(title, prof):
  print(f'\n== {title}: wall {prof["wall_s_per_call"]:.3f} s/call', file=sys.stderr)
  if 'categories' in prof:
    print(f'   thunk CPU time {prof["thunk_cpu_s_per_call"]:.3f} s/call by category:',
          file=sys.stderr)
    for k, v, f in prof['categories']:
      print(f'   {v:8.3f} s {100 * f:5.1f}%  {k}', file=sys.stderr)
    print('   top ops:', file=sys.stderr)
    for name, op, src, v in prof['top_ops']:
      print(f'   {v:8.3f} s  {name:28s} {src:40s} {op}', file=sys.stderr)
  else:
    print(f'   self CPU {prof["self_cpu_s_per_call"]:.3f} s/call; top aten ops:', file=sys.stderr)
    for name, count, v in prof['top_ops']:
      print(f'   {v:8.3f} s  x{count:<5d} {name}', file=sys.stderr)


def _train_profiles(args, record):
  """Profiles of our train step and (unless --no-peer) the peer's: (ours, peer or None)."""
  import jax
  from benchmarks.peers import train_step
  jx = train_step._jax_setup(args.size, 'float32', args.rows, args.length)
  state, batch, step = jx['state'], jx['batch'], jx['step']
  state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  text = step.lower(state, batch).compile().as_text()

  def call(state, batch):
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    return state, batch
  ours = profile_jax(call, (state, batch), args.calls, text, args.top)
  record['shapes'] = {'rows': args.rows, 'length': args.length}
  if args.no_peer:
    return ours, None
  import torch
  from benchmarks.shared import torch_peer
  size = common.SIZES[args.size]
  model = torch_peer.PeerTransformer(size).train()
  opt, sched, _ = torch_peer.make_optimizer(model, size['d_model'])
  src = torch.from_numpy(jx['host']['inputs']).long()
  tgt = torch.from_numpy(jx['host']['targets']).long()
  run = lambda: torch_peer.train_step(model, model, opt, sched, src, tgt)  # noqa: E731
  run()
  record['peer_threads'] = common.pick_torch_threads(run, args.torch_threads)
  return ours, profile_torch(run, args.calls)


def _decode_profiles(args, record):
  """Profiles of our beam or greedy decode and (unless --no-peer) the peer's."""
  import jax
  from benchmarks.peers import decode
  size = common.SIZES[args.size]
  beam = 4 if args.what == 'beam' else 1
  params, src_np, fn = decode._setup_ours(size, args.batch, args.src_len, args.max_len, beam,
                                          0.6)
  jax.block_until_ready(fn(params, src_np))
  text = fn.lower(params, src_np).compile().as_text()

  def call(params, src):
    jax.block_until_ready(fn(params, src))
    return params, src
  ours = profile_jax(call, (params, src_np), args.calls, text, args.top)
  record['shapes'] = {'batch': args.batch, 'src_len': args.src_len, 'max_len': args.max_len}
  if args.no_peer:
    return ours, None
  import torch
  from benchmarks.shared import torch_peer
  pm = torch_peer.PeerTransformer(size)
  torch_peer.load_jax_params(pm, jax.device_get(params))
  dec = torch_peer.PeerDecoder(pm)
  psrc = torch.from_numpy(src_np).long()
  if beam > 1:
    run = lambda: dec.beam_search(psrc, 4, 0.6, args.max_len)  # noqa: E731
  else:
    run = lambda: dec.greedy(psrc, args.max_len)  # noqa: E731
  run()
  record['peer_threads'] = common.pick_torch_threads(run, args.torch_threads)
  return ours, profile_torch(run, args.calls)


def main(argv=None):
  parser = common.add_common_args(argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
  parser.add_argument('--what', default='train', choices=['train', 'beam', 'greedy'])
  parser.add_argument('--size', default='tiny')
  parser.add_argument('--rows', type=int, default=64)
  parser.add_argument('--length', type=int, default=64)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--src-len', type=int, default=32)
  parser.add_argument('--max-len', type=int, default=40)
  parser.add_argument('--calls', type=int, default=2)
  parser.add_argument('--top', type=int, default=25, help='ops listed (all: a large number)')
  parser.add_argument('--torch-threads', default='auto')
  args = parser.parse_args(argv)
  common.require_peer(parser, args)
  harness.start_jax()
  emit = harness.Emitter(args.out)
  record = {'name': f'profile_{args.what}', 'config': dict(size=args.size,
                                                           **common.SIZES[args.size])}
  profiles = _train_profiles if args.what == 'train' else _decode_profiles
  ours, peer = profiles(args, record)
  _print(f'ours ({args.what}, {args.size})', ours)
  record['ours'] = ours
  if peer is not None:
    _print(f'peer ({args.what}, {args.size})', peer)
    record['peer'] = peer
  emit(record)


if __name__ == '__main__':
  main()
