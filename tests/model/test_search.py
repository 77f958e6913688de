"""Tests for t2t_jax/model/search.py against hand-made models and brute force.

Vocabulary convention here: PAD = 0, EOS = BOS = 1, real tokens 2..V-1.
Two toy models:
  * Markov: log probs indexed by the previous token (BOS counts as previous
    token 1), for hand-designed distributions and exact Viterbi optima.
  * History: logits depend on a hash of the whole prefix, which logits_fn
    reads from a history leaf in the cache it writes itself, so a wrongly
    tiled or reordered cache gives wrong scores.
"""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import search

EOS = 1
MIN_LOG_PROB = search.MIN_LOG_PROB


def np_log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  out = logits - logits.max()
  out = out - np.log(np.exp(out).sum())
  return np.maximum(out, MIN_LOG_PROB)


def penalty(n, alpha):
  return ((5.0 + n) / 6.0) ** alpha


def trim(seq):
  """Tokens up to and including the first EOS; checks 0-padding after it."""
  seq = [int(t) for t in seq]
  end = seq.index(EOS) + 1
  assert all(t == 0 for t in seq[end:]), seq
  return tuple(seq[:end])


def sequence_score(logp_fn, seq, alpha):
  prefix, total = [EOS], 0.0  # BOS == EOS == 1.
  for token in seq:
    total += logp_fn(tuple(prefix))[token]
    prefix.append(token)
  return total / penalty(len(seq), alpha)


def brute_force(logp_fn, tokens, max_len, alpha):
  """Every sequence of <= max_len tokens ending in EOS, best first."""
  scored = []
  for n in range(1, max_len + 1):
    for body in itertools.product(tokens, repeat=n - 1):
      seq = tuple(body) + (EOS,)
      scored.append((sequence_score(logp_fn, seq, alpha), seq))
  return sorted(scored, key=lambda x: -x[0])


# ---------------------------------------------------------------- Markov model
def markov_table(rows, vocab):
  """rows: {prev_token: {token: prob}}; unspecified tokens get prob 1e-6."""
  table = np.full((vocab, vocab), 1e-6)
  for prev, probs in rows.items():
    for token, p in probs.items():
      table[prev, token] = p
  table /= table.sum(axis=1, keepdims=True)
  return np.log(table).astype(np.float32)


def markov_fn(table):
  table = jnp.asarray(table)

  def logits_fn(tokens, cache):
    return table[tokens[:, 0]], cache
  return logits_fn


def markov_logp(table):
  return lambda prefix: np_log_softmax(table[prefix[-1]])


def markov_best(table, max_len, alpha):
  """Exact best (score, seq) over all lengths <= max_len by Viterbi."""
  vocab = table.shape[0]
  logp = np.stack([np_log_softmax(row) for row in table])
  live = {EOS: (0.0, ())}  # state (previous token) -> best (logprob, seq).
  best = (-np.inf, None)
  for n in range(1, max_len + 1):
    for lp, seq in live.values():
      prev = seq[-1] if seq else EOS
      cand = ((lp + logp[prev, EOS]) / penalty(n, alpha), seq + (EOS,))
      best = max(best, cand, key=lambda x: x[0])
    new_live = {}
    for lp, seq in live.values():
      prev = seq[-1] if seq else EOS
      for t in range(vocab):
        if t == EOS:
          continue
        cand = (lp + logp[prev, t], seq + (t,))
        if t not in new_live or cand[0] > new_live[t][0]:
          new_live[t] = cand
    live = new_live
  return best


# --------------------------------------------------------------- History model
HASH_P = 101


def history_model(seed, num_sentences, vocab, hist_len, scale=1.5):
  """Returns (logits_fn, init_cache(sentence_ids), np logp_fn(sent)(prefix))."""
  rng = np.random.default_rng(seed)
  table = (rng.normal(size=(num_sentences, HASH_P, vocab)) * scale
           ).astype(np.float32)
  table[..., 0] = -1e9  # PAD is never produced.
  weights = np.array([pow(31, j, HASH_P) for j in range(hist_len)], np.int32)

  def logits_fn(tokens, cache):
    pos = cache['pos']
    hist = jax.lax.dynamic_update_slice(cache['hist'], tokens, (0, pos))
    mask = jnp.arange(hist_len) <= pos
    h = jnp.sum((hist + 1) * weights * mask, axis=1) % HASH_P
    logits = jnp.asarray(table)[cache['sent'], h] + cache['offset']
    return logits, dict(cache, hist=hist, pos=pos + 1)

  def init_cache(sentence_ids):
    sentence_ids = np.asarray(sentence_ids, np.int32)
    return {'hist': jnp.zeros((len(sentence_ids), hist_len), jnp.int32),
            'sent': jnp.asarray(sentence_ids),
            'pos': jnp.array(0, jnp.int32),          # 0-d: shared position.
            'offset': jnp.array(3.0, jnp.float32)}   # 0-d: must pass through.

  def logp_fn(sent):
    def fn(prefix):
      h = sum((t + 1) * int(weights[j]) for j, t in enumerate(prefix)) % HASH_P
      return np_log_softmax(table[sent, h] + 3.0)
    return fn
  return logits_fn, init_cache, logp_fn


