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
    `cfg.scale_embeddings` say. With separate vocabularies (`cfg.source_vocab_size`) it is
    the target side's, and built once more as `source_embedding` from `cfg.source_side()`:
    the encoder's (only its `__call__` is used).
  shared(cfg, name=) -> module `(query_positions, key_positions, *, kind) -> anything`: state
    every layer shares, e.g. T5's one relative-position bias table. Built once, at the top of
    the model (its parameters under 'shared'); every attention layer calls it with its
    positions and kind and hands the result to `attention_fn` as `shared=`. None: no shared
    part (and no `shared=` keyword). A model with one runs its stacks unrolled
    (`scan_layers` is ignored).

Each contract is checked when the model is built (`check_parts`, from `Transformer`): a part
without a method the model calls is named there, with the docs section of its contract, not
when a later mode first calls it.

Where parameters live: a part built by a factory under the name it is given (`ffn`,
`shared_embedding`,
`attention_block/norm`, `positions`, ...); `attention_fn` and `qk_transform` are called inside
each layer's `MultiHeadAttention`, so a linen module they build there is that layer's own
(`.../layer_3/self_attention/<ModuleName>_0`); `shared`'s are the model's, once.
"""

import dataclasses
import functools
import inspect
from typing import Callable, Optional

import flax.linen as nn
from flax.core.scope import Scope
from flax.linen import module as linen_module

from t2t_jax.model import attention, layers
from t2t_jax.model.multi_head_attention import QKTransform

Factory = Callable[..., nn.Module]


def feed_forward(cfg, *, name: str) -> nn.Module:
  """The paper's FFN (Eq. 2): ReLU between two dense layers of d_ff and d_model units."""
  return layers.FeedForward(cfg.d_ff, cfg.d_model, cfg.dtype, cfg.activation, name=name)


def positions(cfg, *, name: str) -> nn.Module:
  """Sinusoids (§3.5) or learned positions (Table 3 row E), as `cfg.positional` says."""
  return layers.AddPositions(cfg.max_len, cfg.positional, name=name)


def embedding(cfg, *, name: str) -> nn.Module:
  """The shared embedding (§3.4), tied to the pre-softmax projection and scaled by
  sqrt(d_model) unless `cfg.share_embeddings` / `cfg.scale_embeddings` say otherwise."""
  return layers.SharedEmbedding(cfg.vocab_size, cfg.d_model, cfg.dtype,
                                tie=cfg.share_embeddings, scale=cfg.scale_embeddings,
                                logits_bias=cfg.logits_bias, name=name)


def layer_norm(cfg, *, name: str) -> nn.Module:
  """`layers.layer_norm` (float32 parameters) in the config's dtype and epsilon."""
  return layers.layer_norm(cfg.dtype, name=name, epsilon=cfg.layer_norm_epsilon)


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


def _unbound(factory: Callable, *args, name: str):
  """`factory(*args, name=name)` built unbound (no parent module, whatever module is being
  set up around the call), only to be asked: nothing is registered or initialised."""
  stack = linen_module._context.module_stack  # noqa: SLF001
  stack.append(None)
  try:
    return factory(*args, name=name)
  finally:
    stack.pop()


def norm_position(parts: Parts, cfg) -> str:
  """'pre' or 'post': where `parts.residual`'s blocks normalise, as the module it builds
  declares (its `norm_position` attribute); the encoder and decoder stacks end with a final
  `parts.norm` exactly when it is 'pre'. Raises ValueError in one line when the module does
  not declare 'pre' or 'post'."""
  block = _unbound(parts.residual, cfg, parts.norm, name='residual')
  position = getattr(block, 'norm_position', None)
  if position not in ('pre', 'post'):
    factory = getattr(parts.residual, '__name__', repr(parts.residual))
    raise ValueError(f"residual part {factory}: its module ({type(block).__name__}) must "
                     f"declare norm_position 'pre' or 'post' (the stacks end with a final norm "
                     f"when 'pre'), got {position!r}")
  return position


