"""The scanned first-fit kernel equals `data.packing`'s loop, pair for pair."""

import numpy as np
import pytest

from t2t_jax.data import packing
from t2t_jax.runtime import first_fit


@pytest.mark.parametrize('open_rows', [1, 3, 256])
def test_scanned_pack_equals_the_loop(open_rows, monkeypatch):
  rng = np.random.default_rng(open_rows)
  src, tgt = rng.integers(1, 40, 3000), rng.integers(1, 40, 3000)
  order = rng.permutation(3000)[:2500]
  want = packing.pack_loop(src, tgt, order, 48, open_rows)
  monkeypatch.setattr(packing, 'SCAN_MIN_PAIRS', 0)  # what large corpora take
  got = packing.pack(src, tgt, order, 48, open_rows, row_ids=first_fit.row_ids)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_array_equal(got[1], want[1])


def test_a_pair_longer_than_a_row_is_refused_before_the_kernel(monkeypatch):
  monkeypatch.setattr(packing, 'SCAN_MIN_PAIRS', 0)
  with pytest.raises(ValueError, match=r'pair 1 \(9, 3 tokens\) does not fit a row of 8'):
    packing.pack(np.array([2, 9]), np.array([2, 3]), np.arange(2), 8, row_ids=first_fit.row_ids)
