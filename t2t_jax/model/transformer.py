"""The Transformer encoder-decoder (§3.1, Figure 1) and its decode-time key/value cache.

Token conventions: padding id 0; on the decoder side EOS id 1 also serves as the start symbol
(decoder inputs are the targets shifted right by one, beginning with id 1). Nothing here knows
about data, files or devices.

Packed rows (`config.pack_examples`, training only): several (source, target) pairs share a
row, told apart by segment ids (`[batch, length]` int, 1, 2, ... per pair, 0 on padding) and
positioned by their within-pair positions. Attention is then masked to the token's own pair,
positions restart at 0 for every pair, and every pair's decoder input starts with BOS, so each
pair's logits are those it would get alone in a row. None everywhere means unpacked: the
computation is then exactly the unpacked one.
"""

import math
from typing import Callable, Optional, Sequence, Tuple, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from t2t_jax.model import attention, module_jit, parts as parts_lib, stack
from t2t_jax.model.array_checks import check_array, check_int, check_rng
from t2t_jax.model.parts import Parts
from t2t_jax.model.transformer_config import EOS_ID, PAD_ID, TransformerConfig
from t2t_jax.model.stack import REMAT_POLICIES, layer_class  # noqa: F401  (model.REMAT_POLICIES)
from t2t_jax.model.multi_head_attention import MultiHeadAttention, QKTransform

Array = jax.Array
BOS_ID = EOS_ID  # PAD_ID = 0, EOS_ID = 1: transformer_config.py, which refuses a smaller vocab


def shift_right(targets: Array, bos_id: int = BOS_ID,
                segmentation: Optional[Array] = None) -> Array:
  """Decoder inputs from targets: `[batch, length]` -> `[batch, length]`, bos first, last dropped.

  With `segmentation` (packed rows, `[batch, length]` segment ids) the shift is per pair:
  the first position of every pair gets bos, not the previous pair's last token.
  """
  check_array('shift_right', 'targets', targets, kind='int', rank=2, layout='[batch, length]')
  if segmentation is not None:
    check_array('shift_right', 'segmentation', segmentation, kind='int', rank=2,
                layout='[batch, length]')
  start = jnp.full_like(targets[:, :1], bos_id)
  shifted = jnp.concatenate([start, targets[:, :-1]], axis=1)
  if segmentation is None:
    return shifted
  first = jnp.concatenate([jnp.ones_like(segmentation[:, :1], jnp.bool_),
                           segmentation[:, 1:] != segmentation[:, :-1]], axis=1)
  return jnp.where(first, jnp.asarray(bos_id, targets.dtype), shifted)


def _check_packing(segmentation: Optional[Array], positions: Optional[Array], side: str):
  if (segmentation is None) != (positions is None):
    raise ValueError(f'packed {side}: give both the segmentation and the positions, or '
                     'neither')


def attention_layer(cfg: TransformerConfig, parts: Parts, name: str, kind: str,
                    decode: bool = False, shared: Optional[nn.Module] = None
                    ) -> MultiHeadAttention:
  """The `MultiHeadAttention` every layer builds (`kind` 'encoder', 'decoder' or
  'encoder_decoder'), with the model's parts; `incremental.cross_key_values` builds the same
  to project the encoder output once per sentence."""
  return MultiHeadAttention(cfg.num_heads, cfg.d_k, cfg.d_v, cfg.d_model,
                            cfg.attention_dropout_rate, cfg.dtype, decode=decode,
                            attention_impl=cfg.attention_impl,
                            capture_weights=cfg.capture_attention,
                            attention_fn=parts.attention_fn, kind=kind,
                            num_kv_heads=cfg.num_kv_heads, qk_transform=parts.qk_transform,
                            shared=shared,
                            window=cfg.decoder_window if kind == 'decoder' else None,
                            bias=cfg.attention_bias, name=name)


def _positions(n: int) -> Array:
  """`[1, n]` int32: 0 .. n-1, the positions of an unpacked row."""
  return jnp.arange(n, dtype=jnp.int32)[None]


