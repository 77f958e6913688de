"""Training part of the model (`--config.trainable`): a regular expression over parameter
paths; every other parameter is frozen.

A parameter's path is its keys joined by '/', as `--mode=info` lists them
(`decoder/layer_0/ffn/wi/kernel`, `shared_embedding/embedding`); it is trainable when the
expression matches the whole path (`re.fullmatch`), so `'decoder/.*'` trains the decoder
stack and leaves the encoder and the shared embedding (the paper ties it to both stacks,
§3.4) as they are. '' (the default) trains everything and changes nothing.

`frozen(tx, pattern)` wraps an optimizer: the inner one sees only the trainable leaves
(`optax.masked`), so the frozen ones get no optimizer state at all (no Adam moments) and do
not count in a clipped gradient's global norm; their update is -0.0, which IEEE addition
leaves every value bitwise unchanged by (x + -0.0 == x for every x, +0.0 and -0.0 included;
a +0.0 update would turn a -0.0 parameter into +0.0).
"""

from typing import Any, List

import jax
import jax.numpy as jnp
import optax

from t2t_jax.choices import ConfigError, compile_pattern
from t2t_jax.model.param_paths import counts, path_name, trainable_mask


def check_matches(params: Any, pattern: str) -> None:
  """Refuses, in one line, a `trainable` that matches no parameter (a typo would otherwise
  train nothing for the whole run), naming the top-level parameter names."""
  if not pattern or counts(params, pattern)[0]:
    return
  names: List[str] = sorted({path_name(p).split('/')[0]
                             for p, _ in jax.tree_util.tree_leaves_with_path(params)})
  raise ConfigError(f"config key 'trainable': {pattern!r} matches no parameter path (paths "
                    f"start with {', '.join(names)}, e.g. 'decoder/.*'; --mode=info lists "
                    'them)')


def frozen(tx: optax.GradientTransformation, pattern: str) -> optax.GradientTransformation:
  """`tx` over the parameters `pattern` matches; the others are left bitwise as they are and
  get no state (module docstring). '' returns `tx` itself (the same state tree as before)."""
  if not pattern:
    return tx
  compile_pattern(pattern)
  mask = lambda params: trainable_mask(params, pattern)  # noqa: E731
  inner = optax.masked(tx, mask)

  def update(updates, state, params=None):
    new, state = inner.update(updates, state, params)
    # optax.masked passes the frozen leaves' updates (their gradients) through: replaced.
    new = jax.tree_util.tree_map(lambda keep, u: u if keep else jnp.full_like(u, -0.0),
                                 mask(updates), new)
    return new, state

  return optax.GradientTransformation(inner.init, update)
