"""Batched beam search and greedy decoding (Vaswani et al. 2017, section 6.1).

The paper decodes with "beam search with a beam size of 4 and length penalty
alpha = 0.6", "maximum output length during inference to input length + 50",
and terminates "early when possible". This module is model-agnostic: it only
sees a `logits_fn` and a decode cache (see `beam_search`).

Semantics, in the order a step applies them:

* Every live hypothesis is extended by every token; candidates are ranked by
  raw log probability (live hypotheses keep raw log probs).
* An EOS extension is *finished* if it ranks among the top `beam_size` of all
  candidates of its sentence (it is "in the beam"). Its score is the GNMT
  length penalised log prob `logprob / ((5 + |Y|) / 6) ** alpha`, |Y| counting
  the EOS. The `beam_size` best finished hypotheses are kept.
* The `beam_size` best non-EOS extensions become the new live hypotheses; the
  cache is reordered by their parent beams.
* A sentence whose hypotheses reach `max_lengths[b] - 1` tokens may only emit
  EOS, so no output (EOS included) is longer than `max_lengths[b]`.
* A sentence is done when it reached its maximum length, or when it holds
  `beam_size` finished hypotheses and the best live one cannot beat the worst
  of them even at its most favourable length (with `best_only`: holds one and the best
  live one cannot beat it, which leaves the best hypothesis and its score exactly those of
  the whole search, in fewer steps). Done sentences are frozen, so a
  sentence decodes the same whatever else is in its batch. The loop stops when
  every sentence is done, or after `max_decode_len` steps.

`length_rule` (static): 'gnmt' above, or 'transformers', the score and the stop of Hugging
Face transformers' beam search (`length_rules`); with it, `best_only` does not apply.

Ranking EOS against the other candidates (rather than finishing every EOS
extension) makes beam size 1 with alpha 0 exactly greedy decoding, which is
how `greedy_search` is implemented: one code path for both.

Padding id 0 is not special here: the search never masks it, a trained model
gives it negligible probability. Outputs are `eos_id` then 0-padding.
"""

from typing import Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp

from t2t_jax.model import length_rules, top_k
from t2t_jax.model.array_checks import check_search_arguments
from t2t_jax.model.beam_cache import (  # noqa: F401  (re-exported: search.cache_lengths)
    FIRST_CACHE_LENGTH, Cache, GrowCache, ReorderCache, _gather_beams, _tile_beams,
    cache_lengths)
from t2t_jax.model.length_rules import (  # noqa: F401  (re-exported: search.length_penalty)
    LENGTH_RULES, check_length_rule, length_penalty)
from t2t_jax.model.ngram_blocking import allowed_logits  # noqa: F401  (search.allowed_logits)

# Stands in for log(0): finite, so sums, divisions and comparisons never make
# NaNs. Impossible states hold exactly this value (assigned, never summed).
NEG_INF = -1.0e9
# Floor for per-token log probs. exp(-1e4) is 0 in float32 anyway, and the floor
# keeps every possible hypothesis (up to 1e5 tokens) strictly above NEG_INF.
MIN_LOG_PROB = -1.0e4

LogitsFn = Callable[[jax.Array, Cache], tuple[jax.Array, Cache]]
ArrayLike = Union[jax.Array, float, int]


class _State(NamedTuple):
  """Loop carry. B = batch, K = beam, L = max_decode_len."""
  step: jax.Array         # [] int32: tokens generated so far.
  live_tok: jax.Array     # [B, K] int32: last token of each live hypothesis.
  live_seqs: jax.Array    # [B, K, L] int32: live tokens, 0 after `step`.
  live_lp: jax.Array      # [B, K] float32: raw log prob, sorted descending.
  live_ok: jax.Array      # [B, K] bool: slot holds a possible hypothesis.
  fin_seqs: jax.Array     # [B, K, L] int32: finished tokens, EOS then 0s.
  fin_scores: jax.Array   # [B, K] float32: length-normalised, sorted desc.
  fin_ok: jax.Array       # [B, K] bool.
  done: jax.Array         # [B] bool: sentence frozen.
  cache: Cache            # leaves [B * K, ...] (sentence-major) or 0-d.


def _top_k_gather(scores: jax.Array, k: int,
                  *others: jax.Array) -> tuple[jax.Array, ...]:
  """Top `k` of `scores` [B, N] on axis 1, and `others` [B, N, ...] alike."""
  top, index = jax.lax.top_k(scores, k)
  gathered = [
      jnp.take_along_axis(x, index.reshape(index.shape + (1,) * (x.ndim - 2)),
                          axis=1) for x in others]
  return (top, *gathered)


