"""Sampling instead of search (`decode_strategy='sample'`; fairseq's `--sampling-topk/topp`,
CTranslate2's `sampling_topk/topp/temperature`): back-translation of monolingual data, diverse
outputs.

Each step draws the next token of every unfinished row from

    softmax(allowed logits / temperature)

restricted to the `top_k` most probable tokens (0: all) and then to the smallest set of them
whose probability reaches `top_p` (1: all; the token that crosses it is kept), in that order
(fairseq's and Hugging Face's). The allowed logits are the model's with the constraints of the
beam search applied (`search.allowed_logits`: n-gram blocking, a target prefix), and only EOS at
a row's last position. The reported log probability of a sample is the model's own (untempered,
untruncated, as `raw_log_probs` gives for the beam), so it compares with a beam's and with
`--mode=score`.

Reproducible whatever the batching: row r draws with `fold_in(row_keys[r], step)`, so a
sentence sampled with the same key gives the same output in any batch, on any device count.
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from t2t_jax.model import search
from t2t_jax.model.top_k import top_k as exact_top_k
from t2t_jax.model.beam_cache import Cache, GrowCache, cache_lengths


class _State(NamedTuple):
  step: jax.Array      # [] int32
  token: jax.Array     # [B] int32: last token
  seqs: jax.Array      # [B, L] int32
  log_prob: jax.Array  # [B] float32: the model's log prob of the tokens so far
  done: jax.Array      # [B] bool
  cache: Cache


def truncated_logits(logits: jax.Array, temperature: float, top_k: int, top_p: float
                     ) -> jax.Array:
  """`[B, V]` logits -> `[B, V]`: divided by `temperature`, every token outside the `top_k`
  best (0: none cut) and then outside the `top_p` nucleus (1.0: none cut) set to -inf; a
  categorical draw from them is the module docstring's distribution."""
  z = logits.astype(jnp.float32) / temperature
  vocab = z.shape[-1]
  if 0 < top_k < vocab:
    kth = exact_top_k(z, top_k)[0][:, -1:]
    z = jnp.where(z >= kth, z, -jnp.inf)
  if top_p < 1.0:
    ordered = jnp.sort(z, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(ordered, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs   # mass of the better tokens
    keep = before < top_p                          # the crossing token is kept
    threshold = jnp.min(jnp.where(keep, ordered, jnp.inf), axis=-1, keepdims=True)
    z = jnp.where(z >= threshold, z, -jnp.inf)
  return z


def sample(logits_fn: search.LogitsFn, cache: Cache, *, row_keys: jax.Array,
           max_decode_len: int, max_lengths: Optional[jax.Array] = None,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, eos_id: int = 1,
           bos_id: int = 1, grow_cache: Optional[GrowCache] = None,
           no_repeat_ngram_size: int = 0, prefix: Optional[jax.Array] = None
           ) -> tuple[jax.Array, jax.Array]:
  """One sample per row.

  Args:
    logits_fn, cache, max_decode_len, max_lengths, eos_id, bos_id, grow_cache,
      no_repeat_ngram_size, prefix: as `search.beam_search` with a beam of 1 (the cache's
      leaves are `[B, ...]`).
    row_keys: `[B, 2]` uint32 PRNG keys (`jax.random.PRNGKey`), one per row.
    temperature (> 0), top_k (>= 0), top_p (in (0, 1]): module docstring; static.

  Returns:
    sequences `[B, L]` int32 (EOS-terminated, then 0s) and the model's log probability of each
    `[B]` float32, EOS included.
  """
  b, length = row_keys.shape[0], max_decode_len
  max_lengths = jnp.clip(jnp.full((b,), length, jnp.int32) if max_lengths is None
                         else jnp.asarray(max_lengths, jnp.int32), 1, length)

  def body(s: _State) -> _State:
    logits, cache = logits_fn(s.token[:, None], s.cache)
    x = logits.astype(jnp.float32).reshape(b, -1)
    model_lp = jnp.maximum(jax.nn.log_softmax(x, axis=-1), search.MIN_LOG_PROB)
    if no_repeat_ngram_size or prefix is not None:
      x = search.allowed_logits(x[:, None], s.seqs[:, None], s.step, no_repeat_ngram_size,
                                prefix)[:, 0]
    last = (s.step >= max_lengths - 1)[:, None]
    x = jnp.where(last, jnp.where(jnp.arange(x.shape[-1]) == eos_id, x, -jnp.inf), x)
    z = truncated_logits(x, temperature, top_k, top_p)
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, s.step)
    token = jax.vmap(jax.random.categorical)(keys, z).astype(jnp.int32)
    token = jnp.where(s.done, 0, token)
    gained = jnp.take_along_axis(model_lp, token[:, None], axis=1)[:, 0]
    log_prob = s.log_prob + jnp.where(s.done, 0.0, gained)
    seqs = s.seqs.at[:, s.step].set(token)
    done = s.done | (token == eos_id) | (s.step + 1 >= max_lengths)
    return _State(s.step + 1, token, seqs, log_prob, done, cache)

  s = _State(jnp.array(0, jnp.int32), jnp.full((b,), bos_id, jnp.int32),
             jnp.zeros((b, length), jnp.int32), jnp.zeros((b,), jnp.float32),
             jnp.zeros((b,), bool), cache)
  for end in (length,) if grow_cache is None else cache_lengths(length):
    if grow_cache is not None:
      s = s._replace(cache=grow_cache(s.cache, end))
    s = jax.lax.while_loop(lambda s, end=end: (s.step < end) & ~jnp.all(s.done), body, s)
  return s.seqs, s.log_prob
