"""The values of the model's enumerated options, written once, and the error for a wrong one.

Both `TransformerConfig` (its fields are annotated with these `Literal`s and checked against
them) and the run config's `config.validate` read them: at the bottom of the package, with no
imports beyond the standard library, so that the host-side config needs no jax and the model
needs no ml_collections.
"""

import re
from typing import Literal

Positional = Literal['sinusoidal', 'learned']  # §3.5: the fixed sinusoids, or learned (Table 3 E)
NormPosition = Literal['post', 'pre']  # §3.1: LayerNorm(x + Sublayer(x)), or x + Sublayer(LN(x))
# The keys of `t2t_jax.model.stack.REMAT_POLICIES` (jax checkpoint policies), and 'none'.
RematPolicy = Literal['none', 'full', 'dots_saveable', 'dots_with_no_batch_dims_saveable']
# `jax.nn.dot_product_attention(implementation=...)`; None (a run config's '') lets jax choose.
AttentionImpl = Literal['xla', 'cudnn']
DTypeName = Literal['float32', 'bfloat16']  # activations; parameters are always float32


class ConfigError(ValueError):
  """A configuration key is unknown or has an invalid value (main.py: one line `error: ...`)."""


def compile_pattern(pattern: str) -> 're.Pattern':
  """The compiled `trainable` expression, or a one-line ConfigError naming the key."""
  try:
    return re.compile(pattern)
  except re.error as e:
    raise ConfigError(f"config key 'trainable': {pattern!r} is not a regular expression "
                      f'({e}); expected one over parameter paths, e.g. \'decoder/.*\'') from None