def _search(
    logits_fn: LogitsFn, cache: Cache, *, batch_size: int, beam_size: int,
    alpha: ArrayLike, max_decode_len: int, max_lengths: Optional[jax.Array],
    eos_id: int, bos_id: int, grow_cache: Optional[GrowCache] = None,
    no_repeat_ngram_size: int = 0, prefix: Optional[jax.Array] = None,
    reorder_cache: Optional[ReorderCache] = None, best_only: bool = False,
    length_rule: str = 'gnmt') -> tuple[jax.Array, jax.Array, jax.Array]:
  """The beam search loop; `beam_search` documents the arguments.

  Returns:
    sequences [B, K, max_decode_len] int32, scores [B, K] float32 (both best
    first), and the number of decode steps taken ([] int32; also the number of
    `logits_fn` calls), which is < max_decode_len after early termination.
  """
  b, k, length = batch_size, beam_size, max_decode_len
  check_length_rule('beam_search', length_rule)
  if max_lengths is None:
    max_lengths = jnp.full((b,), length, jnp.int32)
  # Forced EOS needs max_length >= 1, and nothing may outgrow the arrays.
  max_lengths = jnp.clip(jnp.asarray(max_lengths, jnp.int32), 1, length)

  def body(s: _State) -> _State:
    return _step(logits_fn, s, max_lengths=max_lengths, alpha=alpha, eos_id=eos_id,
                 no_repeat_ngram_size=no_repeat_ngram_size, prefix=prefix,
                 reorder_cache=reorder_cache or _gather_beams, best_only=best_only,
                 length_rule=length_rule)

  s = _initial_state(cache, b, k, length, bos_id)
  # One while loop per cache length: steps 0..end-1 write positions below `end`.
  for end in (length,) if grow_cache is None else cache_lengths(length):
    if grow_cache is not None:
      s = s._replace(cache=grow_cache(s.cache, end))
    s = jax.lax.while_loop(
        lambda s, end=end: (s.step < end) & ~jnp.all(s.done), body, s)
  return _result(s, alpha, length_rule)


def _initial_state(cache: Cache, b: int, k: int, length: int, bos_id: int) -> _State:
  """Step 0: BOS in every slot, but only beam 0 alive, so step 0 does not yield K copies of
  each token; nothing finished; the cache tiled to [B * K, ...]."""
  first_beam = jnp.arange(k) == 0
  return _State(
      step=jnp.array(0, jnp.int32),
      live_tok=jnp.full((b, k), bos_id, jnp.int32),
      live_seqs=jnp.zeros((b, k, length), jnp.int32),
      live_lp=jnp.broadcast_to(jnp.where(first_beam, 0.0, NEG_INF), (b, k)
                               ).astype(jnp.float32),
      live_ok=jnp.broadcast_to(first_beam, (b, k)),
      fin_seqs=jnp.zeros((b, k, length), jnp.int32),
      fin_scores=jnp.full((b, k), NEG_INF, jnp.float32),
      fin_ok=jnp.zeros((b, k), bool),
      done=jnp.zeros((b,), bool),
      cache=_tile_beams(cache, k))