def searcher(logits_fn, batch_size, max_decode_len, beam_size=4):
  """Jitted search._search: (cache, max_lengths, alpha) -> seqs, scores, steps.

  alpha and max_lengths are traced, so one compilation (about a second on
  CPU) serves every call of a test.
  """
  @jax.jit
  def run(cache, max_lengths, alpha):
    return search._search(
        logits_fn, cache, batch_size=batch_size, beam_size=beam_size,
        alpha=alpha, max_decode_len=max_decode_len, max_lengths=max_lengths,
        eos_id=EOS, bos_id=EOS)

  def call(cache, max_lengths=None, alpha=0.6):
    if max_lengths is None:
      max_lengths = [max_decode_len] * batch_size
    seqs, scores, steps = run(cache, jnp.asarray(max_lengths, jnp.int32),
                              alpha)
    return np.asarray(seqs), np.asarray(scores), int(steps)
  return call


# ---------------------------------------------------------------------- tests
def test_length_penalty():
  np.testing.assert_allclose(search.length_penalty(1, 0.6), 1.0)
  np.testing.assert_allclose(search.length_penalty(7, 0.6), 2.0 ** 0.6,
                             rtol=1e-6)
  np.testing.assert_allclose(search.length_penalty(jnp.array([3, 9]), 0.0),
                             [1.0, 1.0])


def test_tile_and_gather_beams():
  cache = {'a': jnp.array([10, 20]), 'b': jnp.arange(4).reshape(2, 2),
           'pos': jnp.array(7)}
  tiled = search._tile_beams(cache, 3)
  np.testing.assert_array_equal(tiled['a'], [10, 10, 10, 20, 20, 20])
  assert tiled['b'].shape == (6, 2) and tiled['pos'].ndim == 0
  picked = search._gather_beams(tiled, jnp.array([2, 0, 0, 5, 3, 3]))
  np.testing.assert_array_equal(picked['a'], [10, 10, 10, 20, 20, 20])
  np.testing.assert_array_equal(picked['b'][3], [2, 3])
  assert int(picked['pos']) == 7


def test_exhaustive_beam_equals_brute_force():
  # V = 5 with PAD impossible leaves 3 real tokens; with max length <= 3, a
  # beam of 12 holds every real candidate at every step, so its n-best list
  # must be exactly the brute-force ranking of all sequences.
  max_lengths = [3, 2, 3]
  logits_fn, init_cache, logp_fn = history_model(0, 3, 5, hist_len=5)
  run = searcher(logits_fn, 3, max_decode_len=4, beam_size=12)
  for alpha in (0.0, 0.6, 2.0):
    seqs, scores, _ = run(init_cache([0, 1, 2]), max_lengths, alpha)
    assert seqs.shape == (3, 12, 4) and scores.dtype == np.float32
    for b, max_len in enumerate(max_lengths):
      expected = brute_force(logp_fn(b), (2, 3, 4), max_len, alpha)[:12]
      got = [trim(s) for s in seqs[b, :len(expected)]]
      assert got == [seq for _, seq in expected]
      np.testing.assert_allclose(scores[b, :len(expected)],
                                 [s for s, _ in expected], rtol=1e-5, atol=1e-5)


def trap_table():
  # Greedy takes 2 (0.4), after which everything is flat and it stops at
  # [2, EOS] (prob 0.08); the best sequence is [3, 4, EOS] (0.35*0.9*0.9).
  flat = {t: 0.2 for t in (1, 2, 3, 4, 5)}
  return markov_table({
      1: {2: 0.4, 3: 0.35, 4: 0.15, 5: 0.05, 1: 0.05},
      2: flat,
      3: {4: 0.9, 1: 0.025, 2: 0.025, 3: 0.025, 5: 0.025},
      4: {1: 0.9, 2: 0.025, 3: 0.025, 4: 0.025, 5: 0.025},
      5: {1: 0.5, 2: 0.5}}, vocab=6)