class EncoderLayer(nn.Module):
  """Self-attention then FFN, each a residual sub-layer (§3.1).

  `positions`: `[batch or 1, src_len]` int32, passed to the attention (`attention_fn`).
  `shared`: the model's shared part (`parts.Parts.shared`), built once, or None.
  """
  cfg: TransformerConfig
  parts: Parts = parts_lib.PAPER
  shared: Optional[nn.Module] = None

  @nn.compact
  def __call__(self, x: Array, mask: Array, positions: Optional[Array] = None) -> Array:
    cfg, parts, det = self.cfg, self.parts, self.cfg.deterministic
    self_attention = attention_layer(cfg, parts, 'self_attention', 'encoder',
                                     shared=self.shared)
    x = parts.residual(cfg, parts.norm, name='attention_block')(
        x, lambda y: self_attention(y, y, mask, deterministic=det, query_positions=positions,
                                    key_positions=positions), deterministic=det)
    ffn = parts.feed_forward(cfg, name='ffn')
    return parts.residual(cfg, parts.norm, name='ffn_block')(x, ffn, deterministic=det)


class DecoderLayer(nn.Module):
  """Masked self-attention, encoder-decoder attention, FFN (§3.1).

  `positions`: `[rows or 1, tgt_len]` int32 of the decoder inputs (the step in decode mode),
  `source_positions`: `[batch or 1, src_len]`, passed to the attention (`attention_fn`).
  `shared`: as `EncoderLayer`'s.
  """
  cfg: TransformerConfig
  parts: Parts = parts_lib.PAPER
  shared: Optional[nn.Module] = None

  @nn.compact
  def __call__(self, y: Array, encoded: Optional[Array], self_mask: Optional[Array],
               cross_mask: Array, cross_kv: Optional[Tuple[Array, Array]] = None,
               positions: Optional[Array] = None,
               source_positions: Optional[Array] = None) -> Array:
    cfg, parts, det = self.cfg, self.parts, self.cfg.deterministic
    self_attention = attention_layer(cfg, parts, 'self_attention', 'decoder', decode=cfg.decode,
                                     shared=self.shared)
    # A cached step's keys are at the cache's positions, which the module knows.
    self_keys = None if cfg.decode else positions
    y = parts.residual(cfg, parts.norm, name='self_attention_block')(
        y, lambda z: self_attention(z, z, self_mask, deterministic=det,
                                    query_positions=positions, key_positions=self_keys),
        deterministic=det)
    cross_attention = attention_layer(cfg, parts, 'cross_attention', 'encoder_decoder',
                                      shared=self.shared)
    y = parts.residual(cfg, parts.norm, name='cross_attention_block')(
        y, lambda z: cross_attention(z, encoded, cross_mask, deterministic=det,
                                     key_value=cross_kv, query_positions=positions,
                                     key_positions=source_positions),
        deterministic=det)
    ffn = parts.feed_forward(cfg, name='ffn')
    return parts.residual(cfg, parts.norm, name='ffn_block')(y, ffn, deterministic=det)


def _embed_positions(module: nn.Module, x: Array, positions: Optional[Array]) -> Array:
  """The embeddings `x` with `module.parts.positions` added (§3.5; none without one), then
  dropout (§5.4)."""
  cfg = module.cfg
  if module.parts.positions is not None:
    x = module.parts.positions(cfg, name='positions')(x, positions)
  return nn.Dropout(cfg.dropout_rate)(x, deterministic=cfg.deterministic)


def _final_norm(module: nn.Module, x: Array) -> Array:
  """A pre-norm stack ends with a normalisation; the paper's post-norm stack already did.
  The residual part decides which it is (`parts.norm_position`), not the config: a pre-norm
  `residual` under a 'post' config still gets its final norm."""
  if parts_lib.norm_position(module.parts, module.cfg) == 'pre':
    x = module.parts.norm(module.cfg, name='final_norm')(x)
  return x


