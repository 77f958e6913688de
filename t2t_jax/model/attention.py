"""Scaled dot-product and multi-head attention as pure functions (§3.2).

Shapes follow one convention throughout: queries `[batch, q_length, heads, d_k]`, keys
`[batch, kv_length, heads, d_k]`, values `[batch, kv_length, heads, d_v]`, masks boolean and
broadcastable to `[batch, heads, q_length, kv_length]` with True meaning "may attend".
"""

from typing import Optional, Tuple

import jax
import jax.numpy as jnp

Array = jax.Array

# A large finite negative number rather than -inf: a row whose keys are all masked (a batch row
# that is pure padding) then gets uniform weights instead of NaN, and exp() of it is exactly 0
# next to any unmasked logit.
_MASK_VALUE = float(jnp.finfo(jnp.float32).min)


def padding_mask(kv_tokens: Array, pad_id: int = 0) -> Array:
  """Mask of real (non-padding) keys: `[batch, kv_length]` ids -> `[batch, 1, 1, kv_length]` bool."""
  return (kv_tokens != pad_id)[:, None, None, :]


def causal_mask(length: int) -> Array:
  """Position i may attend to positions <= i (§3.2.3): `[1, 1, length, length]` bool."""
  return jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))[None, None]


def segment_mask(q_segments: Array, kv_segments: Array) -> Array:
  """Packed rows: a query sees only the keys of its own pair.

  `[batch, q_length]` and `[batch, kv_length]` int segment ids (1, 2, ... per pair of a row,
  0 on padding) -> `[batch, 1, q_length, kv_length]` bool, True where the ids are equal.
  Padding queries (id 0) see only padding keys; combine with `padding_mask` (and, for the
  decoder's self-attention, `causal_mask`).
  """
  return (q_segments[:, :, None] == kv_segments[:, None, :])[:, None]


def combine_masks(*masks: Optional[Array]) -> Optional[Array]:
  """Logical AND of the given masks (None entries ignored); None if all are None."""
  present = [m for m in masks if m is not None]
  if not present:
    return None
  combined = present[0]
  for m in present[1:]:
    combined = jnp.logical_and(combined, m)
  return combined


