"""Linen building blocks of the Transformer (§3.2-§3.5): thin shells over `attention`.

Activations use the module's `dtype` (float32 or bfloat16); parameters are always float32.
"""

from typing import Any, Callable, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.model import attention

Array = jax.Array
Dtype = Any


def sinusoidal_positions(length: int, d_model: int) -> np.ndarray:
  """The fixed encoding of §3.5: `[length, d_model]` float32.

  PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)),
  interleaved exactly as the paper writes it (tensor2tensor concatenates instead), pos from 0.
  Computed in float64 with numpy, so it is a compile-time constant.
  """
  position = np.arange(length, dtype=np.float64)[:, None]
  two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
  angle = position / np.power(10000.0, two_i / d_model)
  table = np.zeros((length, d_model), dtype=np.float64)
  table[:, 0::2] = np.sin(angle)
  table[:, 1::2] = np.cos(angle[:, : d_model // 2])
  return table.astype(np.float32)


class SharedEmbedding(nn.Module):
  """One matrix for source embedding, target embedding and pre-softmax projection (§3.4).

  Attributes:
    vocab_size: shared vocabulary size.
    d_model: model width.
    dtype: activation dtype.
  """
  vocab_size: int
  d_model: int
  dtype: Dtype = jnp.float32

  def setup(self):
    # Normal(0, d_model^-0.5): after the sqrt(d_model) scale the embeddings have unit variance,
    # comparable to the sinusoids they are added to (tensor2tensor's choice).
    self.embedding = self.param('embedding', nn.initializers.normal(stddev=self.d_model ** -0.5),
                                (self.vocab_size, self.d_model), jnp.float32)

  def __call__(self, ids: Array) -> Array:
    """`[batch, length]` int32 -> `[batch, length, d_model]`, multiplied by sqrt(d_model)."""
    table = jnp.asarray(self.embedding, self.dtype)
    return jnp.take(table, ids, axis=0) * jnp.asarray(np.sqrt(self.d_model), self.dtype)

  def attend(self, x: Array, transposed: Optional[Array] = None) -> Array:
    """Pre-softmax linear transformation: `[..., d_model]` -> `[..., vocab]` float32 logits.

    `transposed`, if given, is this table as `[d_model, vocab]` (`embedding.T`), computed
    once by a caller that projects many times, e.g. every step of a decode loop.
    """
    if transposed is not None:
      return jnp.einsum('...d,dv->...v', x, jnp.asarray(transposed, self.dtype),
                        preferred_element_type=jnp.float32)
    return jnp.einsum('...d,vd->...v', x, jnp.asarray(self.embedding, self.dtype),
                      preferred_element_type=jnp.float32)


class AddPositions(nn.Module):
  """Adds sinusoidal (§3.5) or learned (Table 3 row E) positions to `[batch, length, d_model]`.

  In decode mode the input is one position `[batch, 1, d_model]` and the position to use is
  kept in the 'cache' collection. `positions` (packed rows: `[batch, length]` int, each
  token's position within its own pair) replaces the row index 0..length-1.
  """
  max_len: int
  positional: str = 'sinusoidal'
  decode: bool = False

  @nn.compact
  def __call__(self, x: Array, positions: Optional[Array] = None) -> Array:
    length, d_model = x.shape[1], x.shape[2]
    if self.positional == 'learned':
      table = self.param('positions', nn.initializers.normal(stddev=d_model ** -0.5),
                         (self.max_len, d_model), jnp.float32)
    else:
      table = jnp.asarray(sinusoidal_positions(self.max_len, d_model))
    if self.decode:
      is_initialized = self.has_variable('cache', 'position')
      position = self.variable('cache', 'position', lambda: jnp.zeros((), jnp.int32))
      if is_initialized:
        row = jax.lax.dynamic_slice_in_dim(table, position.value, 1, axis=0)
        position.value = position.value + 1
        return x + row[None].astype(x.dtype)
    if length > self.max_len:
      raise ValueError(f'sequence length {length} exceeds config.max_len={self.max_len}')
    if positions is not None:
      if self.decode:
        raise ValueError('decode mode never packs: pass positions=None')
      # Within-pair positions are < length <= max_len, so the gather stays in the table.
      return x + jnp.take(table, positions, axis=0).astype(x.dtype)
    return x + table[None, :length].astype(x.dtype)


def head_projection(num_heads: int, features: int, dtype: Dtype,
                    name: Optional[str] = None) -> nn.DenseGeneral:
  """x W^Q (or W^K, W^V) for all heads: `[..., d_model]` -> `[..., heads, features]`, no bias."""
  return nn.DenseGeneral((num_heads, features), use_bias=False, dtype=dtype,
                         param_dtype=jnp.float32, kernel_init=nn.initializers.xavier_uniform(),
                         name=name)


class MultiHeadAttention(nn.Module):
  """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with per-head projections (§3.2.2).

  The projections W^Q, W^K, W^V, W^O have no biases, as in the paper's equations. In decode
  mode (self-attention of the decoder) keys and values of past positions live in the 'cache'
  collection, heads-first `[batch, heads, max_decode_len, d]`, and one query position is
  processed per call.

  Attributes:
    num_heads: h.
    d_k: per-head query/key width.
    d_v: per-head value width.
    d_model: output width.
    attention_dropout_rate: dropout on attention weights.
    dtype: activation dtype.
    decode: incremental decoding with a key/value cache.
    attention_impl: passed to `jax.nn.dot_product_attention` (None: backend default).
    capture_weights: compute attention through the einsum reference path and sow its weights
      `[rows, heads, q_len, kv_len]` float32 into the 'intermediates' collection as
      'attention_weights' (apply with `mutable=['intermediates']` to read them). Cached decode
      steps never capture. Off: the fused path, unchanged.
  """
  num_heads: int
  d_k: int
  d_v: int
  d_model: int
  attention_dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  decode: bool = False
  attention_impl: Optional[str] = None
  capture_weights: bool = False

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_kv: Optional[Array],
               mask: Optional[Array] = None, *, deterministic: bool = True,
               key_value: Optional[Tuple[Array, Array]] = None) -> Array:
    """`[rows, q_len, d_model]` queries attend over `[batch, kv_len, d_model]`.

    `key_value`, if given, are already projected keys `[batch, heads, kv_len, d_k]` and
    values `[batch, heads, kv_len, d_v]` (heads-first, as `transformer.cross_key_values`
    makes them), used instead of projecting `inputs_kv`: decoding projects the encoder
    output once per sentence, not once per output position. Their batch may be smaller
    than the queries' rows: with `rows = batch * group`,
    query rows `b * group .. (b + 1) * group - 1` (the beams of sentence b) all attend over
    keys/values row b; `mask` must then not depend on the query position (a padding mask).
    Returns `[rows, q_len, d_model]`.
    """
    project = lambda features, name: head_projection(  # noqa: E731
        self.num_heads, features, self.dtype, name=name)
    query = project(self.d_k, 'query')(inputs_q)
    dropout_rate = 0.0 if deterministic else self.attention_dropout_rate
    if key_value is None:
      key, value = project(self.d_k, 'key')(inputs_kv), project(self.d_v, 'value')(inputs_kv)
    elif dropout_rate == 0.0 and not self.capture_weights:  # decoding's cross-attention
      return self._out(self._heads_first_step(query, *key_value, mask))
    else:
      key, value = (x.transpose(0, 2, 1, 3) for x in key_value)

    if self.decode and self.has_variable('cache', 'cached_key'):
      if mask is not None:  # it would be ignored: the cache index is the causal mask
        raise ValueError('decode mode masks by the cache index; pass mask=None')
      out = self._cached_step(query, key, value)
    else:
      if self.decode:  # cache creation (a shape-only call): allocate, then attend as usual
        self._cache_variables(key, value)
      dropout_rng = self._dropout_key() if dropout_rate > 0.0 else None
      rows, q_len = query.shape[:2]
      grouped = key.shape[0] != rows
      if grouped:
        query = _group_rows(query, key.shape[0], mask)
      if self.capture_weights:
        out, weights = attention.dot_product_attention_with_weights(
            query, key, value, mask, dropout_rate=dropout_rate, dropout_rng=dropout_rng)
        self.sow('intermediates', 'attention_weights',
                 _ungroup_weights(weights, rows) if grouped else weights)
      else:
        out = attention.dot_product_attention(query, key, value, mask,
                                              dropout_rate=dropout_rate,
                                              dropout_rng=dropout_rng,
                                              implementation=self.attention_impl)
      if grouped:
        out = out.reshape(rows, q_len, *out.shape[2:])
    return self._out(out)

  def _dropout_key(self) -> Array:
    """The attention-dropout key: a method of its own so that a scanned layer stack
    (`stack.scan_layers`) can hand each layer the key it would get unrolled."""
    return self.make_rng('dropout')

  def _out(self, heads: Array) -> Array:
    """W^O: `[rows, q_len, heads, d_v]` -> `[rows, q_len, d_model]`."""
    return nn.DenseGeneral(self.d_model, axis=(-2, -1), use_bias=False, dtype=self.dtype,
                           param_dtype=jnp.float32,
                           kernel_init=nn.initializers.xavier_uniform(), name='out')(heads)

  @staticmethod
  def _heads_first_step(query: Array, key: Array, value: Array,
                        mask: Optional[Array]) -> Array:
    """Queries `[rows, q_len, heads, d_k]` over heads-first keys/values of `batch` rows
    (the beams of a sentence grouped onto its row) -> `[rows, q_len, heads, d_v]`."""
    rows, q_len = query.shape[:2]
    if key.shape[0] != rows:
      query = _group_rows(query, key.shape[0], mask)
    out = attention.few_query_attention(query, key, value, True if mask is None else mask)
    return out.reshape(rows, q_len, *out.shape[2:])

  def _cache_variables(self, key: Array, value: Array):
    """The cache: heads-first keys/values `[batch, heads, max_len, d]` and the fill index."""
    heads_first = lambda x: (x.shape[0], x.shape[2], x.shape[1], x.shape[3])  # noqa: E731
    cached_key = self.variable('cache', 'cached_key', jnp.zeros, heads_first(key), key.dtype)
    cached_value = self.variable('cache', 'cached_value', jnp.zeros, heads_first(value),
                                 value.dtype)
    cache_index = self.variable('cache', 'cache_index', lambda: jnp.zeros((), jnp.int32))
    return cached_key, cached_value, cache_index

  def _cached_step(self, query: Array, key: Array, value: Array) -> Array:
    """Writes this step's key/value at the cache index and attends over positions 0..index."""
    cached_key, cached_value, cache_index = self._cache_variables(key, value)
    if key.shape[1] != 1:
      raise ValueError(f'decode mode takes one position per call, got length {key.shape[1]}')
    index = cache_index.value
    zero = jnp.zeros((), jnp.int32)
    at = (zero, zero, index, zero)
    cached_key.value = jax.lax.dynamic_update_slice(cached_key.value,
                                                    key.transpose(0, 2, 1, 3), at)
    cached_value.value = jax.lax.dynamic_update_slice(cached_value.value,
                                                      value.transpose(0, 2, 1, 3), at)
    cache_index.value = index + 1
    # The query at `index` sees cached positions 0..index: the causal mask of §3.2.3, one row.
    return attention.cached_attention(query, cached_key.value, cached_value.value, index + 1)


def _group_rows(query: Array, batch: int, mask: Optional[Array]) -> Array:
  """`[batch * group, q_len, heads, d]` -> `[batch, group * q_len, heads, d]`."""
  rows = query.shape[0]
  if rows % batch:
    raise ValueError(f'{rows} query rows cannot share keys/values of batch {batch}')
  if mask is not None and mask.shape[-2] != 1:
    raise ValueError('grouped queries need a mask that does not depend on the query position, '
                     f'got mask shape {mask.shape}')
  return query.reshape(batch, (rows // batch) * query.shape[1], *query.shape[2:])


def _ungroup_weights(weights: Array, rows: int) -> Array:
  """`[batch, heads, group * q_len, kv]` (from `_group_rows`) -> `[rows, heads, q_len, kv]`."""
  batch, heads, grouped_len, kv_len = weights.shape
  group = rows // batch
  weights = weights.reshape(batch, heads, group, grouped_len // group, kv_len)
  return weights.transpose(0, 2, 1, 3, 4).reshape(rows, heads, grouped_len // group, kv_len)


class FeedForward(nn.Module):
  """FFN(x) = max(0, x W1 + b1) W2 + b2, applied at every position (§3.3, Eq. 2).

  `[batch, length, d_model]` -> `[batch, length, d_model]`.
  """
  d_ff: int
  d_model: int
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    dense = lambda features, name: nn.Dense(  # noqa: E731
        features, dtype=self.dtype, param_dtype=jnp.float32,
        kernel_init=nn.initializers.xavier_uniform(), name=name)
    return dense(self.d_model, 'wo')(nn.relu(dense(self.d_ff, 'wi')(x)))


class Residual(nn.Module):
  """A residual sub-layer with dropout and layer normalisation (§3.1, §5.4).

  'post' (the paper): LayerNorm(x + Dropout(Sublayer(x))).
  'pre' (an option): x + Dropout(Sublayer(LayerNorm(x))); the stack then needs a final norm.
  """
  norm_position: str = 'post'
  dropout_rate: float = 0.1
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array, sublayer: Callable[[Array], Array], *,
               deterministic: bool = True) -> Array:
    norm = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, param_dtype=jnp.float32, name='norm')
    dropout = nn.Dropout(self.dropout_rate)
    if self.norm_position == 'pre':
      return x + dropout(sublayer(norm(x)), deterministic=deterministic)
    return norm(x + dropout(sublayer(x), deterministic=deterministic))
