"""`search.beam_search(best_only=True)`: a sentence stops once no live hypothesis can beat its
best finished one. The best hypothesis and its score must be exactly the full search's (the
K-th-finished rule), in no more steps, and in fewer where the beam's tail keeps going; the
decoders that return only the best beam (`decode_batch`) use it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_search import EOS, history_model

from t2t_jax.inference import translate
from t2t_jax.model import search, transformer as model


def _runner(logits_fn, batch, max_decode_len, best_only):
  """Jitted `search._search`: (cache, max_lengths, alpha) -> (seqs, scores, steps)."""
  run = jax.jit(lambda cache, max_lengths, alpha: search._search(
      logits_fn, cache, batch_size=batch, beam_size=4, alpha=alpha,
      max_decode_len=max_decode_len, max_lengths=max_lengths, eos_id=EOS, bos_id=EOS,
      best_only=best_only))
  return lambda *args: tuple(np.asarray(x) for x in run(*args))


@pytest.fixture(scope='module')
def history():
  batch, length = 24, 24
  logits_fn, init_cache, _ = history_model(7, batch, vocab=9, hist_len=length)
  runners = {(rows, b): _runner(logits_fn, rows, length, b) for rows in (1, batch)
             for b in (False, True)}
  return batch, init_cache, runners


@pytest.mark.parametrize('alpha', [0.0, 0.6, 1.5])
def test_the_best_hypothesis_is_the_full_searchs_in_fewer_steps(history, alpha):
  batch, init_cache, runners = history
  max_lengths = jnp.asarray(np.random.default_rng(1).integers(4, 25, batch), jnp.int32)
  full, best = (runners[batch, b](init_cache(range(batch)), max_lengths, alpha)
                for b in (False, True))
  np.testing.assert_array_equal(best[0][:, 0], full[0][:, 0])
  np.testing.assert_array_equal(best[1][:, 0], full[1][:, 0])  # bit for bit
  assert best[2] <= full[2]
  # Sentence by sentence (alone, so the batch's longest does not hide it): never more steps,
  # fewer in all, and each sentence's best the same as in the batch.
  alone = {b: [runners[1, b](init_cache([i]), max_lengths[i:i + 1], alpha)
               for i in range(batch)] for b in (False, True)}
  steps = {b: [int(r[2]) for r in runs] for b, runs in alone.items()}
  assert all(b <= f for f, b in zip(steps[False], steps[True]))
  assert sum(steps[True]) < sum(steps[False]), steps
  np.testing.assert_array_equal([r[0][0, 0] for r in alone[True]], full[0][:, 0])


def test_decode_batch_returns_the_n_best_lists_first_beam():
  cfg = model.TransformerConfig(vocab_size=24, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                                num_layers=1, max_len=24, deterministic=True)
  params = model.init_params(cfg, jax.random.PRNGKey(3))
  inputs = jnp.asarray(np.random.default_rng(0).integers(2, 24, (6, 8)), jnp.int32)
  inputs = inputs.at[:, -1].set(model.EOS_ID)
  max_lengths = jnp.full((6,), 16, jnp.int32)
  best = translate.decode_batch(cfg, 4, 0.6, params, inputs, max_lengths, 16)
  n_best, scores, _ = translate.decode_batch_n_best(cfg, 4, 0.6, params, inputs, max_lengths, 16)
  np.testing.assert_array_equal(best, n_best[:, 0])
  assert bool(jnp.all(scores[:, 0] > search.NEG_INF))