def split_heads(x: Array, num_heads: int) -> Array:
  """`[batch, length, heads * d]` -> `[batch, length, heads, d]` (§3.2.2)."""
  batch, length, width = x.shape
  if width % num_heads:
    raise ValueError(f'width {width} is not divisible by num_heads={num_heads}')
  return x.reshape(batch, length, num_heads, width // num_heads)


def merge_heads(x: Array) -> Array:
  """`[batch, length, heads, d]` -> `[batch, length, heads * d]`, the Concat of §3.2.2."""
  batch, length, heads, d = x.shape
  return x.reshape(batch, length, heads * d)


def attention_weights(query: Array, key: Array, mask: Optional[Array] = None) -> Array:
  """softmax(Q K^T / sqrt(d_k)) with masking, in float32 (Eq. 1).

  Args:
    query: `[batch, q_length, heads, d_k]`.
    key: `[batch, kv_length, heads, d_k]`.
    mask: bool, broadcastable to `[batch, heads, q_length, kv_length]`; False entries get
      exactly zero weight.

  Returns:
    `[batch, heads, q_length, kv_length]` float32 weights; each row sums to 1.
  """
  d_k = query.shape[-1]
  logits = jnp.einsum('bqhd,bkhd->bhqk', query, key,
                      preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(d_k))
  if mask is not None:
    logits = jnp.where(mask, logits, _MASK_VALUE)
  return jax.nn.softmax(logits, axis=-1)


def heads_first_attention(query: Array, key: Array, value: Array, mask: Array) -> Array:
  """Eq. 1 over keys/values stored heads-first, the layout decoding keeps them in.

  Decoding reads the same keys/values at every step (the self-attention cache, the
  encoder-decoder keys/values of a sentence); stored `[batch, heads, length, d]`, the two
  matmuls read them as they are, where the `[batch, length, heads, d]` layout costs a
  transposed copy of all of them at every step.

  Args:
    query: `[batch, q_length, heads, d_k]`.
    key: `[batch, heads, kv_length, d_k]`.
    value: `[batch, heads, kv_length, d_v]`.
    mask: bool, broadcastable to `[batch, heads, q_length, kv_length]`; False entries get
      exactly zero weight.

  Returns:
    `[batch, q_length, heads, d_v]` in the dtype of `value`.
  """
  d_k = query.shape[-1]
  logits = jnp.einsum('bqhd,bhkd->bhqk', query, key,
                      preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(d_k))
  weights = jax.nn.softmax(jnp.where(mask, logits, _MASK_VALUE), axis=-1)
  out = jnp.einsum('bhqk,bhkd->bqhd', weights.astype(value.dtype), value,
                   preferred_element_type=jnp.float32)
  return out.astype(value.dtype)


def few_query_attention(query: Array, key: Array, value: Array, mask: Array) -> Array:
  """`heads_first_attention` for a few queries per key/value row (decoding's beams over
  their sentence's encoder output), as broadcast products and sums instead of matmuls.

  At a handful of query rows per (row, head), the two matmuls are hundreds of tiny ones;
  XLA's CPU backend fuses the products and sums into loops that run the whole beam-4
  decode of the bundled test set 1.07x faster (the same translations). The self-attention
  cache (one query over up to hundreds of positions) is the opposite case: there this form
  ran 5x slower than the matmuls, so `cached_attention` keeps them.

  Arguments and result as `heads_first_attention`.
  """
  q = query.transpose(0, 2, 1, 3)                                      # [b, h, q, d_k]
  logits = jnp.sum(q[:, :, :, None, :].astype(jnp.float32) * key[:, :, None, :, :], axis=-1)
  logits = logits / jnp.sqrt(jnp.float32(query.shape[-1]))             # [b, h, q, kv]
  weights = jax.nn.softmax(jnp.where(mask, logits, _MASK_VALUE), axis=-1)
  out = jnp.sum(weights[..., None] * value[:, :, None, :, :].astype(jnp.float32), axis=-2)
  return out.transpose(0, 2, 1, 3).astype(value.dtype)                 # [b, q, h, d_v]


def cached_attention(query: Array, key_cache: Array, value_cache: Array,
                     length: Array) -> Array:
  """One decoding step of masked self-attention (Eq. 1, §3.2.3) over a key/value cache.

  The cache is heads-first (`heads_first_attention`), so that writing a step into it is an
  in-place slice update.

  Args:
    query: `[batch, 1, heads, d_k]`, the query of the newest position.
    key_cache: `[batch, heads, max_length, d_k]`.
    value_cache: `[batch, heads, max_length, d_v]`.
    length: `[]` int32; positions `0..length-1` are filled and attended to, the rest are not.

  Returns:
    `[batch, 1, heads, d_v]` in the dtype of `value_cache`.
  """
  filled = jnp.arange(key_cache.shape[2]) < length
  return heads_first_attention(query, key_cache, value_cache, filled)


def dot_product_attention_reference(query: Array, key: Array, value: Array,
                                    mask: Optional[Array] = None, *,
                                    dropout_rate: float = 0.0,
                                    dropout_rng: Optional[Array] = None) -> Array:
  """Plain einsum form of Eq. 1, the reference the fast path is tested against.

  Also the path for attention dropout and for d_v != d_k (Table 3 row B), which the fused
  kernel does not take.

  Args:
    query: `[batch, q_length, heads, d_k]`.
    key: `[batch, kv_length, heads, d_k]`.
    value: `[batch, kv_length, heads, d_v]`.
    mask: bool, broadcastable to `[batch, heads, q_length, kv_length]`.
    dropout_rate: dropout on the attention weights (0 in the paper).
    dropout_rng: PRNG key, required when dropout_rate > 0.

  Returns:
    `[batch, q_length, heads, d_v]` in the dtype of `value`.
  """
  return dot_product_attention_with_weights(query, key, value, mask, dropout_rate=dropout_rate,
                                            dropout_rng=dropout_rng)[0]


def dot_product_attention_with_weights(query: Array, key: Array, value: Array,
                                       mask: Optional[Array] = None, *,
                                       dropout_rate: float = 0.0,
                                       dropout_rng: Optional[Array] = None
                                       ) -> Tuple[Array, Array]:
  """`dot_product_attention_reference` that also returns the attention weights it applied.

  Shapes and arguments as there. Returns (`[batch, q_length, heads, d_v]` output in the dtype
  of `value`, `[batch, heads, q_length, kv_length]` float32 weights softmax(Q K^T / sqrt(d_k))
  before attention dropout: masked keys get exactly 0, each row sums to 1).
  """
  weights = attention_weights(query, key, mask)
  applied = weights
  if dropout_rate > 0.0:
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, weights.shape)
    applied = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0)
  out = jnp.einsum('bhqk,bkhd->bqhd', applied.astype(value.dtype), value,
                   preferred_element_type=jnp.float32)
  return out.astype(value.dtype), weights


def dot_product_attention(query: Array, key: Array, value: Array,
                          mask: Optional[Array] = None, *,
                          dropout_rate: float = 0.0,
                          dropout_rng: Optional[Array] = None,
                          implementation: Optional[str] = None) -> Array:
  """Scaled dot-product attention (Eq. 1), through `jax.nn.dot_product_attention` when it fits.

  The fused path (XLA, or cuDNN on GPUs when `implementation='cudnn'`) is taken when there is
  no attention dropout and d_v == d_k; otherwise the einsum reference computes the same thing.

  Shapes as in `dot_product_attention_reference`; returns `[batch, q_length, heads, d_v]`.
  """
  if dropout_rate > 0.0 or value.shape[-1] != key.shape[-1]:
    return dot_product_attention_reference(query, key, value, mask,
                                           dropout_rate=dropout_rate, dropout_rng=dropout_rng)
  if mask is not None:
    mask = jnp.broadcast_to(mask, (query.shape[0], 1, query.shape[1], key.shape[1]))
  return jax.nn.dot_product_attention(query, key, value, mask=mask,
                                      implementation=implementation)
