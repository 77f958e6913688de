"""Beam search (§6.1) that drops finished sentences out of its batch: the same translations
as `beam_decode.beam_decode`, in fewer rows x steps.

A batch of sentences searched as one program (`search.beam_search`) runs every row until its
last sentence stops: done sentences are frozen, but their rows still go through every
decoder step. On the bundled test set, 64 sentences a batch cost 75.4 rows x steps a
sentence where the sentences' own steps sum to 51.0 (`benchmarks/peers/stopping.py`).

Here the search runs in segments, each a jitted while loop of `search._step` (the very loop
body `search.beam_search` runs) that stops at the next cache length (`search.cache_lengths`)
or once no more sentences are live than the next smaller batch size holds (`levels`).
Between segments, the live sentences (and done ones to fill the size) are gathered into that
smaller batch: their hypotheses, their rows of the decode cache (an append-only cache's
ancestry is relative to each row and a sentence's K rows move together, so it stays valid)
and their encoder-decoder keys and values. So each sentence runs the single program's
search: while the batch keeps its size, bit for bit; once it shrinks, up to the last bits of
float rounding (a matmul sums in an order that depends on its rows, as between any two
batchings of the same sentences). The bundled test set translates identically (1010/1010).

Not jittable: the host reads how many sentences are live after each segment, and each batch
size x cache length is a program of its own (compiled when first reached). The StableHLO
artifact serializes `decode_batch`'s single program, which gives the same translations.
"""

import functools
from typing import Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.model import beam_decode, incremental, module_jit, search
from t2t_jax.model.transformer import EOS_ID, ModelLike, as_model


# Below this many sentences a batch, the single program is faster. Bundled test set, 2-core
# CPU, two batches at once (benchmarks/results/compaction.jsonl): 4 rows 159.5 sentences/s
# single, 143.2 compacting (the segments' host round trips cost more than the few rows x steps
# they save); 16 rows 124.7 against 142.8 (1.145x), 64 rows 114.7 against 148.1 (1.29x).
MIN_ROWS = 16