def test_beam4_finds_brute_force_best_where_greedy_fails():
  table = trap_table()
  best_score, best_seq = brute_force(markov_logp(table), (2, 3, 4, 5), 5,
                                     0.6)[0]
  assert best_seq == (3, 4, EOS)
  seqs, scores = search.beam_search(markov_fn(table), {}, batch_size=2,
                                    max_decode_len=5)
  for b in range(2):
    assert trim(seqs[b, 0]) == best_seq
    np.testing.assert_allclose(scores[b, 0], best_score, rtol=1e-5)
    assert np.all(np.diff(np.asarray(scores[b])) <= 0)  # Best first.
  greedy, _ = search.greedy_search(markov_fn(table), {}, batch_size=2,
                                   max_decode_len=5)
  assert trim(greedy[0]) == (2, EOS)


def np_greedy(logp_fn, max_len):
  prefix, total = [EOS], 0.0
  for n in range(1, max_len + 1):
    logp = logp_fn(tuple(prefix))
    token = EOS if n == max_len else int(np.argmax(logp))
    total += logp[token]
    prefix.append(token)
    if token == EOS:
      break
  return tuple(prefix[1:]), total


def test_beam1_equals_greedy():
  max_lengths = [5, 3, 8, 8]
  logits_fn, init_cache, logp_fn = history_model(1, 4, 6, hist_len=9)
  cache = init_cache([0, 1, 2, 3])
  kwargs = dict(batch_size=4, max_decode_len=8,
                max_lengths=jnp.array(max_lengths))
  beam_seqs, beam_scores = search.beam_search(logits_fn, cache, beam_size=1,
                                              alpha=0.0, **kwargs)
  greedy_seqs, greedy_scores = search.greedy_search(logits_fn, cache, **kwargs)
  assert greedy_seqs.shape == (4, 8) and greedy_scores.shape == (4,)
  np.testing.assert_array_equal(beam_seqs[:, 0], greedy_seqs)
  np.testing.assert_array_equal(beam_scores[:, 0], greedy_scores)
  lengths = []
  for b, max_len in enumerate(max_lengths):
    seq, total = np_greedy(logp_fn(b), max_len)
    assert trim(greedy_seqs[b]) == seq
    np.testing.assert_allclose(greedy_scores[b], total, rtol=1e-5)
    lengths.append(len(seq))
  assert len(set(lengths)) > 1  # The case is not degenerate.


def test_length_penalty_changes_winner():
  # [EOS]: 0.5. [2, 3, EOS]: 0.5 * 0.9 * 0.9 = 0.405, so log probs favour the
  # short one; dividing by ((5 + 3) / 6) ** alpha favours the long one for
  # alpha large enough (about 0.75).
  table = markov_table({1: {1: 0.5, 2: 0.5}, 2: {3: 0.9, 1: 0.1},
                        3: {1: 0.9, 3: 0.1}}, vocab=5)
  run = searcher(markov_fn(table), 1, max_decode_len=4)
  for alpha, expected in ((0.0, (EOS,)), (0.6, (EOS,)), (2.0, (2, 3, EOS))):
    best_score, best_seq = brute_force(markov_logp(table), (2, 3, 4), 4,
                                       alpha)[0]
    assert best_seq == expected
    seqs, scores, _ = run({}, alpha=alpha)
    assert trim(seqs[0, 0]) == expected
    np.testing.assert_allclose(scores[0, 0], best_score, rtol=1e-5)


def test_early_termination():
  # EOS is likely after every real token: beams fill with finished
  # hypotheses after a few steps and nothing live can catch up.
  rows = {t: {1: 0.8, 2: 0.1, 3: 0.05, 4: 0.05} for t in (2, 3, 4)}
  rows[1] = {2: 0.5, 3: 0.3, 4: 0.2}
  table = markov_table(rows, vocab=5)
  run = searcher(markov_fn(table), 2, max_decode_len=20)
  for alpha in (0.0, 0.6):
    seqs, scores, steps = run({}, alpha=alpha)
    assert steps < 10
    best_score, best_seq = markov_best(table, 20, alpha)
    assert trim(seqs[0, 0]) == best_seq
    np.testing.assert_allclose(scores[0, 0], best_score, rtol=1e-5)
  # The bound must use the penalty at the maximum length: after step 2 the
  # beam holds 4 finished hypotheses and the live chain 5, 5, ... is far worse
  # in raw log prob (0.02 vs 0.3 for [EOS]), yet costs almost nothing per
  # token, so with alpha = 2 its 30-token version wins. A bound at the next
  # length would stop too early and return a short hypothesis.
  rows = {1: {1: 0.3, 2: 0.23, 3: 0.23, 4: 0.22, 5: 0.02},
          5: {5: 0.999, 1: 0.001}}
  rows.update({t: {1: 0.99, 2: 0.01} for t in (2, 3, 4)})
  table = markov_table(rows, vocab=6)
  run = searcher(markov_fn(table), 1, max_decode_len=30)
  for alpha, expected_len in ((0.0, 1), (2.0, 30)):
    best_score, best_seq = markov_best(table, 30, alpha)
    assert len(best_seq) == expected_len
    seqs, scores, steps = run({}, alpha=alpha)
    assert trim(seqs[0, 0]) == best_seq
    np.testing.assert_allclose(scores[0, 0], best_score, rtol=1e-5)
    assert steps == (2 if alpha == 0.0 else 30)
  # A model that never wants to stop runs to the maximum length.
  never = markov_table({t: {2: 1.0} for t in range(5)}, vocab=5)
  _, _, steps = searcher(markov_fn(never), 1, max_decode_len=7)({})
  assert steps == 7


