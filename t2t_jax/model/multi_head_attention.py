"""Multi-head attention (§3.2.2) as a linen module: the projections around Eq. 1.

MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i),
Eq. 1 being the model's `attention_fn` on every path. Two extension points sit between the
projections and Eq. 1: `num_kv_heads` (grouped-query attention: K and V projected to fewer
heads, cached as such) and `qk_transform` (a per-position transform of queries and keys, e.g.
rotary positions, applied to a key once, before it is cached).
"""

from typing import Any, Optional, Protocol, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from t2t_jax.model import attention

Array = jax.Array
Dtype = Any


class QKTransform(Protocol):
  """A per-position transform of the projected queries and keys (a model's `qk_transform`).

  Called on the queries `[batch, q_length, heads, d_k]` and on the keys `[batch, kv_length,
  kv_heads, d_k]` right after W^Q / W^K, before Eq. 1; a key is transformed once: before the
  decoding cache stores it, and when decoding projects a sentence's encoder output once
  (`incremental.cross_key_values`). Rotary positions (RoPE) are the example: each query and key
  rotated by its own position, so that Q K^T depends on the distance only.

  Args:
    x: the queries or keys.
    positions: `[batch or 1, length]` int32, each one's position (within its pair in packed
      rows; the step, or the cache slot, in decoding).
    kind: 'encoder', 'decoder' or 'encoder_decoder' (the attention's, see `AttentionFn`).
    role: 'query' or 'key'.

  Returns:
    The same shape and dtype.
  """

  def __call__(self, x: Array, positions: Array, *, kind: str, role: str) -> Array:
    ...


def head_projection(num_heads: int, features: int, dtype: Dtype,
                    name: Optional[str] = None, heads_axis: str = 'heads',
                    bias: bool = False) -> nn.DenseGeneral:
  """x W^Q (or W^K, W^V) for all heads: `[..., d_model]` -> `[..., heads, features]`, no bias
  (with `bias`, one `[heads, features]`, zeros at first); the kernel `[d_model, heads,
  features]` has the logical axes ('embed', `heads_axis`, 'kv')."""
  return nn.DenseGeneral((num_heads, features), use_bias=bias, dtype=dtype,
                         param_dtype=jnp.float32, kernel_init=nn.with_logical_partitioning(
                             nn.initializers.xavier_uniform(), ('embed', heads_axis, 'kv')),
                         bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(),
                                                                (heads_axis, 'kv')),
                         name=name)