class Encoder(nn.Module):
  """Embeds `[batch, src_len]` ids and runs `cfg.encoder_layers` layers -> `[batch, src_len,
  d_model]`.

  Packed rows: `segmentation` and `positions` `[batch, src_len]` (see the module docstring).
  """
  cfg: TransformerConfig
  embed: nn.Module  # the model's embedding part (`parts.embedding`)
  parts: Parts = parts_lib.PAPER
  shared: Optional[nn.Module] = None

  @nn.compact
  def __call__(self, inputs: Array, segmentation: Optional[Array] = None,
               positions: Optional[Array] = None) -> Array:
    cfg = self.cfg
    _check_packing(segmentation, positions, 'inputs')
    mask = attention.padding_mask(inputs, PAD_ID)
    if segmentation is not None:
      mask = attention.combine_masks(mask, attention.segment_mask(segmentation, segmentation))
    x = _embed_positions(self, self.embed(inputs), positions)
    if positions is None:
      positions = _positions(inputs.shape[1])
    n = cfg.encoder_layers
    if stack.scannable(self, cfg, n) and self.shared is None:
      x = stack.scan_layers(self, EncoderLayer, cfg, self.parts, x, mask, positions,
                            num_layers=n)
    else:
      for i in range(n):
        x = layer_class(cfg, EncoderLayer)(cfg, self.parts, self.shared, name=f'layer_{i}')(
            x, mask, positions)
    return _final_norm(self, x)


class Decoder(nn.Module):
  """`cfg.decoder_layers` layers over shifted targets, then the pre-softmax projection (§3.4).

  Teacher forcing: `[batch, tgt_len]` decoder inputs -> `[batch, tgt_len, vocab]` float32 logits.
  Decode mode: `[rows, 1]` -> `[rows, 1, vocab]`, past positions read from the cache, the step
  counted in the cache's 'position'.
  `cross_kv` (from `cross_key_values`) replaces `encoded` with its per-layer projections; it
  and `inputs` may hold one row per sentence while the decoder inputs hold `rows = sentences *
  beam` (sentence-major). `vocab_t`: the pre-softmax matrix transposed, `[d_model, vocab]`
  (`Transformer.vocab_transposed`).
  Packed rows (teacher forcing only): `segmentation` and `positions` `[batch, tgt_len]` of the
  decoder inputs, `inputs_segmentation` `[batch, src_len]` of the source.
  """
  cfg: TransformerConfig
  embed: nn.Module  # the model's embedding part (`parts.embedding`)
  parts: Parts = parts_lib.PAPER
  shared: Optional[nn.Module] = None

  @nn.compact
  def __call__(self, decoder_inputs: Array, encoded: Optional[Array], inputs: Array,
               cross_kv: Optional[Sequence[Tuple[Array, Array]]] = None,
               vocab_t: Optional[Array] = None, *, segmentation: Optional[Array] = None,
               positions: Optional[Array] = None,
               inputs_segmentation: Optional[Array] = None) -> Array:
    cfg = self.cfg
    _check_packing(segmentation, positions, 'targets')
    if (segmentation is None) != (inputs_segmentation is None):
      raise ValueError('packed rows need the segmentation of both inputs and targets')
    if segmentation is not None and cfg.decode:
      raise ValueError('decode mode never packs: pass no segmentation')
    cross_mask = attention.padding_mask(inputs, PAD_ID)
    # In decode mode the causal mask comes from the cache index instead.
    self_mask = None if cfg.decode else attention.causal_mask(decoder_inputs.shape[1])
    if self_mask is not None and cfg.decoder_window is not None:  # a sliding window
      self_mask = attention.combine_masks(self_mask, attention.sliding_window_mask(
          decoder_inputs.shape[1], cfg.decoder_window))
    if segmentation is not None:
      cross_mask = attention.combine_masks(
          cross_mask, attention.segment_mask(segmentation, inputs_segmentation))
      self_mask = attention.combine_masks(
          self_mask, attention.segment_mask(segmentation, segmentation))
    if cfg.decode:
      positions = self._step(decoder_inputs.shape[1])
    y = _embed_positions(self, self.embed(decoder_inputs), positions)
    if positions is None:
      positions = _positions(decoder_inputs.shape[1])
    source_positions = _positions(inputs.shape[1])
    n = cfg.decoder_layers
    if stack.scannable(self, cfg, n) and cross_kv is None and self.shared is None:
      y = stack.scan_layers(self, DecoderLayer, cfg, self.parts, y, encoded, self_mask,
                            cross_mask, None, positions, source_positions, num_layers=n)
    else:
      for i in range(n):
        y = layer_class(cfg, DecoderLayer)(cfg, self.parts, self.shared, name=f'layer_{i}')(
            y, encoded, self_mask, cross_mask, None if cross_kv is None else cross_kv[i],
            positions, source_positions)
    return self.embed.attend(_final_norm(self, y), vocab_t)

  def _step(self, length: int) -> Optional[Array]:
    """Decode mode: the position `[1, 1]` int32 of this step (counted in the cache), or None
    while the cache is being created (a shape-only call over `length` positions)."""
    is_initialized = self.has_variable('cache', 'position')
    position = self.variable('cache', 'position', lambda: jnp.zeros((), jnp.int32))
    if not is_initialized:
      if length > self.cfg.max_len:
        raise ValueError(f'sequence length {length} exceeds config.max_len={self.cfg.max_len}')
      return None
    step = position.value
    position.value = step + 1
    return step[None, None]