def test_max_lengths_respected():
  # EOS is nearly impossible, so every hypothesis runs to its own limit.
  rows = {t: {1: 1e-4, 2: 0.4, 3: 0.3, 4: 0.2, 5: 0.1} for t in range(6)}
  fn = markov_fn(markov_table(rows, vocab=6))
  max_lengths = [2, 5, 3]
  run = searcher(fn, 3, max_decode_len=6)
  seqs, scores, steps = run({}, max_lengths)
  assert steps == 5  # Stops once the longest limit is reached, not at 6.
  for b, max_len in enumerate(max_lengths):
    for k in range(4):
      assert len(trim(seqs[b, k])) == max_len
  seqs, _, _ = run({})  # max_lengths None: the full max_decode_len.
  assert all(len(trim(s)) == 6 for s in seqs.reshape(-1, 6))


def test_fewer_hypotheses_than_beam():
  # Vocab {PAD, EOS, 2} and length <= 2 allow only 3 sequences ([0, EOS] is
  # merely improbable): the 4th slot is empty, all zeros, score NEG_INF.
  table = markov_table({1: {1: 0.6, 2: 0.4}, 2: {1: 0.7, 2: 0.3}}, vocab=3)
  seqs, scores, _ = searcher(markov_fn(table), 1, max_decode_len=2)({})
  expected = brute_force(markov_logp(table), (0, 2), 2, 0.6)
  assert [trim(s) for s in seqs[0, :3]] == [seq for _, seq in expected]
  np.testing.assert_allclose(scores[0, :3], [s for s, _ in expected],
                             rtol=1e-5)
  np.testing.assert_array_equal(seqs[0, 3], [0, 0])
  assert scores[0, 3] == search.NEG_INF


def test_cache_reorder_and_batch_independence():
  # logits_fn reads the history leaf it writes, and the sentence id leaf: if
  # the search tiled or reordered them wrongly, the returned scores would not
  # be the exact scores of the returned sequences.
  max_lengths = [7, 4, 6]
  logits_fn, init_cache, logp_fn = history_model(2, 3, 6, hist_len=8)
  seqs, scores, _ = searcher(logits_fn, 3, max_decode_len=7)(
      init_cache([0, 1, 2]), max_lengths)
  run_alone = searcher(logits_fn, 1, max_decode_len=7)
  for b, max_len in enumerate(max_lengths):
    hyps = [trim(s) for s in seqs[b]]
    assert len(set(hyps)) == 4
    assert max(len(h) for h in hyps) <= max_len
    assert len({len(h) for h in hyps}) > 1 or b == 1  # Varied lengths.
    expected = [sequence_score(logp_fn(b), h, 0.6) for h in hyps]
    np.testing.assert_allclose(scores[b], expected, rtol=1e-5, atol=1e-5)
    assert np.all(np.diff(scores[b]) <= 0)
    # Done sentences are frozen: decoding alone gives the same result.
    alone_seqs, alone_scores, _ = run_alone(init_cache([b]), [max_len])
    np.testing.assert_array_equal(alone_seqs[0], seqs[b])
    np.testing.assert_allclose(alone_scores[0], scores[b], rtol=1e-6)


def test_jit_matches_eager():
  logits_fn, init_cache, _ = history_model(3, 3, 6, hist_len=9)
  cache = init_cache([0, 1, 2])
  max_lengths = jnp.array([8, 3, 6], jnp.int32)
  decode = functools.partial(search.beam_search, logits_fn, batch_size=3,
                             max_decode_len=8)
  eager = decode(cache, max_lengths=max_lengths)
  jitted = jax.jit(lambda c, m, a: decode(c, max_lengths=m, alpha=a))(
      cache, max_lengths, 0.6)
  for e, j in zip(eager, jitted):
    np.testing.assert_array_equal(np.asarray(e), np.asarray(j))
  assert np.all(np.isfinite(np.asarray(eager[1])))


@pytest.mark.parametrize('max_len, lengths', [(10, (10,)), (16, (16,)), (17, (16, 17)),
                                              (82, (16, 32, 64, 82)), (306, (16, 32, 64, 128, 256, 306))])
def test_cache_lengths_double_from_16_and_end_at_max_decode_len(max_len, lengths):
  assert search.cache_lengths(max_len) == lengths
