"""The largest `tokens_per_batch` whose train step fits a chip, found by compiling.

Peak HBM grows about linearly with the tokens of a step (activations and logits per token,
attention per token and length), so each probe extrapolates the line through the last two
measurements to the chip's capacity, and a bracket [largest that fits, smallest that does
not] keeps the search honest where the line bends. Probes are whole multiples of the
batch's granularity (one row of the largest bucket per device), and the search stops when
the bracket is one granule wide or within `tolerance` of its lower end.
"""

from typing import Callable, Optional, Tuple

# (tokens_per_batch) -> (fits, bytes): the program's peak HBM if it compiled, else what the
# compiler said it would need (None when it did not say).
Probe = Callable[[int], Tuple[bool, Optional[float]]]


def largest_fitting(probe: Probe, start: int, start_result: Tuple[bool, Optional[float]],
                    capacity: float, granule: int, *, max_probes: int = 5,
                    tolerance: float = 0.05) -> Optional[int]:
  """The largest probed `tokens_per_batch` that fits (None if none did).

  Args:
    probe: compiles the train step at a token budget.
    start: the budget already compiled (the config's), with `start_result` its outcome.
    capacity: the chip's HBM in bytes.
    granule: budgets are multiples of this (chips x the largest bucket length).
    max_probes: compilations at most, besides `start`.
    tolerance: stop when the bracket is narrower than this fraction of its lower end.
  """
  floor_to = lambda tokens: max(granule, int(tokens) // granule * granule)  # noqa: E731
  lo: Optional[Tuple[int, float]] = None  # (tokens, bytes) largest that fits
  hi: Optional[Tuple[int, Optional[float]]] = None  # smallest that does not fit
  points = []

  def record(tokens, result):
    nonlocal lo, hi
    fits, used = result
    if used is not None:
      points.append((tokens, used))
    if fits and (lo is None or tokens > lo[0]):
      lo = (tokens, used)
    if not fits and (hi is None or tokens < hi[0]):
      hi = (tokens, used)

  record(floor_to(start), start_result)
  for _ in range(max_probes):
    if lo is not None and hi is not None and (
        hi[0] - lo[0] <= granule or hi[0] - lo[0] <= tolerance * lo[0]):
      break
    guess = _extrapolate(points, capacity)
    if guess is None:  # one point so far: double, or halve
      guess = (lo[0] * 2) if lo is not None else hi[0] / 2
    if lo is not None and hi is not None:  # stay strictly inside the bracket
      guess = min(max(guess, lo[0] + granule), hi[0] - granule)
    elif hi is not None:
      guess = min(guess, hi[0] - granule)
    tokens = floor_to(guess)
    if (lo is not None and tokens <= lo[0]) or (hi is not None and tokens >= hi[0]):
      break
    if hi is not None and tokens < granule:
      break
    record(tokens, probe(tokens))
    if lo is None and hi is not None and hi[0] <= granule:
      break
  return lo[0] if lo is not None else None


def _extrapolate(points, capacity: float) -> Optional[float]:
  """Tokens at which the line through the two most recent distinct points reaches 97% of
  `capacity` (the compiler keeps a little HBM for itself); None without two points."""
  distinct = {}
  for tokens, used in points:
    distinct[tokens] = used
  if len(distinct) < 2:
    return None
  (t0, m0), (t1, m1) = sorted(distinct.items(), key=lambda p: abs(p[1] - capacity))[:2]
  if t1 == t0 or m1 == m0:
    return None
  slope = (m1 - m0) / (t1 - t0)
  if slope <= 0:
    return None
  return t0 + (0.97 * capacity - m0) / slope