def levels(rows: int) -> Tuple[int, ...]:
  """The batch sizes a batch of `rows` sentences shrinks through: rows, half of it, then a
  quarter of the last, while at least 1 (64 -> 64, 32, 8, 2). Each size x cache length is a
  program to compile; on the bundled test set at 64 rows these four leave 56.6 rows x steps a
  sentence (halving down to 1: 55.3, with 7 sizes and about 1.7x the compile time; 51.0 if every
  sentence left the batch the step it stopped; 75.4 with no compaction)."""
  sizes, divisor = [rows], 2
  while sizes[-1] // divisor >= 1:
    sizes.append(sizes[-1] // divisor)
    divisor = 4
  return tuple(sizes)


def compacting_beam_decode(model: ModelLike, beam_size: int, alpha: float, params,
                           inputs: np.ndarray, max_lengths: np.ndarray, max_decode_len: int,
                           *, best_only: bool = True, sizes: Optional[Sequence[int]] = None,
                           length_rule: str = 'gnmt') -> Tuple[np.ndarray, np.ndarray]:
  """`beam_decode.beam_decode(..., best_only=best_only)` (grown, append-only cache) on host
  arrays, shrinking the batch as its sentences finish.

  Args:
    model, beam_size, alpha, params, max_decode_len, length_rule: as
      `beam_decode.beam_decode`.
    inputs: `[rows, src_len]` int32 source ids; max_lengths: `[rows]` int32.
    best_only: `search.beam_search`'s (decode_batch's True; the n-best search's False).
    sizes: the batch sizes to shrink through, descending, the first `rows` (None: `levels`).

  Returns:
    sequences `[rows, K, L]` int32 and scores `[rows, K]` float32 (numpy), as `beam_decode`.
  Raises:
    ValueError: `sizes` that do not start at rows and descend, distinct, to 1 or more.
  """
  inputs = np.asarray(inputs, np.int32)
  rows, k, length = inputs.shape[0], beam_size, max_decode_len
  sizes = tuple(levels(rows) if sizes is None else sizes)
  if sizes[0] != rows or list(sizes) != sorted(set(sizes), reverse=True) or sizes[-1] < 1:
    raise ValueError(f'compacting_beam_decode: sizes={sizes}; expected distinct descending '
                     f'batch sizes from rows={rows} down to 1 or more')
  limits = np.clip(np.asarray(max_lengths, np.int32), 1, length)
  state, context = _start(model, params, inputs, k, length)
  origin = np.arange(rows)                      # the input row each batch row decodes
  out_seqs = np.zeros((rows, k, length), np.int32)
  out_scores = np.full((rows, k), search.NEG_INF, np.float32)
  ends = search.cache_lengths(length)
  step = 0
  while True:
    size = len(origin)
    smaller = max([n for n in sizes if n < size], default=0)
    end = min(e for e in ends if e > step)
    state, step, live = _segment(model, params, state, context, limits, np.int32(smaller),
                                 end=end, alpha=alpha, ancestry=k > 1, best_only=best_only,
                                 length_rule=length_rule)
    step, live = (int(x) for x in jax.device_get((step, live)))
    if live == 0 or step >= length:
      break
    if live <= smaller:  # gather the live sentences into the smallest size that holds them
      done = np.asarray(state.done)
      _record(state, alpha, length_rule, origin, done, out_seqs, out_scores)
      keep = np.argsort(done, kind='stable')[:min(n for n in sizes if n >= live)]
      state, context = _select(state, context, keep.astype(np.int32))
      origin, limits = origin[keep], limits[keep]
  _record(state, alpha, length_rule, origin, np.ones(len(origin), bool), out_seqs, out_scores)
  return out_seqs, out_scores


@module_jit.jit_on_module(static_argnums=(3, 4))
def _start(model: ModelLike, params, inputs: jax.Array, beam_size: int, length: int):
  """(the search's state before step 0, the decode context) of `inputs`: `beam_decode`'s."""
  context = incremental.decode_context(model, params, inputs)
  cache = incremental.init_cache(model, inputs.shape[0], 1, ancestry=beam_size > 1)
  return search._initial_state(cache, inputs.shape[0], beam_size, length,
                               as_model(model).cfg.decoder_start_id), context


@module_jit.jit_on_module(static_argnames=('end', 'alpha', 'ancestry', 'best_only',
                                          'length_rule'))
def _segment(model: ModelLike, params, state, context: incremental.DecodeContext,
             max_lengths: jax.Array, smaller: jax.Array, *, end: int, alpha: float,
             ancestry: bool, best_only: bool, length_rule: str):
  """`search._search`'s loop over one cache length `end`, also stopping once at most
  `smaller` sentences are live: (state, steps so far, live sentences)."""
  cache = incremental.grow_cache(state.cache, end, window=as_model(model).cfg.decoder_window)

  body = functools.partial(
      search._step, beam_decode.step_logits(model, params, context), max_lengths=max_lengths,
      alpha=alpha, eos_id=EOS_ID,
      reorder_cache=incremental.reorder_cache if ancestry else search._gather_beams,
      best_only=best_only, length_rule=length_rule)

  def going(s):
    live = jnp.sum(~s.done)
    return (s.step < end) & (live > 0) & (live > smaller)
  state = jax.lax.while_loop(going, body, state._replace(cache=cache))
  return state, state.step, jnp.sum(~state.done)


@jax.jit
def _select(state, context: incremental.DecodeContext, keep: jax.Array):
  """The state and context of batch rows `keep` `[n]` int32 (a sentence's K cache rows
  together, in order); what every sentence shares (the step, the vocabulary) stays."""
  k = state.live_tok.shape[1]
  rows = (keep[:, None] * k + jnp.arange(k)).reshape(-1)
  take = lambda x: x.at[keep].get(mode='promise_in_bounds')  # noqa: E731
  per_sentence = {f: take(getattr(state, f)) for f in state._fields if f not in ('step', 'cache')}
  state = state._replace(cache=search._gather_beams(state.cache, rows), **per_sentence)
  return state, context._replace(inputs=take(context.inputs),
                                 cross_kv=jax.tree_util.tree_map(take, context.cross_kv))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _results(state, alpha: float, length_rule: str) -> Tuple[jax.Array, jax.Array]:
  """`search._result`'s sequences `[n, K, L]` and scores `[n, K]` of the state's rows."""
  sequences, scores, _ = search._result(state, alpha, length_rule)
  return sequences, scores


def _record(state, alpha: float, length_rule: str, origin: np.ndarray, rows: np.ndarray,
            out_seqs: np.ndarray, out_scores: np.ndarray) -> None:
  """Writes the results of the batch rows where `rows` holds into their input rows."""
  sequences, scores = jax.device_get(_results(state, alpha, length_rule))
  out_seqs[origin[rows]] = sequences[rows]
  out_scores[origin[rows]] = scores[rows]