class Transformer(nn.Module):
  """The full model; `apply` is a pure function of (params, batch).

  Methods (use with `model.apply(variables, ..., method=...)`):
    __call__(inputs, targets, [packing]): teacher-forced logits `[batch, tgt_len, vocab]`
      float32.
    encode(inputs, [segmentation, positions]): `[batch, src_len, d_model]`.
    decode(decoder_inputs, encoded, inputs): logits for the given decoder inputs.

  Packing (all `[batch, length]` int, None: unpacked): `inputs_segmentation`,
  `targets_segmentation`, `inputs_position`, `targets_position`, as the packed pipeline's
  batch keys of the same names.

  Attributes:
    cfg: the hyperparameters.
    attention_fn, feed_forward, positions, norm, residual, qk_transform, shared, embedding:
      the extension points (`parts`), the paper's by default; a variant sets some, e.g.
      `Transformer(cfg, feed_forward=SwiGLU)`.
  """
  cfg: TransformerConfig
  attention_fn: attention.AttentionFn = parts_lib.PAPER.attention_fn
  feed_forward: parts_lib.Factory = parts_lib.PAPER.feed_forward
  positions: Optional[parts_lib.Factory] = parts_lib.PAPER.positions
  norm: parts_lib.Factory = parts_lib.PAPER.norm
  residual: Callable[..., nn.Module] = parts_lib.PAPER.residual
  qk_transform: Optional[QKTransform] = parts_lib.PAPER.qk_transform
  shared: Optional[parts_lib.Factory] = parts_lib.PAPER.shared
  embedding: parts_lib.Factory = parts_lib.PAPER.embedding

  def __post_init__(self):
    if not isinstance(self.cfg, TransformerConfig):
      raise TypeError(f'Transformer: cfg is a {type(self.cfg).__name__}; expected a '
                      'TransformerConfig (TransformerConfig.from_config(config) for a run '
                      'config)')
    parts_lib.check_built(self)  # each part's contract, refused in one line when it breaks
    super().__post_init__()

  @property
  def parts(self) -> Parts:
    """This model's extension points, as one value."""
    return Parts(**{name: getattr(self, name) for name in parts_lib.NAMES})

  def setup(self):
    cfg = self.cfg
    # Both sides' embedding and the pre-softmax projection (§3.4); the target side's only when
    # the source has a vocabulary of its own (`cfg.source_vocab_size`), with its own table.
    self.shared_embedding = self.embedding(cfg, name='shared_embedding')
    source = self.shared_embedding
    if cfg.source_vocab_size is not None:
      self.source_embedding = self.embedding(cfg.source_side(), name='source_embedding')
      source = self.source_embedding
    shared = None if self.shared is None else self.shared(cfg, name='shared')
    self.encoder = Encoder(cfg, source, self.parts, shared)
    self.decoder = Decoder(cfg, self.shared_embedding, self.parts, shared)

  def encode(self, inputs: Array, segmentation: Optional[Array] = None,
             positions: Optional[Array] = None) -> Array:
    return self.encoder(inputs, segmentation, positions)

  def vocab_transposed(self) -> Array:
    """The pre-softmax matrix as `[d_model, vocab]` (the embedding part's `transposed()`),
    what `decode(..., vocab_t=)` takes: computed once per decoded batch."""
    return self.shared_embedding.transposed()

  def embedding_tables(self) -> Tuple[Array, Array]:
    """(input embedding, pre-softmax projection), each `[vocab, d_model]` as stored
    (the embedding part's `tables()`): one array twice when tied."""
    return self.shared_embedding.tables()

  def decode(self, decoder_inputs: Array, encoded: Optional[Array], inputs: Array,
             cross_kv=None, vocab_t: Optional[Array] = None, **packing) -> Array:
    return self.decoder(decoder_inputs, encoded, inputs, cross_kv, vocab_t, **packing)

  def __call__(self, inputs: Array, targets: Array,
               inputs_segmentation: Optional[Array] = None,
               targets_segmentation: Optional[Array] = None,
               inputs_position: Optional[Array] = None,
               targets_position: Optional[Array] = None) -> Array:
    if targets_segmentation is None:
      if not (inputs_segmentation is None and inputs_position is None and
              targets_position is None):
        raise ValueError('packed rows need targets_segmentation too')
      return self.decode(shift_right(targets, self.cfg.decoder_start_id), self.encode(inputs),
                         inputs)
    encoded = self.encode(inputs, inputs_segmentation, inputs_position)
    return self.decode(shift_right(targets, self.cfg.decoder_start_id,
                                   segmentation=targets_segmentation), encoded,
                       inputs, segmentation=targets_segmentation, positions=targets_position,
                       inputs_segmentation=inputs_segmentation)


