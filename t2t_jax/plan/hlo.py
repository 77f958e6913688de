"""What a compiled program communicates: its collectives, read from the optimized HLO text.

Data parallelism (§5.2 with a mesh) should show one gradient all-reduce per step (XLA
combines the per-parameter reductions into one or a few tuple all-reduces) and no stray
all-gather; ZeRO-style sharding shows a reduce-scatter and an all-gather instead.
"""

import re
from typing import Dict, List

KINDS = ('all-reduce', 'reduce-scatter', 'all-gather', 'all-to-all', 'collective-permute')

# Bytes per element of HLO's primitive types.
_DTYPE_BYTES = {'pred': 1, 's8': 1, 'u8': 1, 'f8e4m3fn': 1, 'f8e5m2': 1, 's16': 2, 'u16': 2,
                'f16': 2, 'bf16': 2, 's32': 4, 'u32': 4, 'f32': 4, 's64': 8, 'u64': 8,
                'f64': 8, 'c64': 8, 'c128': 16}
# `%name = SHAPE kind(` or its asynchronous `kind-start(`; `-done` only ends one.
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%[\w.\-]+\s*=\s*(.*?)\s(' + '|'.join(KINDS) +
                          r')(-start)?\(', re.MULTILINE)
_ARRAY = re.compile(r'\b([a-z]+[0-9]*(?:e[0-9]m[0-9](?:fn)?)?)\[([0-9,]*)\]')


def array_bytes(shape: str) -> int:
  """Bytes of every array in an HLO shape string: 'f32[8,4]{1,0}' -> 128; tuples add up."""
  total = 0
  for dtype, dims in _ARRAY.findall(shape):
    if dtype not in _DTYPE_BYTES:
      continue
    n = 1
    for d in filter(None, dims.split(',')):
      n *= int(d)
    total += n * _DTYPE_BYTES[dtype]
  return total


def _result_shape(shape: str, asynchronous: bool) -> str:
  """An async start's shape is (operands, results[, context]): keep the results."""
  if not asynchronous or not shape.startswith('(('):
    return shape
  depth, parts, start = 0, [], 1
  for i, ch in enumerate(shape[1:-1], 1):
    if ch == '(':
      depth += 1
    elif ch == ')':
      depth -= 1
    elif ch == ',' and depth == 0:
      parts.append(shape[start:i])
      start = i + 1
  parts.append(shape[start:-1])
  return parts[1] if len(parts) > 1 else shape


def collectives(hlo_text: str) -> List[Dict[str, int]]:
  """`[{kind, count, bytes}]` of the program's collectives, in `KINDS` order, present only.

  `count` is the number of instructions in the program text (one inside a loop body counts
  once); `bytes` is the size of their results on one device.
  """
  found = {}
  for shape, kind, start in _INSTRUCTION.findall(hlo_text):
    entry = found.setdefault(kind, {'kind': kind, 'count': 0, 'bytes': 0})
    entry['count'] += 1
    entry['bytes'] += array_bytes(_result_shape(shape.strip(), bool(start)))
  return [found[k] for k in KINDS if k in found]
