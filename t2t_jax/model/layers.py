"""Linen building blocks of the Transformer (§3.2-§3.5): thin shells over `attention`.

Activations use the module's `dtype` (float32 or bfloat16); parameters are always float32.
"""

import functools
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

  `positions` (`[batch or 1, length]` int: each token's position within its own pair in packed
  rows, the step in incremental decoding) replaces the row index 0..length-1.
  """
  max_len: int
  positional: str = 'sinusoidal'

  @nn.compact
  def __call__(self, x: Array, positions: Optional[Array] = None) -> Array:
    length, d_model = x.shape[1], x.shape[2]
    if self.positional == 'learned':
      table = self.param('positions', nn.initializers.normal(stddev=d_model ** -0.5),
                         (self.max_len, d_model), jnp.float32)
    else:
      table = jnp.asarray(sinusoidal_positions(self.max_len, d_model))
    if positions is not None:
      # Within-pair positions are < length <= max_len and a decoding step is < max_len (the
      # caller checks), so the gather stays in the table.
      return x + jnp.take(table, positions, axis=0).astype(x.dtype)
    if length > self.max_len:
      raise ValueError(f'sequence length {length} exceeds config.max_len={self.max_len}')
    return x + table[None, :length].astype(x.dtype)


def head_projection(num_heads: int, features: int, dtype: Dtype,
                    name: Optional[str] = None) -> nn.DenseGeneral:
  """x W^Q (or W^K, W^V) for all heads: `[..., d_model]` -> `[..., heads, features]`, no bias."""
  return nn.DenseGeneral((num_heads, features), use_bias=False, dtype=dtype,
                         param_dtype=jnp.float32, kernel_init=nn.initializers.xavier_uniform(),
                         name=name)


class MultiHeadAttention(nn.Module):
  """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with per-head projections (§3.2.2).

  The projections W^Q, W^K, W^V, W^O have no biases, as in the paper's equations; between
  them, Eq. 1 is `attention_fn` on every path (training, capture, the cached step, decoding's
  encoder-decoder step). In decode mode (self-attention of the decoder) keys and values of
  past positions live in the 'cache' collection, heads-first `[batch, heads, max_decode_len,
  d]`, and one query position is processed per call.

  Attributes:
    num_heads: h.
    d_k: per-head query/key width.
    d_v: per-head value width.
    d_model: output width.
    attention_dropout_rate: dropout on attention weights.
    dtype: activation dtype.
    decode: incremental decoding with a key/value cache.
    attention_impl: passed to `attention_fn` as `implementation` when set (None: backend
      default).
    capture_weights: ask `attention_fn` for the weights it applied (`return_weights`) and sow
      them, `[rows, heads, q_len, kv_len]` float32, into the 'intermediates' collection as
      'attention_weights' (apply with `mutable=['intermediates']` to read them).
    attention_fn: Eq. 1 (`attention.AttentionFn`); None: `attention.dot_product_attention`.
    kind: 'encoder', 'decoder' or 'encoder_decoder', passed to `attention_fn`.
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
  attention_fn: Optional[attention.AttentionFn] = None
  kind: Optional[str] = None

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_kv: Optional[Array],
               mask: Optional[Array] = None, *, deterministic: bool = True,
               key_value: Optional[Tuple[Array, Array]] = None,
               query_positions: Optional[Array] = None,
               key_positions: Optional[Array] = None) -> Array:
    """`[rows, q_len, d_model]` queries attend over `[batch, kv_len, d_model]`.

    `key_value`, if given, are already projected keys `[batch, heads, kv_len, d_k]` and
    values `[batch, heads, kv_len, d_v]` (heads-first, as `transformer.cross_key_values`
    makes them), used instead of projecting `inputs_kv`: decoding projects the encoder
    output once per sentence, not once per output position. Their batch may be smaller
    than the queries' rows: with `rows = batch * group`,
    query rows `b * group .. (b + 1) * group - 1` (the beams of sentence b) all attend over
    keys/values row b; `mask` must then not depend on the query position (a padding mask).
    `query_positions` `[rows or 1, q_len]`, `key_positions` `[batch or 1, kv_len]` int32:
    passed to `attention_fn` (None: 0, 1, ...; a cached step's are the cache's).
    Returns `[rows, q_len, d_model]`.
    """
    project = lambda features, name: head_projection(  # noqa: E731
        self.num_heads, features, self.dtype, name=name)
    query = project(self.d_k, 'query')(inputs_q)
    dropout_rate = 0.0 if deterministic else self.attention_dropout_rate
    if key_value is None:
      key, value = project(self.d_k, 'key')(inputs_kv), project(self.d_v, 'value')(inputs_kv)
    else:  # heads-first -> the attention_fn layout (XLA cancels the transposes: see attention)
      key, value = (x.transpose(0, 2, 1, 3) for x in key_value)

    if self.decode and self.has_variable('cache', 'cached_key'):
      if mask is not None:  # it would be ignored: the cache index is the causal mask
        raise ValueError('decode mode masks by the cache index; pass mask=None')
      key, value, mask, index = self._cached_step(key, value)
      key_positions = jnp.arange(key.shape[1], dtype=jnp.int32)[None]
      if query_positions is None:
        query_positions = index[None, None]
    elif self.decode:  # cache creation (a shape-only call): allocate, then attend as usual
      self._cache_variables(key, value)
    rows, q_len = query.shape[:2]
    grouped = key.shape[0] != rows
    if query_positions is None:
      query_positions = jnp.arange(q_len, dtype=jnp.int32)[None]
    if key_positions is None:
      key_positions = jnp.arange(key.shape[1], dtype=jnp.int32)[None]
    if grouped:
      query = _group_rows(query, key.shape[0], mask)
      query_positions = _group_positions(query_positions, key.shape[0], rows)
    out = self._attend(query, key, value, mask, query_positions, key_positions, dropout_rate)
    if self.capture_weights:
      out, weights = out
      self.sow('intermediates', 'attention_weights',
               _ungroup_weights(weights, rows) if grouped else weights)
    if grouped:
      out = out.reshape(rows, q_len, *out.shape[2:])
    return self._out(out)

  def _attend(self, query: Array, key: Array, value: Array, mask: Optional[Array],
              query_positions: Array, key_positions: Array, dropout_rate: float):
    """`attention_fn` with this module's settings: `[b, q, heads, d_v]` (and the weights)."""
    options = {}
    if self.attention_impl is not None:
      options['implementation'] = self.attention_impl
    if dropout_rate > 0.0:
      options.update(dropout_rate=dropout_rate, dropout_rng=self._dropout_key())
    fn = attention.dot_product_attention if self.attention_fn is None else self.attention_fn
    result = fn(query, key, value, mask, query_positions=query_positions,
                key_positions=key_positions, kind=self.kind,
                return_weights=self.capture_weights, **options)
    return _checked_result(fn, result, self.capture_weights,
                           (query.shape[0], query.shape[1], self.num_heads, value.shape[-1]),
                           (query.shape[0], self.num_heads, query.shape[1], key.shape[1]))

  def _dropout_key(self) -> Array:
    """The attention-dropout key: a method of its own so that a scanned layer stack
    (`stack.scan_layers`) can hand each layer the key it would get unrolled."""
    return self.make_rng('dropout')

  def _out(self, heads: Array) -> Array:
    """W^O: `[rows, q_len, heads, d_v]` -> `[rows, q_len, d_model]`."""
    return nn.DenseGeneral(self.d_model, axis=(-2, -1), use_bias=False, dtype=self.dtype,
                           param_dtype=jnp.float32,
                           kernel_init=nn.initializers.xavier_uniform(), name='out')(heads)

  def _cache_variables(self, key: Array, value: Array):
    """The cache: heads-first keys/values `[batch, heads, max_len, d]` and the fill index."""
    heads_first = lambda x: (x.shape[0], x.shape[2], x.shape[1], x.shape[3])  # noqa: E731
    cached_key = self.variable('cache', 'cached_key', jnp.zeros, heads_first(key), key.dtype)
    cached_value = self.variable('cache', 'cached_value', jnp.zeros, heads_first(value),
                                 value.dtype)
    cache_index = self.variable('cache', 'cache_index', lambda: jnp.zeros((), jnp.int32))
    return cached_key, cached_value, cache_index

  def _cached_step(self, key: Array, value: Array) -> Tuple[Array, Array, Array, Array]:
    """Writes this step's key/value at the cache index; returns the whole cache's keys and
    values `[batch, max_len, heads, d]`, the mask of its filled positions 0..index (the causal
    mask of §3.2.3, one row) `[1, 1, 1, max_len]`, and the index `[]` int32."""
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
    filled = (jnp.arange(cached_key.value.shape[2]) <= index)[None, None, None]
    return (cached_key.value.transpose(0, 2, 1, 3), cached_value.value.transpose(0, 2, 1, 3),
            filled, index)


