"""Sampling (model/sampling.py): the drawn tokens' frequencies against the softmax at the
temperature after top-k and top-p truncation (computed in numpy), reproducibility by row key
whatever the batch, the model's own log probability reported, constraints kept."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import sampling

EOS = 1
LOGITS = np.array([-1e9, 0.3, 2.0, 1.5, 0.5, -0.5, 1.0, 0.0], np.float32)  # PAD never


def _fixed(tokens, cache):
  return jnp.broadcast_to(jnp.asarray(LOGITS), (tokens.shape[0], LOGITS.size)), cache


def _expected(temperature, top_k, top_p):
  z = LOGITS.astype(np.float64) / temperature
  p = np.exp(z - z.max())
  p /= p.sum()
  order = np.argsort(-p, kind='stable')
  keep = np.zeros(p.size, bool)
  keep[order[:top_k or p.size]] = True
  kept = np.where(keep, p, 0) / np.where(keep, p, 0).sum()
  mass = 0.0
  for token in order:  # the nucleus: best first until the mass reaches top_p
    if not keep[token] or mass >= top_p:
      keep[token] = False
    mass += kept[token]
  q = np.where(keep, p, 0)
  return q / q.sum()


def _draw(rows, seed=0, **options):
  keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.PRNGKey(seed), r))(jnp.arange(rows))
  run = jax.jit(lambda k: sampling.sample(_fixed, {}, row_keys=k, max_decode_len=2, eos_id=EOS,
                                          bos_id=EOS, **options))
  return [np.asarray(x) for x in run(keys)]


@pytest.mark.parametrize('temperature, top_k, top_p', [
    (1.0, 0, 1.0), (0.7, 0, 1.0), (1.5, 3, 1.0), (1.0, 0, 0.8), (1.2, 4, 0.9)])
def test_first_tokens_follow_the_truncated_softmax(temperature, top_k, top_p):
  rows = 40_000
  seqs, _ = _draw(rows, temperature=temperature, top_k=top_k, top_p=top_p)
  counts = np.bincount(seqs[:, 0], minlength=LOGITS.size) / rows
  expected = _expected(temperature, top_k, top_p)
  assert np.all(counts[expected == 0] == 0)  # nothing outside the truncation, ever
  # 5 standard deviations of a frequency over 40k draws (at most 0.0125).
  np.testing.assert_allclose(counts, expected, atol=5 * np.sqrt(0.25 / rows))


def test_the_same_key_gives_the_same_sample_in_any_batch():
  seqs, log_probs = _draw(64, seed=3, top_k=5)
  again, _ = _draw(64, seed=3, top_k=5)
  other, _ = _draw(64, seed=4, top_k=5)
  np.testing.assert_array_equal(seqs, again)
  assert not np.array_equal(seqs, other)
  alone, alone_lp = _draw(1, seed=3, top_k=5)  # row 0 by itself
  np.testing.assert_array_equal(alone[0], seqs[0])
  # The model's own log probability (untempered, untruncated), EOS included.
  log_softmax = np.asarray(jax.nn.log_softmax(jnp.asarray(LOGITS)))
  ended = seqs[:, 0] == EOS  # an EOS first ends the sample there
  np.testing.assert_allclose(
      log_probs, log_softmax[seqs[:, 0]] + np.where(ended, 0.0, log_softmax[EOS]), rtol=1e-6)
  np.testing.assert_allclose(alone_lp[0], log_probs[0], rtol=1e-6)


def test_constraints_hold_while_sampling():
  keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.PRNGKey(0), r))(jnp.arange(256))
  prefix = jnp.broadcast_to(jnp.asarray([3, 0], jnp.int32), (256, 2))
  seqs, _ = jax.jit(lambda k: sampling.sample(
      _fixed, {}, row_keys=k, max_decode_len=8, eos_id=EOS, bos_id=EOS,
      no_repeat_ngram_size=1, prefix=prefix))(keys)
  for row in np.asarray(seqs):
    body = list(row[:list(row).index(EOS)]) if EOS in row else list(row)
    assert body[0] == 3 and len(set(body)) == len(body)  # the prefix, then no token twice
