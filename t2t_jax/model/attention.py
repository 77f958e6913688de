"""Scaled dot-product and multi-head attention as pure functions (§3.2).

Shapes follow one convention throughout: queries `[batch, q_length, heads, d_k]`, keys
`[batch, kv_length, kv_heads, d_k]`, values `[batch, kv_length, kv_heads, d_v]`, masks boolean
and broadcastable to `[batch, heads, q_length, kv_length]` with True meaning "may attend".

kv_heads is heads in the paper. Fewer (a divisor of heads) is grouped-query attention
(multi-query at 1): query heads g * r .. (g + 1) * r - 1, r = heads // kv_heads, share key and
value head g, as `jax.nn.dot_product_attention` groups them. Every form below accepts both;
grouped, it runs as the ungrouped computation over kv_heads heads with each head's r query
heads folded into the query axis (`_fold_groups`), so each key/value head is read once per
query position, not r times (decoding's cache read shrinks by r).
"""

import functools
import inspect
from typing import Callable, Optional, Protocol, Tuple, Union

import jax
import jax.numpy as jnp

from t2t_jax.model.array_checks import check_array, check_int

Array = jax.Array

# A large finite negative number rather than -inf: a row whose keys are all masked (a batch row
# that is pure padding) then gets uniform weights instead of NaN, and exp() of it is exactly 0
# next to any unmasked logit.
_MASK_VALUE = float(jnp.finfo(jnp.float32).min)


def padding_mask(kv_tokens: Array, pad_id: int = 0) -> Array:
  """Mask of real (non-padding) keys: `[batch, kv_length]` ids -> `[batch, 1, 1, kv_length]` bool."""
  check_array('padding_mask', 'kv_tokens', kv_tokens, kind='int', rank=2,
              layout='[batch, kv_length]')
  return (kv_tokens != pad_id)[:, None, None, :]


def causal_mask(length: int) -> Array:
  """Position i may attend to positions <= i (§3.2.3): `[1, 1, length, length]` bool."""
  length = check_int('causal_mask', 'length', length, minimum=0)
  return jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))[None, None]


def sliding_window_mask(length: int, window: int) -> Array:
  """Position i may attend to positions i - window + 1 .. i, the last `window` (itself
  included): `[1, 1, length, length]` bool, the decoder's causal mask of a model with
  `decoder_window` (combine with `causal_mask`)."""
  distance = jnp.arange(length)[:, None] - jnp.arange(length)[None, :]
  return (distance < window)[None, None]


def segment_mask(q_segments: Array, kv_segments: Array) -> Array:
  """Packed rows: a query sees only the keys of its own pair.

  `[batch, q_length]` and `[batch, kv_length]` int segment ids (1, 2, ... per pair of a row,
  0 on padding) -> `[batch, 1, q_length, kv_length]` bool, True where the ids are equal.
  Padding queries (id 0) see only padding keys; combine with `padding_mask` (and, for the
  decoder's self-attention, `causal_mask`).
  """
  check_array('segment_mask', 'q_segments', q_segments, kind='int', rank=2,
              layout='[batch, q_length]')
  check_array('segment_mask', 'kv_segments', kv_segments, kind='int', rank=2,
              layout='[batch, kv_length]')
  return (q_segments[:, :, None] == kv_segments[:, None, :])[:, None]


def combine_masks(*masks: Optional[Array]) -> Optional[Array]:
  """Logical AND of the given masks (None entries ignored); None if all are None."""
  present = [m for m in masks if m is not None]
  for m in present:
    check_array('combine_masks', 'masks', m, kind='mask')
  if not present:
    return None
  combined = present[0]
  for m in present[1:]:
    combined = jnp.logical_and(combined, m)
  return combined


