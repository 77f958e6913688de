"""Teacher-forced per-token log probabilities (model/scoring.py) and the plain log
probabilities of beam search's hypotheses (search.raw_log_probs), against plain numpy."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import incremental, scoring, search, transformer as model

CFG = model.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                              num_layers=2, max_len=64, deterministic=True)
INPUTS = np.array([[5, 9, 13, 22, 1, 0], [7, 3, 1, 0, 0, 0]], np.int32)
TARGETS = np.array([[11, 4, 30, 1, 0], [8, 1, 0, 0, 0]], np.int32)


@pytest.fixture(scope='module')
def params():
  params = jax.jit(lambda rng: model.init_params(CFG, rng))(jax.random.PRNGKey(0))
  table = params['shared_embedding']['embedding']  # sharper than the initialisation
  return dict(params, shared_embedding={'embedding': table * 4.0})


def np_log_softmax(x):
  x = np.asarray(x, np.float64)
  x = x - x.max(axis=-1, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def plain(params, exclude_pad):
  """log_softmax of the teacher-forced logits, gathered at the targets, in float64."""
  logits = np.asarray(jax.jit(model.Transformer(CFG).apply)({'params': params}, INPUTS,
                                                            TARGETS), np.float64)
  if exclude_pad:
    logits[..., model.PAD_ID] = -1e9
  chosen = np.take_along_axis(np_log_softmax(logits), TARGETS[..., None], axis=-1)[..., 0]
  return np.where(TARGETS != model.PAD_ID, chosen, 0.0)


@pytest.mark.parametrize('exclude_pad', [False, True])
def test_token_log_probs_equal_the_plain_teacher_forced_computation(params, exclude_pad):
  got = scoring.token_log_probs(CFG, params, INPUTS, TARGETS, exclude_pad=exclude_pad)
  assert got.shape == TARGETS.shape and got.dtype == jnp.float32
  np.testing.assert_allclose(got, plain(params, exclude_pad), atol=2e-5)
  assert np.all(np.asarray(got)[TARGETS == 0] == 0.0) and np.all(np.asarray(got)[TARGETS > 0] < 0)
  # The model object itself (a Transformer, or a variant) is used as given.
  np.testing.assert_array_equal(
      scoring.token_log_probs(model.Transformer(CFG), params, INPUTS, TARGETS,
                              exclude_pad=exclude_pad), got)


def test_token_log_probs_sum_the_incremental_decode_steps(params):
  """Step by step through decode_step's cache, as beam search scores a hypothesis."""
  context = incremental.decode_context(CFG, params, INPUTS)
  cache = incremental.init_cache(CFG, 2, TARGETS.shape[1])
  step = jax.jit(lambda cache, previous: incremental.decode_step(CFG, params, cache, previous,
                                                           context))
  previous = np.full((2, 1), model.BOS_ID, np.int32)
  steps = []
  for t in range(TARGETS.shape[1]):
    logits, cache = step(cache, previous)
    steps.append(np_log_softmax(logits)[np.arange(2), TARGETS[:, t]])
    previous = TARGETS[:, t:t + 1]
  by_step = np.where(TARGETS != 0, np.stack(steps, axis=1), 0.0)
  got = scoring.token_log_probs(CFG, params, INPUTS, TARGETS)
  np.testing.assert_allclose(got, by_step, atol=1e-4)
  np.testing.assert_allclose(np.sum(got, axis=1), by_step.sum(axis=1), atol=2e-4)


def test_ids_outside_the_vocabulary_are_named(params):
  # They used to give NaN logits and NaN log probabilities, silently.
  targets = TARGETS.copy()
  targets[1, 1] = 40
  with pytest.raises(ValueError, match=r'^targets id 40 at position \(1, 1\) is outside the '
                     r'vocabulary \(vocab_size=40\)'):
    scoring.token_log_probs(CFG, params, INPUTS, targets)
  inputs = INPUTS.copy()
  inputs[0, 2] = -3
  with pytest.raises(ValueError, match=r'^inputs id -3 at position \(0, 2\) .*vocab_size=40'):
    scoring.token_log_probs(CFG, params, inputs, TARGETS)
  # Under jit the ids are tracers: nothing to look at, no check, no error.
  traced = jax.jit(lambda p, x, y: scoring.token_log_probs(CFG, p, x, y))
  np.testing.assert_allclose(traced(params, INPUTS, TARGETS), plain(params, False), atol=2e-5)


def markov(vocab=6, seed=0):
  """A logits_fn whose next-token logits depend on the previous token only."""
  table = np.random.default_rng(seed).normal(size=(vocab, vocab)).astype(np.float32) * 2
  table[:, 0] = -1e9  # no padding
  return table, lambda tokens, cache: (jnp.asarray(table)[tokens[:, 0]], cache)


@pytest.mark.parametrize('alpha', [0.0, 0.6, 1.5])
def test_raw_log_probs_are_the_hypotheses_summed_log_probs(alpha):
  table, logits_fn = markov()
  max_lengths = jnp.array([7, 3])
  sequences, scores = jax.jit(lambda: search.beam_search(
      logits_fn, {}, batch_size=2, beam_size=4, alpha=alpha, max_decode_len=7,
      max_lengths=max_lengths))()
  raw = np.asarray(search.raw_log_probs(sequences, scores, alpha))
  log_p = np_log_softmax(table)
  for b in range(2):
    for k in range(4):
      seq = [int(t) for t in sequences[b, k]]
      tokens = seq[:seq.index(1) + 1]
      expected = sum(log_p[prev, t] for prev, t in zip([1] + tokens, tokens))
      np.testing.assert_allclose(raw[b, k], expected, rtol=1e-5)
      assert int(search.output_lengths(sequences)[b, k]) == len(tokens)
      np.testing.assert_allclose(scores[b, k],
                                 expected / search.length_penalty(len(tokens), alpha),
                                 rtol=1e-5)


def test_raw_log_probs_keep_empty_slots_empty():
  # One output token at most: EOS is the only hypothesis, the other three slots are empty.
  _, logits_fn = markov()
  sequences, scores = search.beam_search(logits_fn, {}, batch_size=1, beam_size=4,
                                         max_decode_len=1)
  raw = search.raw_log_probs(sequences, scores, 0.6)
  assert raw[0, 0] > search.NEG_INF
  np.testing.assert_array_equal(raw[0, 1:], search.NEG_INF)
  np.testing.assert_array_equal(search.output_lengths(jnp.array([[3, 1, 0], [2, 2, 2]])),
                                [2, 3])


def test_beam_search_has_no_n_best_switch():
  # It used to take n_best and ignore it; the returned beam, best first, is the n-best list.
  assert 'n_best' not in inspect.signature(search.beam_search).parameters
