"""What a model's parameters (and, where it can tell, its code) say about it, read as
CTranslate2 needs it, and the refusals of what CTranslate2 cannot express: `layout` reads the
layer counts of each stack, the query and key/value heads and the head width from the tree
(never from `cfg` alone: a subclass may build its stacks otherwise, grouped-query attention
projects keys and values to fewer heads); `ReadTracker` lets `build_spec` refuse what it did
not place; `embedding_tables` reads the embedding and pre-softmax matrices through the
model's embedding part; `check_embedding_scale` probes it for the sqrt(d_model) scale its
config says.
"""

import dataclasses
import itertools
from collections.abc import Mapping
from typing import List

import numpy as np

from t2t_jax.export.common import ExportError
from t2t_jax.model import transformer as model


@dataclasses.dataclass(frozen=True)
class Layout:
  """What the parameter tree says about the model, as CTranslate2's spec needs it: the
  layers of each stack (a subclass may build them apart from `cfg.num_layers`), the query
  and key/value heads (grouped-query attention projects keys and values to fewer) and the
  head width."""
  encoder_layers: int
  decoder_layers: int
  num_heads: int
  kv_heads: int
  head_dim: int


def _layers(params, side: str) -> int:
  """How many `layer_0`, `layer_1`, ... the `side` stack of `params` holds."""
  stack = params.get(side) if isinstance(params, Mapping) else None
  if not isinstance(stack, Mapping):
    raise ExportError(f'the parameters have no {side} stack: not a t2t_jax Transformer\'s '
                      'parameter tree')
  return sum(1 for _ in itertools.takewhile(lambda i: f'layer_{i}' in stack,
                                            itertools.count()))


def layout(cfg: model.TransformerConfig, params) -> Layout:
  """The `Layout` of `params`, read from the tree (not `cfg`); raises ExportError for what
  CTranslate2 cannot express: d_k != d_v, a stack without layers, layers whose head counts
  differ (CTranslate2 has one per model)."""
  counts = {side: _layers(params, side) for side in ('encoder', 'decoder')}
  if not all(counts.values()):
    raise ExportError(f'the parameters hold {counts["encoder"]} encoder and '
                      f'{counts["decoder"]} decoder layers: CTranslate2 needs both stacks')
  shapes = set()
  for side, n in counts.items():
    for i in range(n):
      layer = params[side][f'layer_{i}']
      for block in ('self_attention', 'cross_attention')[:1 if side == 'encoder' else 2]:
        a = layer.get(block, {})
        try:
          q, k, v = (np.shape(a[name]['kernel']) for name in ('query', 'key', 'value'))
        except (KeyError, TypeError):
          raise ExportError(f'{side}/layer_{i}/{block} has no query, key and value kernels: '
                            'CTranslate2 runs the paper\'s attention') from None
        shapes.add((q[1], k[1], q[2], v[2]))
  if len(shapes) > 1:
    raise ExportError(f'the attention layers differ in (heads, kv heads, d_k, d_v): '
                      f'{sorted(shapes)}; CTranslate2 has one of each per model')
  [(heads, kv_heads, d_k, d_v)] = shapes
  if d_k != d_v or cfg.d_k != cfg.d_v:
    raise ExportError(f'CTranslate2 cannot express d_k={max(d_k, cfg.d_k)} != d_v='
                      f'{max(d_v, cfg.d_v)}: its attention has one head width for queries, '
                      'keys and values')
  return Layout(counts['encoder'], counts['decoder'], heads, kv_heads, d_k)


def check_expressible(cfg: model.TransformerConfig, params) -> Layout:
  """Raises ExportError naming the first thing of `params` (and `cfg`) CTranslate2 cannot
  express; returns their `Layout`. What `build_spec` leaves unread is refused there."""
  shape = layout(cfg, params)
  if cfg.positional == 'learned':
    for side in ('encoder', 'decoder'):
      rows = params[side]['positions']['positions'].shape[0]
      if rows < cfg.max_len:
        raise ExportError(f'the learned {side} position table has {rows} rows but max_len='
                          f'{cfg.max_len}: CTranslate2 cannot extend learned positions')
  return shape


def embedding_tables(cfg: model.TransformerConfig, params, read: set):
  """(input embedding, pre-softmax projection), each `[vocab, d_model]` float32, read through
  the model's embedding part (`Transformer.embedding_tables`), never by parameter name; the
  leaves they came from are added to `read` (a `ReadTracker`'s record). One array twice when
  tied (`share_embeddings`)."""
  net = model.as_model(cfg, deterministic=True, decode=False)
  tables = net.apply({'params': params}, method=model.Transformer.embedding_tables)
  # Writable copies (CTranslate2's quantizer scales in place; jax's arrays read-only), one
  # array for both when tied, so that the spec holds it once.
  source = np.array(tables[0], np.float32)
  target = source if tables[1] is tables[0] else np.array(tables[1], np.float32)
  _mark_read(params, 'shared_embedding', (source, target), read)
  return source, target