def split_heads(x: Array, num_heads: int) -> Array:
  """`[batch, length, heads * d]` -> `[batch, length, heads, d]` (§3.2.2)."""
  batch, length, width = check_array('split_heads', 'x', x, rank=3,
                                     layout='[batch, length, heads * d]')
  if width % check_int('split_heads', 'num_heads', num_heads, minimum=1):
    raise ValueError(f'split_heads: width {width} is not divisible by num_heads={num_heads}')
  return x.reshape(batch, length, num_heads, width // num_heads)


def merge_heads(x: Array) -> Array:
  """`[batch, length, heads, d]` -> `[batch, length, heads * d]`, the Concat of §3.2.2."""
  batch, length, heads, d = check_array('merge_heads', 'x', x, rank=4,
                                        layout='[batch, length, heads, d]')
  return x.reshape(batch, length, heads * d)


def _fold_queries(query: Array, kv_heads: int) -> Array:
  """`[batch, q, heads, d]` -> `[batch, q * r, kv_heads, d]`, r = heads // kv_heads: each kv
  head's r query heads folded into the query axis (row q * r + j: query q of head g * r + j)."""
  b, q, heads, d = query.shape
  r = heads // kv_heads
  return query.reshape(b, q, kv_heads, r, d).transpose(0, 1, 3, 2, 4).reshape(
      b, q * r, kv_heads, d)


def _fold_logit_term(x: Optional[Array], heads: int, kv_heads: int) -> Optional[Array]:
  """A mask or bias `[batch or 1, heads or 1, q or 1, kv]` -> the folded queries' `[batch or
  1, kv_heads or 1, q * r or 1, kv]`."""
  if x is None:
    return None
  x = jnp.asarray(x)
  b, h, q, kv = x.shape
  r = heads // kv_heads
  if h == 1:
    return x if q == 1 else jnp.repeat(x, r, axis=2)  # rows q * r .. q * r + r - 1: row q
  x = jnp.broadcast_to(x, (b, heads, q, kv)).reshape(b, kv_heads, r, q, kv)
  return x.transpose(0, 1, 3, 2, 4).reshape(b, kv_heads, q * r, kv)


def _unfold_out(out: Array, heads: int) -> Array:
  """`_fold_queries` undone on an output: `[batch, q * r, kv_heads, d_v]` -> `[batch, q,
  heads, d_v]`."""
  b, qr, kv_heads, d = out.shape
  r = heads // kv_heads
  return out.reshape(b, qr // r, r, kv_heads, d).transpose(0, 1, 3, 2, 4).reshape(
      b, qr // r, heads, d)


def _unfold_weights(weights: Array, heads: int) -> Array:
  """`[batch, kv_heads, q * r, kv]` -> `[batch, heads, q, kv]`."""
  b, kv_heads, qr, kv = weights.shape
  r = heads // kv_heads
  return weights.reshape(b, kv_heads, qr // r, r, kv).transpose(0, 1, 3, 2, 4).reshape(
      b, heads, qr // r, kv)


def check_qkv(where: str, query: Array, key: Array, value: Optional[Array] = None) -> None:
  """Refuses a query, key or value that is not a 4-D float array (static: shapes and dtypes
  only, at trace time under `jit`)."""
  for name, x in (('query', query), ('key', key), ('value', value)):
    if x is not None:
      check_array(where, name, x, kind='float', rank=4, layout='[batch, length, heads, d]')


def accepts_grouped_heads(key_heads_axis: int, result: str = 'output'
                          ) -> Callable[[Callable], Callable]:
  """Makes a form of Eq. 1 written for kv_heads == heads take grouped heads too: it then runs
  on the folded queries (`_fold_queries`), mask and bias, and its result is unfolded.

  `key_heads_axis`: where the key's heads are (2 for `[batch, kv, heads, d]`, 1 heads-first).
  `result`: what the form returns, 'output' `[batch, q, heads, d_v]` (or a tuple (output,
  weights)) or 'weights' `[batch, heads, q, kv]`. kv_heads == heads calls the form as it is.
  """
  def wrap(form: Callable) -> Callable:
    signature = inspect.signature(form)

    @functools.wraps(form)
    def grouped(query, key, *args, **kwargs):
      check_qkv(form.__name__, query, key)
      heads, kv_heads = query.shape[2], key.shape[key_heads_axis]
      if kv_heads == heads:
        return form(query, key, *args, **kwargs)
      if heads % kv_heads:
        raise ValueError(f'{form.__name__}: {heads} query heads cannot share {kv_heads} '
                         'key/value heads (kv_heads must divide heads)')
      bound = signature.bind(_fold_queries(query, kv_heads), key, *args, **kwargs)
      for name in ('mask', 'bias'):
        if name in bound.arguments:
          bound.arguments[name] = _fold_logit_term(bound.arguments[name], heads, kv_heads)
      out = form(*bound.args, **bound.kwargs)
      if result == 'weights':
        return _unfold_weights(out, heads)
      if isinstance(out, tuple):
        return _unfold_out(out[0], heads), _unfold_weights(out[1], heads)
      return _unfold_out(out, heads)
    return grouped
  return wrap


# Below this many queries per key/value row, the call is one decoding step (one query per
# row over the self-attention cache; a sentence's few beams over its encoder output), and the
# heads-first forms below serve it. Training and evaluation never get here: their shortest
# padded length is 8 (`configs/default.py` bucket_lengths), and packed rows are longer.
FEW_QUERIES = 8


class AttentionFn(Protocol):
  """Eq. 1 as every path calls it: training, evaluation, attention capture, the cached
  self-attention step and the encoder-decoder step of decoding, the exported decoder.

  A model's `attention_fn` (`Transformer(cfg, attention_fn=...)`) replaces it on all of them;
  `dot_product_attention` is the paper's. A replacement takes the arguments below, ignores the
  keywords it does not use, and usually ends by calling `dot_product_attention` with a
  changed query/key, `bias` or `scale` (and `**kwargs` passed on), which keeps the fast paths
  and `return_weights`. It is called inside its layer's `MultiHeadAttention` (a pure function
  that builds a linen module there gets that module's parameters under the layer's
  `.../self_attention/` or `.../cross_attention/`, one set per layer); parameters shared by
  all layers belong in the model's `shared` part (`parts.py`), whose output arrives here.

  Args:
    query: `[batch, q_length, heads, d_k]`, after the model's `qk_transform` if it has one.
    key: `[batch, kv_length, kv_heads, d_k]` (kv_heads = heads in the paper; a divisor of it
      for grouped-query attention, see the module docstring), likewise transformed once,
      before it is cached.
    value: `[batch, kv_length, kv_heads, d_v]`.
    mask: bool, broadcastable to `[batch, heads, q_length, kv_length]`, True = may attend;
      None: every key.
    query_positions: `[batch or 1, q_length]` int32, each query's position in its sequence
      (0-based; within its pair for packed rows; the step in incremental decoding).
    key_positions: `[batch or 1, kv_length]` int32, likewise for the keys (a decoding cache's
      unfilled slots have positions too; the mask excludes them).
    kind: 'encoder' or 'decoder' (self-attention) or 'encoder_decoder' (§3.2.3).
    dropout_rate: attention dropout (0 in the paper; > 0 only in training).
    dropout_rng: PRNG key, given when dropout_rate > 0.
    return_weights: also return the weights applied (attention capture).
    implementation: `jax.nn.dot_product_attention`'s, when the config names one.
    shared: passed only when the model has a `shared` part: what it returned for this call's
      (query_positions, key_positions, kind), e.g. a relative-position bias `[batch or 1,
      heads, q_length, kv_length]` computed from one table for every layer.

  Returns:
    `[batch, q_length, heads, d_v]` in the dtype of `value`; with `return_weights`, also the
    `[batch, heads, q_length, kv_length]` float32 weights (before dropout).
  """

  def __call__(self, query: Array, key: Array, value: Array, mask: Optional[Array] = None, *,
               query_positions: Optional[Array] = None, key_positions: Optional[Array] = None,
               kind: Optional[str] = None, dropout_rate: float = 0.0,
               dropout_rng: Optional[Array] = None, return_weights: bool = False,
               implementation: Optional[str] = None) -> Union[Array, Tuple[Array, Array]]:
    ...


def _logits(query: Array, key: Array, mask: Optional[Array], bias: Optional[Array],
            scale: Optional[float], keys: str = 'bkhd') -> Array:
  """Q K^T * scale (+ bias), masked: `[batch, heads, q_length, kv_length]` float32. `keys`:
  the key layout, 'bkhd' or heads-first 'bhkd'. scale None: 1/sqrt(d_k), Eq. 1's."""
  logits = jnp.einsum(f'bqhd,{keys}->bhqk', query, key, preferred_element_type=jnp.float32)
  return _scale_bias_mask(logits, query.shape[-1], mask, bias, scale)


def _scale_bias_mask(dots: Array, d_k: int, mask: Optional[Array], bias: Optional[Array],
                     scale: Optional[float]) -> Array:
  """`[batch, heads, q_length, kv_length]` float32 Q.K products -> Eq. 1's masked logits."""
  if scale is None:
    logits = dots / jnp.sqrt(jnp.float32(d_k))
  else:
    logits = dots * jnp.float32(scale)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, _MASK_VALUE)
  return logits


@accepts_grouped_heads(2, result='weights')
def attention_weights(query: Array, key: Array, mask: Optional[Array] = None, *,
                      bias: Optional[Array] = None, scale: Optional[float] = None) -> Array:
  """softmax(Q K^T / sqrt(d_k) + bias) with masking, in float32 (Eq. 1).

  Args:
    query: `[batch, q_length, heads, d_k]`.
    key: `[batch, kv_length, heads, d_k]`.
    mask: bool, broadcastable to `[batch, heads, q_length, kv_length]`; False entries get
      exactly zero weight.
    bias: float, broadcastable to `[batch, heads, q_length, kv_length]`, added to the logits.
    scale: the logits' factor instead of 1/sqrt(d_k).

  Returns:
    `[batch, heads, q_length, kv_length]` float32 weights; each row sums to 1.
  """
  return jax.nn.softmax(_logits(query, key, mask, bias, scale), axis=-1)


@accepts_grouped_heads(1)
def heads_first_attention(query: Array, key: Array, value: Array, mask: Optional[Array], *,
                          bias: Optional[Array] = None, scale: Optional[float] = None) -> Array:
  """Eq. 1 over keys/values stored heads-first, the layout decoding keeps them in.

  Decoding reads the same keys/values at every step (the self-attention cache, the
  encoder-decoder keys/values of a sentence); stored `[batch, heads, length, d]`, the two
  matmuls read them as they are, where the `[batch, length, heads, d]` layout costs a
  transposed copy of all of them at every step. (`dot_product_attention` gets them in that
  layout and transposes them back; XLA cancels the two transposes.)

  Args:
    query: `[batch, q_length, heads, d_k]`.
    key: `[batch, heads, kv_length, d_k]`.
    value: `[batch, heads, kv_length, d_v]`.
    mask, bias, scale: as `attention_weights`.

  Returns:
    `[batch, q_length, heads, d_v]` in the dtype of `value`.
  """
  weights = jax.nn.softmax(_logits(query, key, mask, bias, scale, 'bhkd'), axis=-1)
  out = jnp.einsum('bhqk,bhkd->bqhd', weights.astype(value.dtype), value,
                   preferred_element_type=jnp.float32)
  return out.astype(value.dtype)


@accepts_grouped_heads(1)
def few_query_attention(query: Array, key: Array, value: Array, mask: Optional[Array], *,
                        bias: Optional[Array] = None, scale: Optional[float] = None) -> Array:
  """`heads_first_attention` for a few queries per key/value row (decoding's beams over
  their sentence's encoder output), as broadcast products and sums instead of matmuls.

  At a handful of query rows per (row, head), the two matmuls are hundreds of tiny ones;
  XLA's CPU backend fuses the products and sums into loops that run the whole beam-4
  decode of the bundled test set 1.07x faster (the same translations). The self-attention
  cache (one query over up to hundreds of positions) is the opposite case: there this form
  ran 5x slower than the matmuls, so `dot_product_attention` takes it only for 2 or more
  queries.

  Arguments and result as `heads_first_attention`.
  """
  q = query.transpose(0, 2, 1, 3)                                      # [b, h, q, d_k]
  dots = jnp.sum(q[:, :, :, None, :].astype(jnp.float32) * key[:, :, None, :, :], axis=-1)
  weights = jax.nn.softmax(_scale_bias_mask(dots, query.shape[-1], mask, bias, scale), axis=-1)
  out = jnp.sum(weights[..., None] * value[:, :, None, :, :].astype(jnp.float32), axis=-2)
  return out.transpose(0, 2, 1, 3).astype(value.dtype)                 # [b, q, h, d_v]


@accepts_grouped_heads(2)
def dot_product_attention_reference(query: Array, key: Array, value: Array,
                                    mask: Optional[Array] = None, *,
                                    bias: Optional[Array] = None, scale: Optional[float] = None,
                                    dropout_rate: float = 0.0,
                                    dropout_rng: Optional[Array] = None,
                                    return_weights: bool = False
                                    ) -> Union[Array, Tuple[Array, Array]]:
  """Plain einsum form of Eq. 1, the reference every faster form is tested against.

  Also the path for attention dropout, for d_v != d_k (Table 3 row B), which the fused
  kernel does not take, and for capturing the weights.

  Args:
    query: `[batch, q_length, heads, d_k]`.
    key: `[batch, kv_length, heads, d_k]`.
    value: `[batch, kv_length, heads, d_v]`.
    mask, bias, scale: as `attention_weights`.
    dropout_rate: dropout on the attention weights (0 in the paper).
    dropout_rng: PRNG key, required when dropout_rate > 0.
    return_weights: also return the weights (before dropout).

  Returns:
    `[batch, q_length, heads, d_v]` in the dtype of `value`; with `return_weights`, also the
    `[batch, heads, q_length, kv_length]` float32 weights: masked keys get exactly 0, each row
    sums to 1.
  """
  check_qkv('dot_product_attention_reference', query, key, value)
  weights = attention_weights(query, key, mask, bias=bias, scale=scale)
  applied = weights
  if dropout_rate > 0.0:
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, weights.shape)
    applied = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0)
  out = jnp.einsum('bhqk,bkhd->bqhd', applied.astype(value.dtype), value,
                   preferred_element_type=jnp.float32).astype(value.dtype)
  return (out, weights) if return_weights else out