def _fn_name(fn) -> str:
  return getattr(fn, '__name__', None) or repr(fn)


def _shape_of(x) -> str:
  shape = getattr(x, 'shape', None)
  return f'shape {tuple(shape)}' if shape is not None else f'a {type(x).__name__}'


def _checked_result(fn, result, return_weights: bool, out_shape: Tuple[int, ...],
                    weights_shape: Tuple[int, ...]):
  """`fn`'s result, checked while tracing: the output `[batch, q_len, heads, d_v]` and, asked
  for them, the weights `[batch, heads, q_len, kv_len]`; a ValueError naming `fn` otherwise
  (an output in another layout would fail later in W^O without naming it, and weights dropped
  on the way through would be read as the output's rows)."""
  if return_weights:
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
      raise ValueError(f'attention_fn {_fn_name(fn)} returned {_shape_of(result)} for '
                       'return_weights=True: expected (output [batch, q_len, heads, d_v] '
                       f'{out_shape}, weights [batch, heads, q_len, kv_len] {weights_shape}); '
                       'pass return_weights on to dot_product_attention')
    out, weights = result
    if getattr(weights, 'shape', None) != weights_shape:
      raise ValueError(f'attention_fn {_fn_name(fn)} returned weights of {_shape_of(weights)}: '
                       f'expected [batch, heads, q_len, kv_len] = {weights_shape}')
  else:
    out = result
  if getattr(out, 'shape', None) != out_shape:
    raise ValueError(f'attention_fn {_fn_name(fn)} returned {_shape_of(out)}: expected '
                     f'[batch, q_len, heads, d_v] = {out_shape}')
  return result


