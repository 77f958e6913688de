"""The model's extension points: the parts a model variant replaces, the paper's by default.

`Transformer(cfg, attention_fn=..., feed_forward=..., positions=..., norm=..., residual=...)`
builds a variant; every builder (`init_params`, `init_cache`, `decode_context`,
`decode_step`, `Translator`, `attention_weights`, the train and eval steps, the StableHLO
export) takes that model, so training, decoding, capture and export all run the variant
(docs/architecture.md, "A new model variant"). Each part is a factory called with the model
config and a module name; the name fixes where its parameters live in the tree.

  attention_fn: Eq. 1 (`attention.AttentionFn`), called by every attention layer on every
    path; default `attention.dot_product_attention`.
  feed_forward(cfg, name=) -> module `[batch, length, d_model]` -> same (§3.3, Eq. 2).
  positions(cfg, name=) -> module `(x [batch, length, d_model], positions [batch or 1,
    length] int32 or None) -> x`, applied to the embeddings (§3.5); None: no positions are
    added (a variant whose attention_fn uses `query_positions`/`key_positions`, e.g. rotary
    positions, instead).
  norm(cfg, name=) -> module `[..., d_model]` -> same: every residual block's
    normalisation, and the final one of a pre-norm stack (LayerNorm, §3.1).
  residual(cfg, norm, name=) -> module `(x, sublayer, *, deterministic) -> x`: one residual
    sub-layer around `sublayer` (§3.1, §5.4), given the `norm` factory. The module declares
    where it normalises in an attribute `norm_position`, 'post' or 'pre' (`layers.Residual`
    has it as a field); each stack ends with a final `norm` exactly when it is 'pre'
    (`norm_position` below), whatever the config's `norm_position` says.
  qk_transform: `multi_head_attention.QKTransform`, `(x, positions, *, kind, role) -> x` on
    every attention's projected queries and keys (role 'query' or 'key'), before Eq. 1 and
    before a key is cached: a key is transformed once (rotary positions); None: nothing.
  embedding(cfg, name=) -> module with `__call__(ids [batch, length] int32) -> [batch,
    length, d_model]` (the source and target embeddings, §3.4), `attend(x [..., d_model],
    transposed=None) -> [..., vocab]` float32 (the pre-softmax projection), `transposed()
    -> [d_model, vocab]` (what `attend` takes, precomputed once per decoded batch) and
    `tables() -> (input [vocab, d_model], output [vocab, d_model])` as stored (what the
    CTranslate2 export writes). Built once, at the top of the model, as `shared_embedding`;
    default `layers.SharedEmbedding`, tied and scaled as `cfg.share_embeddings` and
    `cfg.scale_embeddings` say.
  shared(cfg, name=) -> module `(query_positions, key_positions, *, kind) -> anything`: state
    every layer shares, e.g. T5's one relative-position bias table. Built once, at the top of
    the model (its parameters under 'shared'); every attention layer calls it with its
    positions and kind and hands the result to `attention_fn` as `shared=`. None: no shared
    part (and no `shared=` keyword). A model with one runs its stacks unrolled
    (`scan_layers` is ignored).

Where parameters live: a part built by a factory under the name it is given (`ffn`,
`shared_embedding`,
`attention_block/norm`, `positions`, ...); `attention_fn` and `qk_transform` are called inside
each layer's `MultiHeadAttention`, so a linen module they build there is that layer's own
(`.../layer_3/self_attention/<ModuleName>_0`); `shared`'s are the model's, once.
"""

import dataclasses
import functools
from typing import Callable, Optional

import flax.linen as nn
from flax.linen import module as linen_module

from t2t_jax.model import attention, layers
from t2t_jax.model.multi_head_attention import QKTransform

Factory = Callable[..., nn.Module]


def feed_forward(cfg, *, name: str) -> nn.Module:
  """The paper's FFN (Eq. 2): ReLU between two dense layers of d_ff and d_model units."""
  return layers.FeedForward(cfg.d_ff, cfg.d_model, cfg.dtype, name=name)


def positions(cfg, *, name: str) -> nn.Module:
  """Sinusoids (§3.5) or learned positions (Table 3 row E), as `cfg.positional` says."""
  return layers.AddPositions(cfg.max_len, cfg.positional, name=name)


def embedding(cfg, *, name: str) -> nn.Module:
  """The shared embedding (§3.4), tied to the pre-softmax projection and scaled by
  sqrt(d_model) unless `cfg.share_embeddings` / `cfg.scale_embeddings` say otherwise."""
  return layers.SharedEmbedding(cfg.vocab_size, cfg.d_model, cfg.dtype,
                                tie=cfg.share_embeddings, scale=cfg.scale_embeddings, name=name)


def layer_norm(cfg, *, name: str) -> nn.Module:
  """`layers.layer_norm` (epsilon 1e-6, float32 parameters) in the config's dtype."""
  return layers.layer_norm(cfg.dtype, name=name)


def residual(cfg, norm: Factory, *, name: str) -> nn.Module:
  """Post-norm (the paper) or pre-norm residual blocks with dropout, as `cfg.norm_position`."""
  return layers.Residual(cfg.norm_position, cfg.dropout_rate, cfg.dtype,
                         norm=functools.partial(norm, cfg), name=name)


@dataclasses.dataclass(frozen=True)
class Parts:
  """One model's parts (see the module docstring); the defaults are the paper's."""
  attention_fn: attention.AttentionFn = attention.dot_product_attention
  feed_forward: Factory = feed_forward
  positions: Optional[Factory] = positions
  norm: Factory = layer_norm
  residual: Callable[..., nn.Module] = residual
  qk_transform: Optional[QKTransform] = None
  shared: Optional[Factory] = None
  embedding: Factory = embedding


def norm_position(parts: Parts, cfg) -> str:
  """'pre' or 'post': where `parts.residual`'s blocks normalise, as the module it builds
  declares (its `norm_position` attribute); the encoder and decoder stacks end with a final
  `parts.norm` exactly when it is 'pre'. Raises ValueError in one line when the module does
  not declare 'pre' or 'post'."""
  # Built unbound (no parent module), only to be asked: nothing is registered or initialised.
  stack = linen_module._context.module_stack  # noqa: SLF001
  stack.append(None)
  try:
    block = parts.residual(cfg, parts.norm, name='residual')
  finally:
    stack.pop()
  position = getattr(block, 'norm_position', None)
  if position not in ('pre', 'post'):
    factory = getattr(parts.residual, '__name__', repr(parts.residual))
    raise ValueError(f"residual part {factory}: its module ({type(block).__name__}) must "
                     f"declare norm_position 'pre' or 'post' (the stacks end with a final norm "
                     f"when 'pre'), got {position!r}")
  return position


PAPER = Parts()
NAMES = tuple(field.name for field in dataclasses.fields(Parts))