PAPER = Parts()
NAMES = tuple(field.name for field in dataclasses.fields(Parts))


# Where each part's contract is written (named by `check_parts`' messages).
_EMBEDDING_DOCS = 'docs/extension_points.md, "Depth and embeddings"'
_VARIANT_DOCS = 'docs/architecture.md, "A new model variant"'
# The methods the model calls on what `embedding` builds: the forward pass (`__call__`,
# `attend`), decoding (`transposed`, once per batch) and the CTranslate2 export (`tables`).
EMBEDDING_METHODS = ('__call__', 'attend', 'transposed', 'tables')


def _label(factory) -> str:
  return getattr(factory, '__name__', None) or type(factory).__name__


def check_parts(parts: Parts, cfg) -> None:
  """Refuses, when a model is built, a part that breaks its contract (the module docstring):
  a function part (`attention_fn`, `qk_transform`) that is not callable, a factory that
  cannot be called as the model calls it, a module without a method the model calls
  (`EMBEDDING_METHODS` for `embedding`, `__call__` for the others) or a residual part without
  `norm_position`; so a part written before a method existed fails here, not when training
  is over and decoding first calls it. Each factory is built once, unbound; a factory that
  raises is left for the model's own call to report.

  Raises:
    TypeError: one line naming the part, the factory and the missing method or the expected
      call, and the docs section of the contract.
    ValueError: a residual part without `norm_position` 'pre' or 'post' (`norm_position`).
  """
  for name in ('attention_fn', 'qk_transform'):
    fn = getattr(parts, name)
    if not callable(fn) and not (fn is None and name == 'qk_transform'):
      raise TypeError(f'Transformer: {name} is a {type(fn).__name__}; expected a function '
                      f'({_VARIANT_DOCS})')
  probes = (('feed_forward', (cfg,), 'ffn'), ('positions', (cfg,), 'positions'),
            ('norm', (cfg,), 'norm'), ('residual', (cfg, parts.norm), 'residual'),
            ('shared', (cfg,), 'shared'), ('embedding', (cfg,), 'shared_embedding'))
  for part, args, module_name in probes:
    factory = getattr(parts, part)
    if factory is None and part in ('positions', 'shared'):
      continue
    docs = _EMBEDDING_DOCS if part == 'embedding' else _VARIANT_DOCS
    call = f"factory({', '.join(('cfg', 'norm')[:len(args)])}, name={module_name!r})"
    if not callable(factory):
      raise TypeError(f'Transformer: the {part} part is a {type(factory).__name__}; expected '
                      f'a factory called as {call} ({docs})')
    try:
      inspect.signature(factory).bind(*args, name=module_name)
    except TypeError as e:
      raise TypeError(f'Transformer: the {part} part {_label(factory)} cannot be called as '
                      f'{call} ({e}); expected that call ({docs})') from None
    except ValueError:
      pass  # no signature to read (a builtin): the model's call says
    try:
      module = _unbound(factory, *args, name=module_name)
    except Exception:  # noqa: BLE001  a user's factory: its own call reports it with context
      continue
    methods = EMBEDDING_METHODS if part == 'embedding' else ('__call__',)
    missing = [m for m in methods if not callable(getattr(module, m, None))]
    if missing:
      raise TypeError(f'Transformer: the {part} part {_label(factory)}: its module '
                      f'({type(module).__name__}) has no {", ".join(m + "()" for m in missing)}; '
                      f'the model calls {", ".join(m + "()" for m in methods)} ({docs})')
  norm_position(parts, cfg)


def check_built(model: nn.Module) -> None:
  """`check_parts` of a `Transformer` being built (its `__post_init__`): when it is made,
  cloned (`as_model`) or nested in a module of the user's; not when flax binds it for an
  `apply` (its parent then a `Scope`: checked when it was made)."""
  if not isinstance(model.parent, Scope):
    check_parts(model.parts, model.cfg)