def _step(logits_fn: LogitsFn, s: _State, *, max_lengths: jax.Array, alpha: ArrayLike,
          eos_id: int, no_repeat_ngram_size: int = 0,
          prefix: Optional[jax.Array] = None,
          reorder_cache: ReorderCache = _gather_beams, best_only: bool = False,
          length_rule: str = 'gnmt') -> _State:
  """One decoding step: the 2K best extensions, then the finished and the live sets."""
  b, k, length = s.live_seqs.shape
  i = s.step
  logits, new_cache = logits_fn(s.live_tok.reshape(b * k, 1), s.cache)
  top_lp, top_ok, parent, token, top_seqs = _top_candidates(
      logits, s, max_lengths=max_lengths, eos_id=eos_id,
      no_repeat_ngram_size=no_repeat_ngram_size, prefix=prefix)
  is_eos = token == eos_id

  # Finished: EOS candidates inside the beam proper (rank < K).
  new_fin = top_ok & is_eos & (jnp.arange(2 * k) < k)
  new_scores = jnp.where(new_fin, top_lp / length_penalty(i + 1, alpha, length_rule),
                         NEG_INF)
  # Old entries come first, so ties keep the earlier (shorter) hypothesis.
  fin_scores, fin_seqs, fin_ok = _top_k_gather(
      jnp.concatenate([s.fin_scores, new_scores], axis=1), k,
      jnp.concatenate([s.fin_seqs, top_seqs], axis=1),
      jnp.concatenate([s.fin_ok, new_fin], axis=1))

  # Live: the K best non-EOS candidates.
  live = top_ok & ~is_eos
  live_lp, live_ok, live_seqs, live_tok, live_parent = _top_k_gather(
      jnp.where(live, top_lp, NEG_INF), k, live, top_seqs, token, parent)
  if k > 1:  # with one beam the parent is always the row itself
    flat_parent = (jnp.arange(b)[:, None] * k + live_parent).reshape(b * k)
    new_cache = reorder_cache(new_cache, flat_parent)

  n = i + 1
  done = s.done | _finished_sentences(
      n, live_lp, live_ok, fin_scores, fin_ok, max_lengths=max_lengths, alpha=alpha,
      rank=0 if best_only and length_rule == 'gnmt' else k - 1, length_rule=length_rule)
  # Freeze done sentences. The bound already says no live hypothesis can
  # enter the finished set; freezing also rules out float rounding in it, so
  # a sentence's result never depends on how long its batch mates decode.
  live_ok = live_ok & ~done[:, None]
  live_lp = jnp.where(live_ok, live_lp, NEG_INF)
  return _State(n, live_tok, live_seqs, live_lp, live_ok, fin_seqs,
                fin_scores, fin_ok, done, new_cache)


