"""benchmarks/peers/decode_ab.py: the pieces that need no second commit (the A/B itself is run by
hand before a decoding change merges; docs/performance.md)."""

import jax
import numpy as np
import pytest

from benchmarks.peers import decode_ab


def _shapes():
  return {'a': {'kernel': jax.ShapeDtypeStruct((2, 3), np.float32)},
          'b': jax.ShapeDtypeStruct((4,), np.float32)}


def test_filled_puts_each_flat_leaf_in_its_place():
  flat = {"['a']['kernel']": np.ones((2, 3), np.float32), "['b']": np.arange(4.0)}
  tree = decode_ab._filled(_shapes(), dict(flat))
  assert tree['a']['kernel'].shape == (2, 3)
  np.testing.assert_array_equal(tree['b'], np.arange(4.0))


def test_filled_refuses_other_trees():
  with pytest.raises(ValueError, match='vs'):
    decode_ab._filled(_shapes(), {"['a']['kernel']": np.ones((3, 2)), "['b']": np.ones(4)})
  with pytest.raises(ValueError, match='does not have'):
    decode_ab._filled(_shapes(), {"['a']['kernel']": np.ones((2, 3)), "['b']": np.ones(4),
                                  "['c']": np.ones(1)})
  with pytest.raises(KeyError):
    decode_ab._filled(_shapes(), {"['b']": np.ones(4)})


def test_worktree_side_is_this_checkout():
  with decode_ab._tree('WORKTREE', '/nonexistent') as (commit, path):
    assert path == decode_ab.ROOT
    assert commit.split('+')[0]
