"""Repetition control: no output repeats an n-gram of tokens (`no_repeat_ngram_size`;
fairseq's `--no-repeat-ngram-size`, OpenNMT's `-block_ngram_repeat`, CTranslate2's
`no_repeat_ngram_size`).

At step `i` a hypothesis `y_0 .. y_{i-1}` may not emit a token `t` when the n-gram
`y_{i-n+1} .. y_{i-1} t` already occurs in it: every earlier position `j` whose n - 1 tokens
`y_j .. y_{j+n-2}` equal the hypothesis's last n - 1 bans `y_{j+n-1}`. The model's log
probabilities are not renormalised (as in fairseq and CTranslate2): a banned token is only
taken out of the choice, so a hypothesis's score stays the model's log probability of it.
`allowed_logits` applies it, and a target prefix, to a step's logits (beam search, sampling).
"""

from typing import Optional

import jax
import jax.numpy as jnp


def banned_tokens(seqs: jax.Array, step: jax.Array, n: int, vocab_size: int) -> jax.Array:
  """`[..., V]` bool: the tokens each hypothesis may not emit next.

  Args:
    seqs: `[..., L]` int32, each hypothesis's tokens so far in positions `0 .. step - 1`
      (anything after them is ignored).
    step: `[]` int32, the number of tokens so far (the same for every hypothesis).
    n: the n-gram size (static); 0 bans nothing, 1 bans every token already emitted.
    vocab_size: V (static).
  """
  lead = seqs.shape[:-1]
  if n <= 0:
    return jnp.zeros((*lead, vocab_size), bool)
  length = seqs.shape[-1]
  start = jnp.arange(length)                                       # j: an n-gram's start
  # The hypothesis's last n - 1 tokens, y_{step-n+1} .. y_{step-1} (clipped at 0: unused then).
  last = jnp.take(seqs, jnp.clip(step - (n - 1) + jnp.arange(n - 1), 0, length - 1), axis=-1)
  match = jnp.broadcast_to(start + n - 1 < step, seqs.shape)       # its last token exists
  for m in range(n - 1):
    earlier = jnp.take(seqs, jnp.clip(start + m, 0, length - 1), axis=-1)   # [..., L]
    match = match & (earlier == last[..., m:m + 1])
  following = jnp.take(seqs, jnp.clip(start + n - 1, 0, length - 1), axis=-1)
  flat_match = match.reshape(-1, length)
  flat_next = following.reshape(-1, length)
  rows = jnp.broadcast_to(jnp.arange(flat_match.shape[0])[:, None], flat_match.shape)
  banned = jnp.zeros((flat_match.shape[0], vocab_size), bool).at[rows, flat_next].max(
      flat_match)
  return banned.reshape(*lead, vocab_size)


def allowed_logits(x: jax.Array, seqs: jax.Array, step: jax.Array, no_repeat_ngram_size: int,
                   prefix: Optional[jax.Array]) -> jax.Array:
  """`x` [B, K, V] with the tokens the constraints rule out at `step` set to -inf: a token
  that would repeat an n-gram (`ngram_blocking`), and, where `prefix` [B, P] int32 has a
  token (non-zero) at `step`, every other token. The prefix wins over n-gram blocking."""
  vocab = x.shape[-1]
  allowed = ~banned_tokens(seqs, step, no_repeat_ngram_size, vocab)
  if prefix is not None:
    forced = jnp.take(prefix, jnp.minimum(step, prefix.shape[1] - 1), axis=1)   # [B]
    forced = jnp.where(step < prefix.shape[1], forced, 0)[:, None, None]
    allowed = jnp.where(forced > 0, jnp.arange(vocab) == forced, allowed)
  return jnp.where(allowed, x, -jnp.inf)