class MultiHeadAttention(nn.Module):
  """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with per-head projections (§3.2.2).

  The projections W^Q, W^K, W^V, W^O have no biases, as in the paper's equations (`bias`:
  each has one, as fairseq's, Marian's and transformers' models); between
  them, Eq. 1 is `attention_fn` on every path (training, capture, the cached step, decoding's
  encoder-decoder step). In decode mode (self-attention of the decoder) keys and values of
  past positions live in the 'cache' collection, heads-first `[batch, kv_heads,
  max_decode_len, d]`, and one query position is processed per call.

  Attributes:
    num_heads: h.
    num_kv_heads: the key/value heads, a divisor of h (None: h, the paper): grouped-query
      attention, K and V projected to and cached with fewer heads (`attention` module
      docstring).
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
    qk_transform: applied to the projected queries and keys (`QKTransform`); None: nothing.
    shared: the model's `shared` part (one module for every layer), called as
      `shared(query_positions, key_positions, kind=kind)`; its result goes to `attention_fn`
      as `shared=`. None: `attention_fn` gets no `shared`.
    window: W of a sliding-window self-attention (`TransformerConfig.decoder_window`): in
      decode mode the cache is a ring buffer, position p written to slot p % slots, and a
      step sees the filled slots within the last W positions, handed to `attention_fn` and
      `shared` at their real positions. The teacher-forced mask is the caller's (the
      decoder's). None: every earlier position, the cache's slot p holds position p.
    bias: W^Q, W^K, W^V and W^O each with a bias (`TransformerConfig.attention_bias`).
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
  num_kv_heads: Optional[int] = None
  qk_transform: Optional[QKTransform] = None
  shared: Optional[nn.Module] = None
  window: Optional[int] = None
  bias: bool = False

  @nn.compact
  def __call__(self, inputs_q: Optional[Array], inputs_kv: Optional[Array],
               mask: Optional[Array] = None, *, deterministic: bool = True,
               key_value: Optional[Tuple[Array, Array]] = None,
               query_positions: Optional[Array] = None,
               key_positions: Optional[Array] = None) -> Array:
    """`[rows, q_len, d_model]` queries attend over `[batch, kv_len, d_model]`.

    `key_value`, if given, are already projected (and transformed) keys `[batch, kv_heads,
    kv_len, d_k]` and values `[batch, kv_heads, kv_len, d_v]` (heads-first, as a call with
    `inputs_q=None` makes them), used instead of projecting `inputs_kv`: decoding projects the
    encoder output once per sentence, not once per output position. Their batch may be
    smaller than the queries' rows: with `rows = batch * group`,
    query rows `b * group .. (b + 1) * group - 1` (the beams of sentence b) all attend over
    keys/values row b; `mask` must then not depend on the query position (a padding mask).
    `query_positions` `[rows or 1, q_len]`, `key_positions` `[batch or 1, kv_len]` int32:
    passed to `qk_transform` and `attention_fn` (None: 0, 1, ...; a cached step's are the
    cache's).
    Returns `[rows, q_len, d_model]`; with `inputs_q` None, the keys `[batch, kv_heads, kv_len,
    d_k]` and values `[batch, kv_heads, kv_len, d_v]` this layer computes from `inputs_kv`
    at `key_positions`, heads-first as `key_value` takes them (decoding computes them once per
    sentence: `incremental.cross_key_values`).
    """
    if inputs_q is None:
      if self.qk_transform is not None:
        # Linen names a module made inside `qk_transform` by call order (`RMSNorm_0`,
        # `RMSNorm_1`): the full call transforms queries first, so the keys-only call
        # transforms an empty query first too, and the keys get their own module, not the
        # queries'. Zero rows: no work.
        self._transform(jnp.zeros((inputs_kv.shape[0], 0, self.num_heads, self.d_k),
                                  self.dtype or inputs_kv.dtype), None, 'query')
      return tuple(x.transpose(0, 2, 1, 3) for x in self._key_values(inputs_kv, key_positions))
    query = self._project(self.num_heads, self.d_k, 'query')(inputs_q)
    dropout_rate = 0.0 if deterministic else self.attention_dropout_rate
    caching = self.decode and self.has_variable('cache', 'cached_key')
    if query_positions is None and caching:
      query_positions = self.get_variable('cache', 'cache_index')[None, None]
    if query_positions is None:
      query_positions = _arange(query.shape[1])
    query = self._transform(query, query_positions, 'query')
    if key_value is None:
      # A cached step's one new key sits at the query's position (its cache slot).
      key, value = self._key_values(inputs_kv, query_positions if caching else key_positions)
    else:  # heads-first -> the attention_fn layout (XLA cancels the transposes: see attention)
      key, value = (x.transpose(0, 2, 1, 3) for x in key_value)

    if caching:
      if mask is not None:  # it would be ignored: the cache index is the causal mask
        raise ValueError('decode mode masks by the cache index; pass mask=None')
      key, value, mask, key_positions = self._cached_step(key, value)  # None: the slots
    elif self.decode:  # cache creation (a shape-only call): allocate, then attend as usual
      self._cache_variables(key, value)
    if key_positions is None:
      key_positions = _arange(key.shape[1])
    return self._out(self._grouped_attend(query, key, value, mask, query_positions,
                                          key_positions, dropout_rate))

  def _grouped_attend(self, query: Array, key: Array, value: Array, mask: Optional[Array],
                      query_positions: Array, key_positions: Array,
                      dropout_rate: float) -> Array:
    """`_attend` for `[rows, q_len, heads, d_k]` queries over keys/values of `rows` or fewer
    rows (the beams of a sentence over its encoder output); sows captured weights."""
    rows, q_len = query.shape[:2]
    grouped = key.shape[0] != rows
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
    return out

  def _project(self, heads: int, features: int, name: str) -> nn.DenseGeneral:
    # Keys and values have their own logical axis: grouped-query attention's fewer kv heads
    # may not divide the tensor axis that splits the query heads (`runtime/meshes.py`).
    return head_projection(heads, features, self.dtype, name=name,
                           heads_axis='heads' if name == 'query' else 'kv_heads', bias=self.bias)

  def _transform(self, x: Array, positions: Optional[Array], role: str) -> Array:
    """`qk_transform` of queries or keys (nothing without one)."""
    if self.qk_transform is None:
      return x
    if positions is None:
      positions = _arange(x.shape[1])
    out = self.qk_transform(x, positions, kind=self.kind, role=role)
    if getattr(out, 'shape', None) != x.shape:
      raise ValueError(f'qk_transform {_fn_name(self.qk_transform)} returned '
                       f'{_shape_of(out)} for the {role}s: expected their shape {x.shape}')
    return out

  def _key_values(self, inputs_kv: Array, positions: Optional[Array]) -> Tuple[Array, Array]:
    """x W^K (transformed) `[batch, kv_len, kv_heads, d_k]` and x W^V `[..., d_v]`."""
    heads = self.num_kv_heads or self.num_heads
    key = self._project(heads, self.d_k, 'key')(inputs_kv)
    return (self._transform(key, positions, 'key'),
            self._project(heads, self.d_v, 'value')(inputs_kv))

  def _attend(self, query: Array, key: Array, value: Array, mask: Optional[Array],
              query_positions: Array, key_positions: Array, dropout_rate: float):
    """`attention_fn` with this module's settings: `[b, q, heads, d_v]` (and the weights)."""
    options = {}
    if self.attention_impl is not None:
      options['implementation'] = self.attention_impl
    if dropout_rate > 0.0:
      options.update(dropout_rate=dropout_rate, dropout_rng=self._dropout_key())
    if self.shared is not None:
      options['shared'] = self.shared(query_positions, key_positions, kind=self.kind)
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
    return nn.DenseGeneral(self.d_model, axis=(-2, -1), use_bias=self.bias, dtype=self.dtype,
                           param_dtype=jnp.float32, kernel_init=nn.with_logical_partitioning(
                               nn.initializers.xavier_uniform(), ('heads', 'kv', 'embed')),
                           bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(),
                                                                  ('embed',)),
                           name='out')(heads)

  def _cache_variables(self, key: Array, value: Array):
    """The cache: heads-first keys/values `[batch, kv_heads, max_len, d]` and the fill index."""
    heads_first = lambda x: (x.shape[0], x.shape[2], x.shape[1], x.shape[3])  # noqa: E731
    cached_key = self.variable('cache', 'cached_key', jnp.zeros, heads_first(key), key.dtype)
    cached_value = self.variable('cache', 'cached_value', jnp.zeros, heads_first(value),
                                 value.dtype)
    cache_index = self.variable('cache', 'cache_index', lambda: jnp.zeros((), jnp.int32))
    return cached_key, cached_value, cache_index

  def _cached_step(self, key: Array, value: Array
                   ) -> Tuple[Array, Array, Array, Optional[Array]]:
    """Writes this step's key/value at the cache index (its slot, `index % slots` for a
    `window`); returns the whole cache's keys and values `[batch, slots, kv_heads, d]`, the
    mask of the slots this step sees `[1, 1, 1, slots]` (the causal mask of §3.2.3, one row:
    the filled slots 0..index; with a window, those of the last W positions) and the slots'
    positions `[1, slots]` int32 (None without a window: slot s holds position s)."""
    cached_key, cached_value, cache_index = self._cache_variables(key, value)
    if key.shape[1] != 1:
      raise ValueError(f'decode mode takes one position per call, got length {key.shape[1]}')
    index = cache_index.value
    slots = cached_key.value.shape[2]
    zero = jnp.zeros((), jnp.int32)
    at = (zero, zero, index if self.window is None else index % slots, zero)
    cached_key.value = jax.lax.dynamic_update_slice(cached_key.value,
                                                    key.transpose(0, 2, 1, 3), at)
    cached_value.value = jax.lax.dynamic_update_slice(cached_value.value,
                                                      value.transpose(0, 2, 1, 3), at)
    cache_index.value = index + 1
    keys, values = cached_key.value, cached_value.value
    if self.has_variable('cache', ANCESTRY):  # beam search reorders this, not the keys/values
      keys, values = _ancestors(self.variable('cache', ANCESTRY), at[2], keys, values)
    filled = (jnp.arange(slots) <= index)[None, None, None]
    positions = None
    if self.window is not None:
      # Slot s holds the latest position p = s (mod slots) with p <= index; an unfilled
      # slot (s > index) is given position s, as without a window.
      slot = jnp.arange(slots, dtype=jnp.int32)
      positions = slot + slots * jnp.maximum((index - slot) // slots, 0)
      filled = filled & (index - positions < self.window)[None, None, None]
      positions = positions[None]
    return keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3), filled, positions