def _group_rows(query: Array, batch: int, mask: Optional[Array]) -> Array:
  """`[batch * group, q_len, heads, d]` -> `[batch, group * q_len, heads, d]`."""
  rows = query.shape[0]
  if rows % batch:
    raise ValueError(f'{rows} query rows cannot share keys/values of batch {batch}')
  if mask is not None and mask.shape[-2] != 1:
    raise ValueError('grouped queries need a mask that does not depend on the query position, '
                     f'got mask shape {mask.shape}')
  return query.reshape(batch, (rows // batch) * query.shape[1], *query.shape[2:])


def _group_positions(positions: Array, batch: int, rows: int) -> Array:
  """`_group_rows` for query positions: `[rows or 1, q_len]` -> `[batch or 1, group * q_len]`."""
  if positions.shape[0] == 1:
    return jnp.tile(positions, (1, rows // batch))
  return positions.reshape(batch, -1)


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


def layer_norm(dtype: Dtype, *, name: str) -> nn.LayerNorm:
  """LayerNorm (§3.1) with epsilon 1e-6 (tensor2tensor's) and float32 parameters."""
  return nn.LayerNorm(epsilon=1e-6, dtype=dtype, param_dtype=jnp.float32, name=name)


class Residual(nn.Module):
  """A residual sub-layer with dropout and layer normalisation (§3.1, §5.4).

  'post' (the paper): Norm(x + Dropout(Sublayer(x))).
  'pre' (an option): x + Dropout(Sublayer(Norm(x))); the stack then needs a final norm.
  `norm(name=...)` makes the normalisation module (None: LayerNorm, epsilon 1e-6).
  `norm_position` is also the declaration the stacks read (`parts.norm_position`) to decide
  their final norm: a replacement residual part declares its own.
  """
  norm_position: str = 'post'
  dropout_rate: float = 0.1
  dtype: Dtype = jnp.float32
  norm: Optional[Callable[..., nn.Module]] = None

  @nn.compact
  def __call__(self, x: Array, sublayer: Callable[[Array], Array], *,
               deterministic: bool = True) -> Array:
    norm = (self.norm or functools.partial(layer_norm, self.dtype))(name='norm')
    dropout = nn.Dropout(self.dropout_rate)
    if self.norm_position == 'pre':
      return x + dropout(sublayer(norm(x)), deterministic=deterministic)
    return norm(x + dropout(sublayer(x), deterministic=deterministic))