def source_table(cfg: model.TransformerConfig, params, read: set) -> np.ndarray:
  """The encoder's own embedding `[source_vocab_size, d_model]` float32 of a model with
  separate vocabularies (`cfg.source_vocab_size`), read through its embedding part
  (`source_embedding`) as `embedding_tables` reads the target's; its leaf added to `read`."""
  net = model.as_model(cfg, deterministic=True, decode=False)
  tables = net.apply({'params': params}, method=lambda m: m.source_embedding.tables())
  table = np.array(tables[0], np.float32)
  _mark_read(params, 'source_embedding', (table,), read)
  return table


def _mark_read(params, part_name: str, tables, read: set) -> None:
  """Adds to `read` the leaves of `params[part_name]` equal to one of `tables`: what the
  embedding part's `tables()` gave, found by value (its parameter names are its own)."""
  part = params.get(part_name) if isinstance(params, Mapping) else None
  for name, leaf in (part.items() if isinstance(part, Mapping) else ()):
    leaf = np.asarray(leaf) if not isinstance(leaf, Mapping) else None
    if leaf is not None and any(leaf.shape == t.shape and np.array_equal(leaf, t)
                                for t in tables):
      read.add(f'{part_name}/{name}')


def check_embedding_scale(transformer: model.Transformer, params) -> None:
  """Raises ExportError when the model's `shared_embedding` does not multiply by
  sqrt(d_model) when `cfg.scale_embeddings` says it does, or does when it says not
  (CTranslate2's `scale_embeddings`, §3.4): a subclass may have replaced it. A model without
  one passes here; the export's self-check still translates with it."""
  cfg = transformer.cfg
  ids = np.arange(min(cfg.vocab_size, 8), dtype=np.int32)[None]
  # float32 activations: a bfloat16 model's rounding is no missing scale.
  net = transformer.clone(cfg=cfg.replace(deterministic=True, decode=False, dtype='float32'))
  try:
    got = net.apply({'params': params}, ids, method=lambda m, x: m.shared_embedding(x))
    table, _ = net.apply({'params': params}, method=lambda m: m.shared_embedding.tables())
  except AttributeError:  # no `shared_embedding`: nothing to read here
    return
  scale = np.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
  table = np.asarray(table, np.float32)[ids]
  if not np.allclose(np.asarray(got, np.float32), table * scale, rtol=1e-4, atol=1e-6):
    said = (f'multiply the embeddings by sqrt(d_model={cfg.d_model})' if cfg.scale_embeddings
            else 'leave the embeddings unscaled')
    raise ExportError(f'the model\'s shared_embedding does not {said} as its config '
                      '(scale_embeddings) and the CTranslate2 model would: export it with '
                      '--format=stablehlo, which runs the model\'s own code')


class ReadTracker(Mapping):
  """A parameter (sub)tree that records the path of every array read from it, so that
  `build_spec` can refuse what it did not place: parameters CTranslate2 has no place for
  (an untied output projection, a variant's extra weights) would otherwise be dropped."""

  def __init__(self, tree, read: set, prefix: str = ''):
    self._tree, self._read, self._prefix = tree, read, prefix

  def __getitem__(self, key):
    path = f'{self._prefix}{key}'
    if key not in self._tree:
      raise ExportError(f'the parameters have no {path}, which CTranslate2\'s Transformer '
                        'needs')
    value = self._tree[key]
    if isinstance(value, Mapping):
      return ReadTracker(value, self._read, f'{path}/')
    self._read.add(path)
    return value

  def __contains__(self, key) -> bool:  # Mapping's would read the entry (and raise)
    return key in self._tree

  def __iter__(self):
    return iter(self._tree)

  def __len__(self):
    return len(self._tree)


def leaf_paths(tree, prefix: str = '') -> List[str]:
  return [p for key, value in tree.items()
          for p in (leaf_paths(value, f'{prefix}{key}/') if isinstance(value, Mapping)
                    else [f'{prefix}{key}'])]


def refuse_unread(params, read: set) -> None:
  """Raises ExportError naming the parameters of `params` not in `read` (a `ReadTracker`'s
  record): CTranslate2's Transformer has no place for them, so writing the model without them
  would translate otherwise than the model."""
  unread = sorted(set(leaf_paths(params)) - read)
  if unread:
    raise ExportError(f'CTranslate2\'s Transformer has no place for the parameters '
                      f'{", ".join(unread[:3])}{" ..." if len(unread) > 3 else ""} (an untied '
                      'output projection, a variant\'s own weights): export the model with '
                      '--format=stablehlo, which runs its own code')
