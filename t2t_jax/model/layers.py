"""Linen building blocks of the Transformer (§3.2-§3.5): thin shells over `attention`.

Activations use the module's `dtype` (float32 or bfloat16); parameters are always float32.
"""

import functools
from typing import Any, Callable, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.model.array_checks import check_int

# Moved to a module of their own; re-exported here, where callers have always found them.
from t2t_jax.model.multi_head_attention import (MultiHeadAttention,  # noqa: F401
                                                head_projection)

Array = jax.Array
Dtype = Any


def sinusoidal_positions(length: int, d_model: int) -> np.ndarray:
  """The fixed encoding of §3.5: `[length, d_model]` float32.

  PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)),
  interleaved exactly as the paper writes it (tensor2tensor concatenates instead), pos from 0.
  Computed in float64 with numpy, so it is a compile-time constant.

  Raises:
    TypeError: `length` or `d_model` not an integer.
    ValueError: `length` < 0 or `d_model` < 1 (an odd d_model is fine: its last column is
      a sine).
  """
  length = check_int('sinusoidal_positions', 'length', length, minimum=0)
  d_model = check_int('sinusoidal_positions', 'd_model', d_model, minimum=1)
  position = np.arange(length, dtype=np.float64)[:, None]
  two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
  angle = position / np.power(10000.0, two_i / d_model)
  table = np.zeros((length, d_model), dtype=np.float64)
  table[:, 0::2] = np.sin(angle)
  table[:, 1::2] = np.cos(angle[:, : d_model // 2])
  return table.astype(np.float32)


def position_table(kind: str, length: int, d_model: int) -> np.ndarray:
  """The fixed position table `[length, d_model]` float32 of `positional` `kind`:
  'sinusoidal' (§3.5, interleaved), 'sinusoidal_halves' (the same columns, the sines first
  and the cosines after them: Marian's layout, `[sin(pos w_i) | cos(pos w_i)]`) or
  'sinusoidal_fairseq' (`fairseq_positions`)."""
  if kind == 'sinusoidal_fairseq':
    return fairseq_positions(length, d_model)
  table = sinusoidal_positions(length, d_model)
  if kind == 'sinusoidal_halves':
    return np.concatenate([table[:, 0::2], table[:, 1::2]], axis=1)
  return table


FAIRSEQ_FIRST_POSITION = 2  # fairseq's padding id 1, plus one: its first token's position


def fairseq_positions(length: int, d_model: int) -> np.ndarray:
  """fairseq's sinusoids (M2M100's, NLLB's) for positions 0..length-1 of ours: `[length,
  d_model]` float32, row p = [sin((p + 2) w_i) | cos((p + 2) w_i)], w_i = 10000^(-i / (d/2 - 1))
  (tensor2tensor's timescales), a zero last column for an odd d_model."""
  half = d_model // 2
  rate = np.exp(np.arange(half, dtype=np.float64) * -(np.log(10000.0) / max(half - 1, 1)))
  angle = np.arange(FAIRSEQ_FIRST_POSITION, length + FAIRSEQ_FIRST_POSITION,
                    dtype=np.float64)[:, None] * rate[None]
  table = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
  if d_model % 2:
    table = np.concatenate([table, np.zeros((length, 1))], axis=1)
  return table.astype(np.float32)


ACTIVATIONS = {'relu': nn.relu, 'swish': nn.swish, 'gelu': functools.partial(nn.gelu,
                                                                             approximate=False)}


class SharedEmbedding(nn.Module):
  """One matrix for source embedding, target embedding and pre-softmax projection (§3.4).

  The model's `embedding` part (`parts.embedding`); `tie` and `scale` give fairseq's options
  apart from the paper's.

  Attributes:
    vocab_size: shared vocabulary size.
    d_model: model width.
    dtype: activation dtype.
    tie: the pre-softmax projection is the embedding (the paper); False: a matrix of its own,
      parameter `projection` `[vocab, d_model]` (initialised as the embedding).
    scale: multiply the embeddings by sqrt(d_model) (the paper); False: the rows as they are.
    logits_bias: a `[vocab]` float32 parameter `logits_bias` (zeros at first) added to the
      logits `attend` returns (Marian's `final_logits_bias`); False: none (the paper).
  """
  vocab_size: int
  d_model: int
  dtype: Dtype = jnp.float32
  tie: bool = True
  scale: bool = True
  logits_bias: bool = False

  def setup(self):
    # Normal(0, d_model^-0.5): after the sqrt(d_model) scale the embeddings have unit variance,
    # comparable to the sinusoids they are added to (tensor2tensor's choice).
    init = nn.with_logical_partitioning(nn.initializers.normal(stddev=self.d_model ** -0.5),
                                        ('vocab', 'embed'))
    shape = (self.vocab_size, self.d_model)
    self.embedding = self.param('embedding', init, shape, jnp.float32)
    if not self.tie:
      self.projection = self.param('projection', init, shape, jnp.float32)
    if self.logits_bias:
      self.bias = self.param('logits_bias', nn.with_logical_partitioning(
          nn.initializers.zeros_init(), ('vocab',)), (self.vocab_size,), jnp.float32)

  def __call__(self, ids: Array) -> Array:
    """`[batch, length]` int32 -> `[batch, length, d_model]`, multiplied by sqrt(d_model)
    (unless `scale` is off)."""
    table = jnp.asarray(self.embedding, self.dtype)
    x = jnp.take(table, ids, axis=0)
    return x * jnp.asarray(np.sqrt(self.d_model), self.dtype) if self.scale else x

  def output_table(self) -> Array:
    """The pre-softmax projection's matrix `[vocab, d_model]` float32: the embedding itself
    when tied."""
    return self.embedding if self.tie else self.projection

  def tables(self) -> Tuple[Array, Array]:
    """(input embedding, pre-softmax projection), each `[vocab, d_model]` float32, as stored
    (unscaled): what an exporter writes. One array twice when tied."""
    return self.embedding, self.output_table()

  def transposed(self) -> Array:
    """The pre-softmax matrix as `[d_model, vocab]`, for `attend(x, transposed)`: computed
    once per batch by a caller that projects many times (every step of a decode loop)."""
    return self.output_table().T

  def attend(self, x: Array, transposed: Optional[Array] = None) -> Array:
    """Pre-softmax linear transformation: `[..., d_model]` -> `[..., vocab]` float32 logits.

    `transposed`, if given, is `self.transposed()` (`[d_model, vocab]`), computed once by a
    caller that projects many times, e.g. every step of a decode loop.
    """
    if transposed is not None:
      logits = jnp.einsum('...d,dv->...v', x, jnp.asarray(transposed, self.dtype),
                          preferred_element_type=jnp.float32)
    else:
      logits = jnp.einsum('...d,vd->...v', x, jnp.asarray(self.output_table(), self.dtype),
                          preferred_element_type=jnp.float32)
    return logits + self.bias if self.logits_bias else logits


class AddPositions(nn.Module):
  """Adds sinusoidal (§3.5) or learned (Table 3 row E) positions to `[batch, length, d_model]`.

  `positions` (`[batch or 1, length]` int: each token's position within its own pair in packed
  rows, the step in incremental decoding) replaces the row index 0..length-1.
  """
  max_len: int
  positional: str = 'sinusoidal'  # or 'learned', 'sinusoidal_halves' (`position_table`)

  @nn.compact
  def __call__(self, x: Array, positions: Optional[Array] = None) -> Array:
    length, d_model = x.shape[1], x.shape[2]
    if self.positional == 'learned':
      table = self.param('positions', nn.with_logical_partitioning(
          nn.initializers.normal(stddev=d_model ** -0.5), ('position', 'embed')),
                         (self.max_len, d_model), jnp.float32)
    else:
      table = jnp.asarray(position_table(self.positional, self.max_len, d_model))
    if positions is not None:
      # Within-pair positions are < length <= max_len and a decoding step is < max_len (the
      # caller checks), so the gather stays in the table.
      return x + jnp.take(table, positions, axis=0).astype(x.dtype)
    if length > self.max_len:
      raise ValueError(f'sequence length {length} exceeds config.max_len={self.max_len}')
    return x + table[None, :length].astype(x.dtype)


class FeedForward(nn.Module):
  """FFN(x) = max(0, x W1 + b1) W2 + b2, applied at every position (§3.3, Eq. 2).

  `[batch, length, d_model]` -> `[batch, length, d_model]`. `activation` names another
  nonlinearity in place of max(0, .) (`ACTIVATIONS`: 'swish', 'gelu').
  """
  d_ff: int
  d_model: int
  dtype: Dtype = jnp.float32
  activation: str = 'relu'

  @nn.compact
  def __call__(self, x: Array) -> Array:
    # W1 column-parallel and W2 row-parallel over d_ff ('mlp'), Megatron's split.
    dense = lambda features, axes, name: nn.Dense(  # noqa: E731
        features, dtype=self.dtype, param_dtype=jnp.float32,
        kernel_init=nn.with_logical_partitioning(nn.initializers.xavier_uniform(), axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(), axes[1:]),
        name=name)
    hidden = ACTIVATIONS[self.activation](dense(self.d_ff, ('embed', 'mlp'), 'wi')(x))
    return dense(self.d_model, ('mlp', 'embed'), 'wo')(hidden)


def layer_norm(dtype: Dtype, *, name: str, epsilon: float = 1e-6) -> nn.LayerNorm:
  """LayerNorm (§3.1) with float32 parameters and `epsilon` (1e-6: tensor2tensor's)."""
  return nn.LayerNorm(epsilon=epsilon, dtype=dtype, param_dtype=jnp.float32, name=name,
                      scale_init=nn.with_logical_partitioning(nn.initializers.ones, ('norm',)),
                      bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ('norm',)))


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
