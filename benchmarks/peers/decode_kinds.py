"""Where a beam step's time goes, by kind of kernel: a `profile_step --what beam` record's ops
grouped (GEMMs, the ancestry gather, the vocabulary projection, cross- and self-attention,
the log-softmax normaliser, top-k, layer norms, bookkeeping, ...), each kind's share of the
kernels' self time and, given the unprofiled time of one step, its microseconds.

  python -m benchmarks.peers.profile_step --what beam --size quickstart --batch 4 \\
      --src-len 32 --max-len 64 --calls 5 --top 500 --no-peer --out P.jsonl
  python -m benchmarks.peers.decode_kinds P.jsonl --step-us 437

List every op (`--top` large): kinds are summed over the ops the record holds.
"""

import argparse
import collections
import json
from typing import Dict, List, Sequence, Tuple


def kind(name: str, op: str, src: str) -> str:
  """The kind of one compiled op, from its HLO name, JAX op name and Python source."""
  if ('/encoder/' in op or 'Transformer.encode' in op or 'decode_context' in src
      or 'cross_key_values' in src):
    return 'once a batch (encoder, cross keys/values)'
  if 'grow_cache' in src:
    return 'cache growth between segments'
  if 'shared_embedding.attend' in op:
    return 'vocabulary projection (GEMM)'
  if op.endswith('dot_general') and any(k in op for k in ('/ffn/', '/query/', '/key/', '/value/',
                                                          '/out/')):
    return 'projections and FFN (GEMMs)'
  if '_ancestors' in src:
    return 'ancestry gather of the cache'
  if '_cached_step' in op:
    return 'cache write'
  if 'cross_attention._grouped_attend' in op:
    return 'cross-attention (products, softmax)'
  if 'self_attention._grouped_attend' in op or name.startswith('dot.'):
    return 'self-attention (scores, softmax, values)'
  if '/norm/' in op or 'reduce-window' in name:
    return 'layer norms'
  if 'top_k' in op or 'sort' in op or name.startswith(('custom-call', 'sort')):
    return 'top-k'
  if '_top_candidates' in src and ('reduce' in op or 'log' in op):
    return 'log-softmax normaliser'
  if 'search.py' in src or 'take_along_axis' in op or '/while/body/' in op:
    return 'search bookkeeping'
  return 'other (loop control, copies)'


def by_kind(top_ops: Sequence[Sequence], step_us: float = 0.0
            ) -> List[Tuple[str, int, float, float]]:
  """[(kind, ops, share of the summed self time, us a step)] largest first, from a record's
  `ours.top_ops` ([name, op, src, seconds] each); us a step = share x `step_us`."""
  seconds: Dict[str, float] = collections.Counter()
  ops: Dict[str, int] = collections.Counter()
  for name, op, src, t in top_ops:
    k = kind(name, op, src)
    seconds[k] += t
    ops[k] += 1
  total = sum(seconds.values()) or 1.0
  return [(k, ops[k], v / total, step_us * v / total)
          for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])]


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('record', help="profile_step's JSON lines (the last record is read)")
  parser.add_argument('--step-us', type=float, default=0.0,
                      help='the unprofiled microseconds of one step, to scale the shares')
  args = parser.parse_args(argv)
  with open(args.record, encoding='utf-8') as f:
    record = json.loads([line for line in f if line.strip()][-1])
  print('| kind | kernels | share | us a step |\n|---|---:|---:|---:|')
  for k, n, share, us in by_kind(record['ours']['top_ops'], args.step_us):
    print(f'| {k} | {n} | {100 * share:.1f}% | {us:.0f} |')


if __name__ == '__main__':
  main()