def _top_candidates(logits: jax.Array, s: _State, *, max_lengths: jax.Array, eos_id: int,
                    no_repeat_ngram_size: int = 0, prefix: Optional[jax.Array] = None
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
  """The 2K best one-token extensions of the live hypotheses, per sentence.

  Two stages, the same candidates as one top-2K over all K x V extensions of a sentence:
  each beam's 2K best tokens (by logit: a row's log-softmax is its logits minus one
  constant; fewer if V < 2K), then the 2K best of those K x 2K. Only the selected entries
  are normalised (`jax.nn.log_softmax`'s arithmetic, so the same values), and no
  [B, K x V] array of candidate scores is ever written (beam decode 1.14x on CPU).
  Constraints only narrow the choice, never the normalisation (`allowed_logits`).

  Args:
    logits: [B * K, 1, V] (any float dtype) for the next token of each live slot.

  Returns:
    log probs [B, 2K] float32 (sorted descending), possible [B, 2K] bool, parent slot and
    token [B, 2K] int32, and the extended sequences [B, 2K, L] int32.
  """
  b, k, length = s.live_seqs.shape
  i = s.step
  vocab = logits.shape[-1]
  x = logits.astype(jnp.float32).reshape(b, k, vocab)
  x_max = jnp.max(x, axis=-1, keepdims=True)
  log_sum = jnp.log(jnp.sum(jnp.exp(x - x_max), axis=-1, keepdims=True))   # [B, K, 1]
  n = min(2 * k, vocab)  # per beam; K x n >= 2K for any vocabulary of 2 or more
  constrained = bool(no_repeat_ngram_size) or prefix is not None
  choice = allowed_logits(x, s.live_seqs, i, no_repeat_ngram_size, prefix) if constrained else x
  beam_x, beam_token = top_k.top_k(choice, n)                              # [B, K, n]

  # At the last allowed position only EOS may follow (per sentence).
  forced = (i >= max_lengths - 1)[:, None, None]                            # [B, 1, 1]
  first = jnp.arange(n) == 0
  beam_x = jnp.where(forced, jnp.where(first, x[:, :, eos_id:eos_id + 1], -jnp.inf), beam_x)
  beam_token = jnp.where(forced, jnp.where(first, eos_id, 0), beam_token)
  logp = jnp.maximum((beam_x - x_max) - log_sum, MIN_LOG_PROB)
  ok = s.live_ok[:, :, None] & (~forced | first)
  if constrained:  # a token taken out of the choice is no candidate
    ok = ok & (beam_x > -jnp.inf)
  ok = ok.reshape(b, k * n)
  cand_lp = jnp.where(ok, (s.live_lp[:, :, None] + logp).reshape(b, k * n), NEG_INF)

  # At most K candidates are EOS (one per parent), so the top 2K hold both
  # the top K overall and the top K non-EOS.
  top_lp, top_index = jax.lax.top_k(cand_lp, 2 * k)                        # [B, 2K]
  top_ok = jnp.take_along_axis(ok, top_index, axis=1)
  parent = top_index // n
  token = jnp.take_along_axis(beam_token.reshape(b, k * n), top_index, axis=1)
  positions = jnp.arange(length, dtype=jnp.int32)
  top_seqs = jnp.take_along_axis(s.live_seqs, parent[:, :, None], axis=1)
  top_seqs = jnp.where(positions == i, token[:, :, None], top_seqs)
  return top_lp, top_ok, parent, token, top_seqs


def _finished_sentences(n: jax.Array, live_lp: jax.Array, live_ok: jax.Array,
                        fin_scores: jax.Array, fin_ok: jax.Array, *, max_lengths: jax.Array,
                        alpha: ArrayLike, rank: int, length_rule: str = 'gnmt') -> jax.Array:
  """[B] bool: sentences that stop after `n` tokens (length limit, no live hypothesis, or
  none can still beat the finished one of `rank`: K - 1, the worst kept; 0, the best, by
  `length_rules.hopeless`)."""
  hopeless = fin_ok[:, rank] & length_rules.hopeless(
      live_lp[:, 0], fin_scores[:, rank], n, max_lengths, alpha, length_rule)
  return (n >= max_lengths) | ~live_ok[:, 0] | hopeless


def _result(s: _State, alpha: ArrayLike, length_rule: str = 'gnmt'
            ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Sequences [B, K, L], scores [B, K] and the steps taken, from the final loop state."""
  # Should not trigger (forced EOS always finishes a hypothesis), but a
  # sentence without any finished hypothesis returns its live ones.
  any_fin = jnp.any(s.fin_ok, axis=1, keepdims=True)                # [B, 1]
  live_scores = s.live_lp / length_penalty(s.step, alpha, length_rule)
  ok = jnp.where(any_fin, s.fin_ok, s.live_ok)
  scores = jnp.where(ok, jnp.where(any_fin, s.fin_scores, live_scores), NEG_INF)
  # Empty slots may hold leftovers of impossible candidates: blank them.
  sequences = jnp.where((any_fin & ok)[:, :, None], s.fin_seqs,
                        jnp.where(ok[:, :, None], s.live_seqs, 0))
  return sequences, scores, s.step


def beam_search(
    logits_fn: LogitsFn, cache: Cache, *, batch_size: int,
    beam_size: int = 4, alpha: ArrayLike = 0.6, max_decode_len: int,
    max_lengths: Optional[jax.Array] = None, eos_id: int = 1, bos_id: int = 1,
    grow_cache: Optional[GrowCache] = None, no_repeat_ngram_size: int = 0,
    prefix: Optional[jax.Array] = None, reorder_cache: Optional[ReorderCache] = None,
    best_only: bool = False, length_rule: str = 'gnmt'
) -> tuple[jax.Array, jax.Array]:
  """Batched beam search with GNMT length penalty (paper section 6.1).

  The whole beam comes back, best first (its first n rows are the n-best list, n <= K), and
  `raw_log_probs` gives each hypothesis's plain log probability beside its score.

  Jittable with `logits_fn` closed over; `batch_size`, `beam_size`, `max_decode_len`,
  `eos_id`, `bos_id` static (one compilation per combination); the rest may be traced.

  Args:
    logits_fn: (tokens [batch*beam, 1] int32, cache) -> (logits [batch*beam, vocab] float
      (any float dtype, unnormalised), new_cache). Rows are sentence-major: row r is
      sentence r // beam, beam r % beam. new_cache keeps cache's structure, shapes, dtypes.
    cache: pytree for `batch_size` sentences. Leaves with ndim >= 1 (leading dim batch_size)
      are tiled to batch*beam here and reordered by parent beam every step; 0-d leaves (a
      shared decode position) pass through: logits_fn owns them. Per-sentence constant state
      (the encoder output) is better closed over by `logits_fn`, not tiled and reordered.
    batch_size: number of sentences B. beam_size: beam width K (paper: 4).
    alpha: length penalty exponent (paper: 0.6); 0 ranks by raw log prob.
    max_decode_len: L, the length of the output arrays, and the most steps.
    max_lengths: [B] int32 per-sentence maximum output length including EOS
      (paper: source length + 50), clipped to [1, L]; None means L.
    eos_id: end token, the only one allowed at max_lengths[b] - 1; bos_id: first input.
    grow_cache: None: `cache` has room for all max_decode_len positions. Given, the cache
      grows with the output instead: `cache` may start with room for as few as one
      position, and `grow_cache(cache, n)` (n >= its current room, leaves [batch*beam,
      ...]) must return it with room for n positions, same values, same structure. It is
      called before steps 0, 16, 32, 64, ... (`cache_lengths`); the results are those of a
      full-size cache (up to float summation order in the logits_fn).
    no_repeat_ngram_size: n (static): no hypothesis repeats an n-gram (`ngram_blocking`).
    prefix: [B, P] int32: every hypothesis of sentence b starts with `prefix[b]`'s non-zero
      tokens (0 pads), which count in its score, and the search goes on from there.
    reorder_cache: (cache, parents [batch*beam] int32) -> the cache with row r continuing
      row parents[r]; None: gathers every leaf's rows (`incremental.reorder_cache`: cheaper).
    best_only: stop a sentence once its best is certain, not its K-th (module docstring):
      the same best hypothesis and score, 7% fewer steps; the other K - 1 may differ.
    length_rule: 'gnmt' (the paper's) or 'transformers' (static; `length_rules`).

  Returns:
    sequences: [B, K, L] int32, best first, each ending with eos_id then 0s
      (a slot with no possible hypothesis is all 0s with score NEG_INF).
    scores: [B, K] float32, descending: log p(sequence) / length_penalty(its length with
      EOS, alpha, length_rule), what the search ranks by (NEG_INF for an empty slot).
  """
  check_search_arguments('beam_search', logits_fn, batch_size, beam_size, max_decode_len,
                         grow_cache=grow_cache, reorder_cache=reorder_cache)
  sequences, scores, _ = _search(
      logits_fn, cache, batch_size=batch_size, beam_size=beam_size,
      alpha=alpha, max_decode_len=max_decode_len, max_lengths=max_lengths,
      eos_id=eos_id, bos_id=bos_id, grow_cache=grow_cache,
      no_repeat_ngram_size=no_repeat_ngram_size, prefix=prefix, reorder_cache=reorder_cache,
      best_only=best_only, length_rule=length_rule)
  return sequences, scores


def output_lengths(sequences: jax.Array, eos_id: int = 1) -> jax.Array:
  """[..., L] int32 outputs (`beam_search`'s) -> [...] int32: tokens up to and including the
  first `eos_id`; L for a row without one."""
  length = sequences.shape[-1]
  is_eos = sequences == eos_id
  return jnp.where(jnp.any(is_eos, axis=-1), jnp.argmax(is_eos, axis=-1) + 1, length
                   ).astype(jnp.int32)


def raw_log_probs(sequences: jax.Array, scores: jax.Array, alpha: ArrayLike,
                  eos_id: int = 1, length_rule: str = 'gnmt') -> jax.Array:
  """The plain log probabilities of `beam_search`'s hypotheses: sum over their tokens, EOS
  included, of log p(token | prefix) as `logits_fn` gave them (each floored at
  MIN_LOG_PROB).

  Args:
    sequences: [B, K, L] int32 and scores: [B, K] float32, as `beam_search` returns them.
    alpha, length_rule: the length penalty they were searched with.
  Returns:
    [B, K] float32: scores * length_penalty(output length with EOS, alpha, length_rule),
    equal to the search's own sums up to float32 rounding (two roundings, relative 1e-7); NEG_INF for an
    empty slot.
  """
  raw = scores * length_penalty(output_lengths(sequences, eos_id), alpha, length_rule)
  return jnp.where(scores > NEG_INF, raw, NEG_INF)


def greedy_search(
    logits_fn: LogitsFn, cache: Cache, *, batch_size: int,
    max_decode_len: int, max_lengths: Optional[jax.Array] = None,
    eos_id: int = 1, bos_id: int = 1, grow_cache: Optional[GrowCache] = None
) -> tuple[jax.Array, jax.Array]:
  """Greedy decoding: `beam_search` with beam 1 and alpha 0 (argmax per step).

  Arguments as in `beam_search`. Returns sequences [B, L] int32 (EOS then 0s)
  and scores [B] float32, the sum of the chosen tokens' log probs.
  """
  check_search_arguments('greedy_search', logits_fn, batch_size, 1, max_decode_len)
  sequences, scores = beam_search(
      logits_fn, cache, batch_size=batch_size, beam_size=1, alpha=0.0,
      max_decode_len=max_decode_len, max_lengths=max_lengths, eos_id=eos_id,
      bos_id=bos_id, grow_cache=grow_cache)
  return sequences[:, 0], scores[:, 0]
