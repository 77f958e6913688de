"""`compaction.compacting_beam_decode`: finished sentences leave the batch between segments of
the search, and every sentence keeps the hypotheses of the single program
(`beam_decode.beam_decode`), whichever batch sizes it passes through; scores bit for bit
while the batch keeps its size, and up to float rounding once it shrinks (a matmul sums in
an order that depends on its rows, as between any two batchings: decoding these 12 sources
as two batches of 6 changes 9 of the 12 best scores in the last bits)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import beam_decode, compaction, transformer as model

ROWS, LENGTH = 12, 40  # 40 positions: the cache grows through 16, 32 and 40 (three segments)


@pytest.fixture(scope='module')
def tiny():
  """A small random model (12 ids, so EOS often ranks in the beam and sentences stop at many
  different steps), 12 sources, and output limits from 2 to 40. Greedy search stops at
  once with these parameters (EOS is the first argmax), so it gets others (seed 0), which
  run every sentence to its limit."""
  cfg = model.TransformerConfig(vocab_size=12, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                                num_layers=1, max_len=48, deterministic=True)
  params = {seed: model.init_params(cfg, jax.random.PRNGKey(seed)) for seed in (0, 5)}
  rng = np.random.default_rng(2)
  inputs = rng.integers(2, 12, (ROWS, 9)).astype(np.int32)
  inputs[:, -1] = model.EOS_ID
  inputs[3, 5:] = 0  # a shorter source: padding in the encoder-decoder mask
  inputs[3, 4] = model.EOS_ID
  max_lengths = rng.integers(2, LENGTH + 1, ROWS).astype(np.int32)
  return cfg, params, inputs, max_lengths


@functools.lru_cache(maxsize=None)
def _single_program(beam_size: int, alpha: float, best_only: bool, length_rule: str = 'gnmt'):
  """`beam_decode` jitted as `decode_batch` is: alpha a constant of the program."""
  cfg = model.TransformerConfig(vocab_size=12, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                                num_layers=1, max_len=48, deterministic=True)
  return jax.jit(lambda p, i, m: beam_decode.beam_decode(
      cfg, beam_size, alpha, p, i, m, LENGTH, best_only=best_only, length_rule=length_rule))


def _segments(monkeypatch):
  """Records (batch size, steps) of every segment `compacting_beam_decode` runs."""
  seen, segment = [], compaction._segment

  def recorded(model_, params, state, *args, **kwargs):
    out = segment(model_, params, state, *args, **kwargs)
    seen.append((state.live_tok.shape[0], int(out[1]) - int(state.step)))
    return out
  monkeypatch.setattr(compaction, '_segment', recorded)
  return seen


@pytest.mark.parametrize('beam_size,alpha,best_only,sizes,rule', [
    (4, 0.6, True, None, 'gnmt'), (4, 0.6, False, None, 'gnmt'),
    (4, 1.2, True, (12, 5, 2, 1), 'transformers'), (1, 0.0, True, (12, 3), 'gnmt')])
def test_the_same_hypotheses_and_scores_as_one_program_in_fewer_rows(
    tiny, monkeypatch, beam_size, alpha, best_only, sizes, rule):
  cfg, params, inputs, max_lengths = tiny
  params = params[5 if beam_size > 1 else 0]
  seen = _segments(monkeypatch)
  sequences, scores = compaction.compacting_beam_decode(
      cfg, beam_size, alpha, params, inputs, max_lengths, LENGTH, best_only=best_only,
      sizes=sizes, length_rule=rule)
  want_seqs, want_scores = _single_program(beam_size, alpha, best_only, rule)(
      params, jnp.asarray(inputs), jnp.asarray(max_lengths))
  np.testing.assert_array_equal(sequences, np.asarray(want_seqs))
  np.testing.assert_allclose(scores, np.asarray(want_scores), rtol=1e-6)
  # The batch shrank through the sizes, and did less work than the whole batch would have.
  batch_sizes = [size for size, _ in seen]
  assert batch_sizes == sorted(batch_sizes, reverse=True) and batch_sizes[0] == ROWS
  assert min(batch_sizes) < ROWS
  assert set(batch_sizes) <= set(sizes or compaction.levels(ROWS))
  steps = sum(n for _, n in seen)
  assert sum(size * n for size, n in seen) < ROWS * steps


def test_segments_at_one_batch_size_are_the_single_program_bit_for_bit(tiny, monkeypatch):
  cfg, params, inputs, max_lengths = tiny
  params = params[0]  # sentences decoding to their limits, up to 39: three segments
  seen = _segments(monkeypatch)
  sequences, scores = compaction.compacting_beam_decode(
      cfg, 4, 0.6, params, inputs, max_lengths, LENGTH, sizes=(ROWS,))
  want_seqs, want_scores = _single_program(4, 0.6, True)(
      params, jnp.asarray(inputs), jnp.asarray(max_lengths))
  np.testing.assert_array_equal(sequences, np.asarray(want_seqs))
  np.testing.assert_array_equal(scores, np.asarray(want_scores))
  assert [size for size, _ in seen] == [ROWS] * 3  # one segment per cache length: 16, 32, 40


def test_the_levels_halve_then_quarter():
  assert compaction.levels(64) == (64, 32, 8, 2)
  assert compaction.levels(12) == (12, 6, 1)
  assert compaction.levels(2) == (2, 1)
  assert compaction.levels(1) == (1,)


@pytest.mark.parametrize('sizes', [(12, 12, 3), (8, 2), (12, 3, 0), (12, 2, 5)])
def test_sizes_that_do_not_shrink_from_the_batch_are_refused(tiny, sizes):
  cfg, params, inputs, max_lengths = tiny
  params = params[5]
  with pytest.raises(ValueError, match=r'compacting_beam_decode: sizes=.*expected distinct '
                                       r'descending batch sizes from rows=12'):
    compaction.compacting_beam_decode(cfg, 4, 0.6, params, inputs, max_lengths, LENGTH,
                                      sizes=sizes)
