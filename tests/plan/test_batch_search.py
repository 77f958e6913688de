"""The batch search's logic, on memory models instead of compilations (no libtpu needed)."""

import pytest

from t2t_jax.plan import batch_search

GiB = 2 ** 30
CAPACITY = 16 * GiB


def _probe(memory, reports_needed=True):
  """A probe of `memory(tokens) -> bytes` on a 16 GiB chip, recording what it compiled."""
  calls = []

  def probe(tokens):
    calls.append(tokens)
    used = memory(tokens)
    fits = used <= CAPACITY
    return fits, used if fits or reports_needed else None

  return probe, calls


def _largest(memory, granule):
  """The exact answer by bisection over granules (memory rises with tokens)."""
  lo, hi = 0, granule
  while memory(hi) <= CAPACITY:
    lo, hi = hi, 2 * hi
  while hi - lo > granule:
    mid = (lo + hi) // 2 // granule * granule
    lo, hi = (mid, hi) if memory(mid) <= CAPACITY else (lo, mid)
  return lo


def _kinked(tokens):
  """The issue's shape: 1 GiB fixed and a shallow slope over the small budgets, so that the
  line through 2048 and 4096 reaches the chip near 22M tokens; steeper beyond 64k tokens
  (what the compiler does to larger batches), so the largest that fits is ~7.9M."""
  shallow = 14.52 * GiB / 22e6
  steep = (15 * GiB - shallow * 7.9e6) / (7.9e6 - 65536)
  return GiB + shallow * tokens + steep * max(0, tokens - 65536)


def test_the_kinked_model_is_the_issues():
  granule = 512
  assert 7.85e6 < _largest(_kinked, granule) <= 7.9e6
  # The old search's first extrapolation, through the two smallest budgets: ~22M.
  line = 2048 + (0.97 * CAPACITY - _kinked(2048)) * 2048 / (_kinked(4096) - _kinked(2048))
  assert 2.1e7 < line < 2.3e7


@pytest.mark.parametrize('tolerance', [0.05, 0.0])
@pytest.mark.parametrize('reports_needed', [True, False])
@pytest.mark.parametrize('start', [2048, 20_000_000])
def test_an_overshoot_comes_back_down_or_is_labelled_a_lower_bound(start, reports_needed,
                                                                   tolerance):
  granule = 512
  exact = _largest(_kinked, granule)
  probe, calls = _probe(_kinked, reports_needed)
  found = batch_search.largest_fitting(probe, start, probe(start), CAPACITY, granule,
                                       tolerance=tolerance)
  assert len(calls) <= 1 + 5
  assert found.tokens % granule == 0 and _kinked(found.tokens) <= CAPACITY  # it does fit
  assert found.smallest_unfit is None or _kinked(found.smallest_unfit) > CAPACITY
  if found.converged:
    assert exact - found.tokens <= max(granule, tolerance * found.tokens)
  else:  # only a lower bound, and said so; never above the answer
    assert found.tokens <= exact
  if reports_needed and tolerance:
    # With the compiler's figures the bracket closes within 5% (the old search: 2048).
    assert found.converged and exact - found.tokens <= 0.05 * found.tokens


def test_a_linear_memory_converges_from_below_and_from_above():
  def memory(tokens):  # 1 GiB fixed + 100 kB per token
    return GiB + 1e5 * tokens

  granule = 8 * 256
  exact = _largest(memory, granule)
  for start in (25000, 400000):
    probe, calls = _probe(memory)
    found = batch_search.largest_fitting(probe, start, probe(start), CAPACITY, granule)
    assert found.converged and exact * 0.95 <= found.tokens <= exact
    assert found.tokens % granule == 0 and len(calls) <= 1 + 5


def test_when_nothing_fits():
  # One granule does not fit: converged, nothing to offer.
  assert batch_search.largest_fitting(lambda t: (False, None), 4096, (False, None), 1.0,
                                      2048) == batch_search.Found(None, True, 2048)
  # The probes run out while halving (the compiler said nothing): not converged.
  probe, calls = _probe(lambda t: GiB + 1e6 * t, reports_needed=False)
  found = batch_search.largest_fitting(probe, 1 << 20, probe(1 << 20), CAPACITY, 2048)
  assert found == batch_search.Found(None, False, 1 << 15) and len(calls) == 1 + 5