def dot_product_attention(query: Array, key: Array, value: Array,
                          mask: Optional[Array] = None, *,
                          query_positions: Optional[Array] = None,
                          key_positions: Optional[Array] = None, kind: Optional[str] = None,
                          bias: Optional[Array] = None, scale: Optional[float] = None,
                          dropout_rate: float = 0.0, dropout_rng: Optional[Array] = None,
                          return_weights: bool = False,
                          implementation: Optional[str] = None
                          ) -> Union[Array, Tuple[Array, Array]]:
  """Scaled dot-product attention (Eq. 1), the paper's `AttentionFn`: the one function every
  path of the model calls, which picks the fastest form of the same computation by shape.

    * `dot_product_attention_reference` (einsum): with attention dropout, d_v != d_k or
      `return_weights`;
    * fewer than `FEW_QUERIES` queries per row (a decoding step): `heads_first_attention` for
      one query, `few_query_attention` for several;
    * otherwise `jax.nn.dot_product_attention` (XLA's fused attention, cuDNN's with
      `implementation='cudnn'`).

  Each is tested equal to the einsum form (tests/model/test_attention.py). Arguments and
  result as `AttentionFn`, plus `bias` (`[batch or 1, heads or 1, q_length, kv_length]`
  float, added to the logits) and `scale` (instead of 1/sqrt(d_k)), for variants built on
  it; `query_positions`, `key_positions` and `kind` do not enter Eq. 1.
  """
  del query_positions, key_positions, kind
  check_qkv('dot_product_attention', query, key, value)
  if return_weights or dropout_rate > 0.0 or value.shape[-1] != key.shape[-1]:
    return dot_product_attention_reference(query, key, value, mask, bias=bias, scale=scale,
                                           dropout_rate=dropout_rate, dropout_rng=dropout_rng,
                                           return_weights=return_weights)
  if query.shape[1] < FEW_QUERIES:
    heads_first = heads_first_attention if query.shape[1] == 1 else few_query_attention
    return heads_first(query, key.transpose(0, 2, 1, 3), value.transpose(0, 2, 1, 3), mask,
                       bias=bias, scale=scale)
  if mask is not None:
    mask = jnp.broadcast_to(mask, (query.shape[0], 1, query.shape[1], key.shape[1]))
  return jax.nn.dot_product_attention(query, key, value, bias=bias, mask=mask, scale=scale,
                                      implementation=implementation)