ModelLike = Union[TransformerConfig, 'Transformer']


def as_model(model: ModelLike, **cfg_changes) -> 'Transformer':
  """The model a builder works with: `model` itself (a `Transformer`, its variant or subclass,
  with its extension points) or, for a `TransformerConfig`, the paper's `Transformer(cfg)`;
  `cfg_changes` (e.g. `decode=True`) replace fields of its config, nothing else changes."""
  if isinstance(model, TransformerConfig):
    model = Transformer(model)
  elif not isinstance(model, Transformer):
    raise TypeError(f'model is a {type(model).__name__}; expected a Transformer or a '
                    'TransformerConfig')
  return model.clone(cfg=model.cfg.replace(**cfg_changes)) if cfg_changes else model


def init_params(model: ModelLike, rng: Array, batch: int = 1, length: int = 8):
  """Initial parameters (a nested dict of float32 arrays) of `model` (or `Transformer(cfg)`).

  `rng` is a PRNG key (`jax.random.PRNGKey(seed)` or `jax.random.key(seed)`); `batch` and
  `length` (>= 1) the shape of the dummy batch it traces. One compiled program, bit for bit
  the parameters training starts from (`parallel.create_train_state`)."""
  check_rng('init_params', rng)
  batch = check_int('init_params', 'batch', batch, minimum=1)
  length = check_int('init_params', 'length', length, minimum=1)
  return _init_params(as_model(model, deterministic=True, decode=False), batch, length, rng)


@module_jit.jit_on_module(static_argnums=(1, 2))
def _init_params(net: nn.Module, batch: int, length: int, rng: Array):
  dummy = jnp.ones((batch, length), jnp.int32)
  # Plain arrays: the logical axes the parts declare (`logical_axes.py`) are read apart.
  return nn.meta.unbox(net.init(rng, dummy, dummy)['params'])


def param_shapes(model: ModelLike):
  """Parameter shapes without computing anything: a tree of `jax.ShapeDtypeStruct`."""
  return jax.eval_shape(lambda rng: init_params(model, rng), jax.random.PRNGKey(0))


def count_params(tree) -> int:
  """Total number of scalars in a parameter (or shape) tree."""
  leaves = jax.tree_util.tree_leaves(tree)
  bad = next((x for x in leaves if not hasattr(x, 'shape')), None)
  if bad is not None or isinstance(tree, (str, bytes)):
    raise TypeError(f'count_params: tree holds a {type(bad).__name__}; expected a tree of '
                    'arrays (a params tree, or param_shapes(...))')
  return sum(math.prod(x.shape) for x in leaves)
