"""Repetition control and target prefixes in the beam search (model/ngram_blocking.py,
search.allowed_logits): `banned_tokens` against a plain Python reference, and an exhaustive
beam against brute force over the sequences the constraints allow, scored with the model's own
(not renormalised) log probabilities."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import ngram_blocking, search

EOS = 1
TOKENS = (2, 3, 4)


def _reference_banned(seq, n):
  """The tokens that would complete an n-gram already in `seq`."""
  if n <= 0:
    return set()
  tail = tuple(seq[len(seq) - n + 1:]) if n > 1 else ()
  return {seq[j + n - 1] for j in range(len(seq) - n + 1) if tuple(seq[j:j + n - 1]) == tail}


@pytest.mark.parametrize('n', [0, 1, 2, 3])
def test_banned_tokens_match_the_reference(n):
  rng = np.random.default_rng(n)
  seqs = rng.integers(2, 5, size=(6, 10)).astype(np.int32)
  for step in range(0, 11):
    got = np.asarray(ngram_blocking.banned_tokens(jnp.asarray(seqs), jnp.int32(step), n, 6))
    for row in range(6):
      assert set(np.flatnonzero(got[row])) == _reference_banned(list(seqs[row, :step]), n)


def _model(seed=0):
  """A Markov model over PAD, EOS and 3 tokens that likes to repeat itself."""
  rng = np.random.default_rng(seed)
  table = rng.normal(size=(5, 5)).astype(np.float32)
  table[2, 3] = table[3, 2] = 3.0  # '2 3 2 3 ...' is likely
  table[2:, EOS] = -1.0  # and long
  table[:, 0] = -1e9
  log_probs = np.asarray(jax.nn.log_softmax(jnp.asarray(table), axis=-1), np.float64)
  return (lambda tokens, cache: (jnp.asarray(table)[tokens[:, 0]], cache)), log_probs


def _brute_force(log_probs, max_len, allowed):
  scored = []
  for n in range(1, max_len + 1):
    for body in itertools.product(TOKENS, repeat=n - 1):
      seq = body + (EOS,)
      if allowed(seq):
        previous = (EOS,) + seq[:-1]
        scored.append((sum(log_probs[p, t] for p, t in zip(previous, seq)), seq))
  return sorted(scored, key=lambda x: -x[0])


def _beam(logits_fn, max_len, beam, **constraints):
  seqs, scores = jax.jit(lambda: search.beam_search(
      logits_fn, {}, batch_size=1, beam_size=beam, alpha=0.0, max_decode_len=max_len,
      eos_id=EOS, bos_id=EOS, **constraints))()
  out = []
  for seq, score in zip(np.asarray(seqs[0]), np.asarray(scores[0])):
    if score > search.MIN_LOG_PROB:  # not through PAD, the only token left when all are banned
      out.append((float(score), tuple(int(t) for t in seq[:list(seq).index(EOS) + 1])))
  return out


def _repeats(seq, n):
  grams = [seq[i:i + n] for i in range(len(seq) - n + 1)]
  return len(grams) != len(set(grams))


@pytest.mark.parametrize('n', [1, 2])
def test_an_exhaustive_beam_never_repeats_an_ngram_and_finds_the_best(n):
  logits_fn, log_probs = _model()
  unconstrained = _beam(logits_fn, 6, 4)
  assert any(_repeats(seq[:-1], 2) for _, seq in unconstrained)  # the model does repeat
  # Outputs of at most 4 tokens: a beam of 36 holds every candidate of every step (at most 9
  # live prefixes x 4 tokens).
  got = _beam(logits_fn, 4, 36, no_repeat_ngram_size=n)
  expected = _brute_force(log_probs, 4, lambda seq: not _repeats(seq, n))[:len(got)]
  assert len(got) == min(36, len(_brute_force(log_probs, 4, lambda seq: not _repeats(seq, n))))
  assert [s for _, s in got] == [s for _, s in expected]
  np.testing.assert_allclose([v for v, _ in got], [v for v, _ in expected], rtol=1e-5)


def test_a_prefix_starts_every_hypothesis_and_the_search_goes_on_from_it():
  logits_fn, log_probs = _model(1)
  prefix = jnp.asarray([[4, 4, 0]], jnp.int32)  # padded with 0
  got = _beam(logits_fn, 5, 27, prefix=prefix)
  expected = _brute_force(log_probs, 5, lambda seq: seq[:2] == (4, 4))[:len(got)]
  assert len(got) == 13  # 4 4 EOS, 4 4 x EOS, 4 4 x y EOS
  assert [s for _, s in got] == [s for _, s in expected]
  np.testing.assert_allclose([v for v, _ in got], [v for v, _ in expected], rtol=1e-5)
  # The prefix wins over n-gram blocking ('4 4' repeats the unigram 4).
  blocked = _beam(logits_fn, 5, 4, prefix=prefix, no_repeat_ngram_size=1)
  assert all(seq[:2] == (4, 4) and seq.count(4) == 2 for _, seq in blocked)
