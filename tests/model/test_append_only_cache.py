"""The append-only decode cache (`incremental.reorder_cache`): beam search reads each
hypothesis's keys and values where its ancestors wrote them instead of reordering the cache
every step, and finds the same beams and scores, bit for bit, as the reordered cache."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import beam_decode, incremental, transformer as model
from t2t_jax.model.multi_head_attention import ANCESTRY

PAPER = model.TransformerConfig(vocab_size=40, d_model=16, d_ff=32, num_heads=2, num_layers=2,
                                max_len=48, deterministic=True)
# (config, the seed of weights whose beams part early and run past the first cache segment)
VARIANTS = {'paper': (PAPER, 3),
            'window 3 (a ring buffer that wraps)': (dataclasses.replace(PAPER,
                                                                        decoder_window=3), 1),
            'grouped kv heads': (dataclasses.replace(PAPER, num_heads=4, d_k=4, d_v=4,
                                                     num_kv_heads=2), 1)}


@pytest.mark.parametrize('name', sorted(VARIANTS))
def test_the_same_beams_and_scores_as_reordering_the_cache(name):
  cfg, seed = VARIANTS[name]
  params = model.init_params(cfg, jax.random.PRNGKey(seed))
  rng = np.random.default_rng(0)
  inputs = rng.integers(2, cfg.vocab_size, (3, 7)).astype(np.int32)
  inputs[:, -1] = 1
  max_lengths = np.array([20, 11, 20], np.int32)
  decode = jax.jit(beam_decode.beam_decode, static_argnums=(0, 1, 2, 6),
                   static_argnames=('append_only',))
  want = decode(cfg, 4, 0.6, params, inputs, max_lengths, 20, append_only=False)
  got = decode(cfg, 4, 0.6, params, inputs, max_lengths, 20)
  np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
  np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
  # Outputs past the first cache segment (16), beams that part early (rows reordered).
  sequences = np.asarray(got[0])
  assert (sequences != 0).sum(-1).max() > 16
  assert max(len({tuple(beam[:8]) for beam in sentence}) for sentence in sequences) > 1


def test_reordering_moves_the_ancestry_only():
  cache = incremental.init_cache(PAPER, 2, 4, ancestry=True)
  layer = cache['decoder']['layer_0']['self_attention']
  assert layer[ANCESTRY].shape == (2, 4) and not layer[ANCESTRY].any()
  keys = jnp.arange(2 * 2 * 4 * 8, dtype=jnp.float32).reshape(2, 2, 4, 8)
  cache['decoder']['layer_0']['self_attention']['cached_key'] = keys
  cache['decoder']['layer_0']['self_attention'][ANCESTRY] = jnp.array([[0, 1, 0, 0],
                                                                       [-1, 0, 0, 0]])
  moved = incremental.reorder_cache(cache, jnp.array([1, 1], jnp.int32))
  layer = moved['decoder']['layer_0']['self_attention']
  np.testing.assert_array_equal(layer['cached_key'], keys)     # nothing copied
  # Both rows continue row 1: row 0 reads slot 0 from row 0 (1 - 1) like row 1 did.
  np.testing.assert_array_equal(layer[ANCESTRY], [[0, 1, 1, 1], [-1, 0, 0, 0]])
  grown = incremental.grow_cache(moved, 6)['decoder']['layer_0']['self_attention']
  assert grown[ANCESTRY].shape == (2, 6) and not grown[ANCESTRY][:, 4:].any()
