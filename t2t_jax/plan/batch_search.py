"""The largest `tokens_per_batch` whose train step fits a chip, found by compiling.

A bracket [largest budget that fits, smallest that does not] narrows with each probe (one
compilation). Before there is one, the search grows from a budget that fits (along the line
through the two largest that fit, to 97% of the chip's HBM; doubling from one point) or
shrinks from one that does not (in proportion to the memory the compiler said it needs, by a
tenth at least; halving when it did not say). Inside the bracket the chord between its ends
gives the next probe. Peak HBM is not linear in tokens (the compiler rematerializes near its
limit, and a line through small budgets can overshoot the answer many times over), so the
search bisects instead where there is no chord (the compiler did not say) or the previous
probe did not halve the bracket; where the chord puts the answer within `tolerance` of the
lower end, it probes that far above it to close the bracket (and if that fits, follows the
line through the last two that fit). Probes are whole multiples of the batch's granularity
(one row of the largest bucket per device). The search converges when the bracket is one
granule wide or within `tolerance` of its lower end; when the probes run out first, its
answer is only a lower bound (`Found.converged`).
"""

import math
from typing import Callable, List, NamedTuple, Optional, Tuple

# (tokens_per_batch) -> (fits, bytes): the program's peak HBM if it compiled, else what the
# compiler said it would need (None when it did not say).
Probe = Callable[[int], Tuple[bool, Optional[float]]]

_TARGET = 0.97  # of capacity: the compiler keeps a little HBM for itself


class Found(NamedTuple):
  """What the search found.

  tokens: the largest probed budget that fits (None if none did).
  converged: the bracket closed (see the module doc). False: the probes ran out first and
    `tokens` is only a lower bound of the largest that fits.
  smallest_unfit: the smallest probed budget that does not fit (None if all did).
  """
  tokens: Optional[int]
  converged: bool
  smallest_unfit: Optional[int]


class _Bracket:
  """Every probe so far, as (tokens, bytes) that fit and that did not."""

  def __init__(self, granule: int, tolerance: float):
    self.granule, self.tolerance = granule, tolerance
    self.fitting: List[Tuple[int, Optional[float]]] = []
    self.unfit: List[Tuple[int, Optional[float]]] = []

  def record(self, tokens: int, result: Tuple[bool, Optional[float]]) -> None:
    fits, used = result
    (self.fitting if fits else self.unfit).append((tokens, used))

  def lo(self) -> Optional[Tuple[int, Optional[float]]]:
    return max(self.fitting, key=lambda p: p[0]) if self.fitting else None

  def hi(self) -> Optional[Tuple[int, Optional[float]]]:
    return min(self.unfit, key=lambda p: p[0]) if self.unfit else None

  def fits_line(self, target: float) -> Optional[float]:
    """Where the line through the two largest that fit reaches `target` bytes."""
    return _line(sorted(self.fitting, key=lambda p: p[0])[-2:], target)

  def converged(self) -> bool:
    if not self.fitting:  # nothing fits: closed once one granule does not
      return self.hi()[0] <= self.granule
    if not self.unfit:
      return False
    gap = self.hi()[0] - self.lo()[0]
    return gap <= self.granule or gap <= self.tolerance * self.lo()[0]

  def floor_to(self, tokens: float) -> int:
    return max(self.granule, int(tokens) // self.granule * self.granule)


def _inside(b: _Bracket, target: float, closing_fit: bool, bisect: bool) -> Tuple[int, bool]:
  """(the next probe inside the bracket, whether it tries to close it); see the module doc."""
  (t0, m0), (t1, m1) = b.lo(), b.hi()
  chord = _line([(t0, m0), (t1, m1)], target)
  local = b.fits_line(target) if closing_fit else None
  closing = False
  if local is not None and local >= t0 * (1 + b.tolerance):
    guess = local  # a closing probe fit: the chord is too pessimistic here
  elif chord is not None and chord < t0 * (1 + b.tolerance):
    guess, closing = t0 * (1 + b.tolerance), True  # lo is about at the target: close
  elif bisect or chord is None or chord >= t1 - b.granule:
    # In log space while the bracket spans orders of magnitude.
    guess = math.sqrt(t0 * t1) if t1 > 4 * t0 else (t0 + t1) / 2
  else:
    guess = chord
  return min(max(b.floor_to(guess), t0 + b.granule), t1 - b.granule), closing


def _grow(b: _Bracket, target: float) -> int:
  """The next probe while everything fits."""
  t0 = b.lo()[0]
  guess = b.fits_line(target)
  if guess is None:
    guess = 2 * t0
  elif guess < t0 * (1 + b.tolerance):
    guess = t0 * (1 + b.tolerance)
  return max(b.floor_to(guess), t0 + b.granule)


def _shrink(b: _Bracket, target: float) -> int:
  """The next probe while nothing fits (at least the smallest unfit: give up)."""
  t1, m1 = b.hi()
  return b.floor_to(min(t1 * target / m1, 0.9 * t1) if m1 else t1 / 2)


def largest_fitting(probe: Probe, start: int, start_result: Tuple[bool, Optional[float]],
                    capacity: float, granule: int, *, max_probes: int = 5,
                    tolerance: float = 0.05) -> Found:
  """The largest `tokens_per_batch` that fits, within `max_probes` compilations.

  Args:
    probe: compiles the train step at a token budget.
    start: the budget already compiled (the config's), with `start_result` its outcome.
    capacity: the chip's HBM in bytes.
    granule: budgets are multiples of this (chips x the largest bucket length).
    max_probes: compilations at most, besides `start`.
    tolerance: converged when the bracket is narrower than this fraction of its lower end.
  """
  b, target = _Bracket(granule, tolerance), _TARGET * capacity
  b.record(b.floor_to(start), start_result)
  closing_fit = False  # the previous probe tried to close the bracket, and fit
  bisect = False  # the previous probe did not halve the bracket
  for _ in range(max_probes):
    if b.converged():
      break
    if b.fitting and b.unfit:
      width = b.hi()[0] - b.lo()[0]
      tokens, closing = _inside(b, target, closing_fit, bisect)
      b.record(tokens, probe(tokens))
      closing_fit = closing and b.lo()[0] == tokens
      bisect = not closing and (b.hi()[0] - b.lo()[0]) * 2 > width
    elif b.fitting:  # everything fits so far: grow
      tokens = _grow(b, target)
      b.record(tokens, probe(tokens))
    else:  # nothing fits so far: shrink
      tokens = _shrink(b, target)
      if tokens >= b.hi()[0]:
        break
      b.record(tokens, probe(tokens))
  best = b.lo()
  return Found(best[0] if best else None, b.converged(), b.hi()[0] if b.unfit else None)


def _line(points, target: float) -> Optional[float]:
  """Tokens at which the line through two (tokens, bytes) points reaches `target` bytes;
  None without two distinct points with bytes, or a line that does not rise."""
  points = [(t, m) for t, m in points if m is not None]
  if len(points) < 2:
    return None
  (t0, m0), (t1, m1) = points[-2:]
  if t1 == t0 or (m1 - m0) / (t1 - t0) <= 0:
    return None
  return t0 + (target - m0) * (t1 - t0) / (m1 - m0)
