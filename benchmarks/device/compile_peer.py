"""Device check part `compile_peer` (issue 55): the torch.compile'd PyTorch peer against ours.

The train stages (`train._train`) with boxes torch.compile fits: ours packed (fed and staged
steps), the peer eager, then torch.compile'd, each recorded the moment it is measured. In
part 1 torch.compile never ran: after ours' 41-46 s compile and the eager peer, 13-34 s were
left of boxes it needs ~40-50 s of (docs/performance.md). Here: `ratio_ours_over_peer_
compiled` (the peer's step time over ours staged, on the same packed shape) at base and big.
"""

from typing import Any, Dict

from benchmarks.device import train
from benchmarks.device.check import Context, goal


def _compile_peer(ctx: Context, name: str) -> Dict[str, Any]:
  """`train._train` at `name` (base, big), and ours over the torch.compile'd peer."""
  record = train._train(ctx, name)  # pylint: disable=protected-access
  compiled = record['peer'].get('compiled')
  ratio = (compiled['step_time_s'] / record['packed']['staged_step_time_s'] if compiled
           else None)
  record['ratio_ours_over_peer_compiled'] = record['summary']['vs_compiled'] = ratio
  if ratio is not None:
    record['goals'].append(goal("ours >= 1.0x the torch.compile'd peer (same shape)", ratio,
                                ratio >= 1.0))
  return record


def compile_peer_base(ctx: Context) -> Dict[str, Any]:
  return _compile_peer(ctx, 'base')


def compile_peer_big(ctx: Context) -> Dict[str, Any]:
  return _compile_peer(ctx, 'big')
