"""A step's time from a chip's published peaks: the roofline, with communication on top.

Per chip, a program needs at least `flops / peak_flops` of compute and `bytes / hbm_bw` of
HBM traffic; the slower of the two bounds the step (the roofline). Collectives run over the
inter-chip interconnect (ICI): a ring all-reduce of B bytes over n chips moves
2 (n - 1) / n * B per chip, an all-gather or a reduce-scatter (n - 1) / n of the full array,
at the chip's bidirectional ICI bandwidth (rings in both directions use every link). They are
added rather than overlapped, so the estimate is an upper bound of an ideal program and a lower
bound of a real one: real steps reach 40-60% of peak FLOP/s.
"""

from typing import Dict, Sequence

from t2t_jax.plan.chips import Chip


def collective_seconds(collectives: Sequence[Dict[str, int]], chips: int,
                       chip: Chip) -> float:
  """ICI time of a program's collectives (`hlo.collectives` rows, bytes of results per chip)."""
  if chips <= 1:
    return 0.0
  share = (chips - 1) / chips
  moved = 0.0
  for c in collectives:
    if c['kind'] == 'all-reduce':
      moved += 2 * share * c['bytes']
    elif c['kind'] == 'reduce-scatter':  # the result is one chip's shard of the full array
      moved += share * c['bytes'] * chips
    else:  # all-gather (the result is the full array), all-to-all, collective-permute
      moved += share * c['bytes']
  return moved / chip.ici_bytes_per_s


def step_seconds(flops: float, hbm_bytes: float, collectives: Sequence[Dict[str, int]],
                 chips: int, chip: Chip) -> Dict[str, float]:
  """{'compute_s', 'hbm_s', 'ici_s', 'step_s', 'bound'} for one chip's share of a step."""
  compute = flops / chip.peak_flops
  memory = hbm_bytes / chip.hbm_bytes_per_s
  ici = collective_seconds(collectives, chips, chip)
  return {'compute_s': compute, 'hbm_s': memory, 'ici_s': ici,
          'step_s': max(compute, memory) + ici,
          'bound': 'compute' if compute >= memory else 'memory'}