# The cache leaf of an append-only self-attention cache (`incremental.init_cache(ancestry=
# True)`): `[rows, slots]` int32, per hypothesis and slot, the row whose keys/values there are
# its ancestor's, as an offset from its own row (0, its own, is what a zero cache holds).
ANCESTRY = 'ancestor_rows'


def _ancestors(ancestry, slot: Array, keys: Array, values: Array) -> Tuple[Array, Array]:
  """Each row's keys and values `[rows, kv_heads, slots, d]` read from its ancestors' rows
  of the cache, after marking `slot` (just written by every row) as the row's own: the same
  arrays a cache reordered by parent at every step would hold, without moving the cache
  (`incremental.reorder_cache`)."""
  rows, heads, slots = keys.shape[:3]
  ancestry.value = jax.lax.dynamic_update_slice(
      ancestry.value, jnp.zeros((rows, 1), jnp.int32), (jnp.zeros((), jnp.int32), slot))
  source = jnp.arange(rows, dtype=jnp.int32)[:, None] + ancestry.value           # [rows, slots]
  index = (source[:, None, :], jnp.arange(heads)[None, :, None], jnp.arange(slots)[None, None])
  return tuple(x.at[index].get(mode='promise_in_bounds') for x in (keys, values))


def _arange(n: int) -> Array:
  """`[1, n]` int32: 0 .. n-1."""
  return jnp.arange(n, dtype=jnp.int32)[None]


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


