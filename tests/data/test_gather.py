"""Tests for t2t_jax.data.gather: batches gathered from the token store equal the layout of
the tokenizer's own ids (`packing.layout`), bucketed and packed."""

import numpy as np
import pytest

from t2t_jax.data import gather, packing, token_store
from test_token_store import source, tok  # noqa: F401 (fixtures)


def test_gathered_bucketed_rows_hold_each_pair_then_eos(source, tok):  # noqa: F811
  store = token_store.load_or_build(source, tok, None)
  rows = np.array([4, -1, 0, 11, -1])
  batch = gather.Reader(store, (96,))(0, rows)
  assert set(batch) == {'inputs', 'targets'}
  for key, side in (('inputs', 'source'), ('targets', 'target')):
    assert batch[key].dtype == np.int32 and batch[key].shape == (5, 96)
    for r, pair in enumerate(rows):
      want = [] if pair < 0 else tok.encode(source[int(pair)][side]) + [1]
      assert batch[key][r].tolist() == want + [0] * (96 - len(want))


def test_gathered_packed_rows_equal_packing_layout(source, tok):  # noqa: F811
  """The vectorised gather against `packing.layout` of the tokenizer's own ids."""
  store = token_store.load_or_build(source, tok, None)
  reader = gather.Reader(store, (160,), packed=True)
  rows = [np.array([3, 9, 1]), np.array([], np.int64), np.array([600]), np.array([7, 8])]
  batch = reader(0, rows)
  for key, side in (('inputs', 'source'), ('targets', 'target')):
    seqs = [[tok.encode(source[int(i)][side]) + [1] for i in row] for row in rows]
    want = packing.layout(seqs, 160)
    got = (batch[key], batch[f'{key}_segmentation'], batch[f'{key}_position'])
    for w, g in zip(want, got):
      np.testing.assert_array_equal(g, w)
  # A pair that no longer fits its row (the store changed under the plan) is refused.
  with pytest.raises(gather.GatherError, match="does not fit its row of 8"):
    gather.Reader(store, (8,), packed=True)(0, [np.array([0, 1, 2, 3])])
