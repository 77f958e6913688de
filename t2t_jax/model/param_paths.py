"""Parameter paths as people write them: 'decoder/layer_0/ffn/wi/kernel' (`--mode=info`,
`--config.trainable`, checkpoint mismatch messages), and the trainable part of a tree that
`--config.trainable` (a regular expression matching whole paths) names."""

from typing import Any, Dict, Tuple

import jax

from t2t_jax.choices import compile_pattern


def path_name(path) -> str:
  """The '/'-joined keys of a `jax.tree_util` key path (dict keys, attribute names, indices)."""
  return '/'.join(str(getattr(k, 'key', getattr(k, 'name', getattr(k, 'idx', k))))
                  for k in path)


def shapes_by_path(tree: Any) -> Dict[str, Tuple[int, ...]]:
  """{'encoder/layer_0/ffn/wi/kernel': shape} of a tree of arrays (or shape structs), in tree
  order."""
  return {path_name(path): tuple(x.shape)
          for path, x in jax.tree_util.tree_leaves_with_path(tree)}


def trainable_mask(params: Any, pattern: str) -> Any:
  """A tree of bools shaped as `params`: True where `pattern` matches the leaf's whole path
  ('' matches every leaf)."""
  if not pattern:
    return jax.tree_util.tree_map(lambda _: True, params)
  expression = compile_pattern(pattern)
  return jax.tree_util.tree_map_with_path(
      lambda path, _: expression.fullmatch(path_name(path)) is not None, params)


def counts(params: Any, pattern: str) -> Tuple[int, int]:
  """(trainable, frozen) numbers of parameters (scalars, not leaves) of `params` (arrays or
  `jax.ShapeDtypeStruct`s)."""
  mask = jax.tree_util.tree_leaves(trainable_mask(params, pattern))
  sizes = [int(x.size) for x in jax.tree_util.tree_leaves(params)]
  trainable = sum(n for n, m in zip(sizes, mask) if m)
  return trainable, sum(sizes) - trainable
