"""The model's hyperparameters (§3, Table 3): one frozen dataclass, `TransformerConfig`.

Modes derive from it with `.replace()` (decode, deterministic, capture_attention); a run config
(`configs/default.py` keys) becomes one with `TransformerConfig.from_config`, which validates.
"""

import dataclasses
from typing import Any, Optional

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Everything the model needs, frozen; modes derive by `dataclasses.replace`.

  Build it from a run configuration with `TransformerConfig.from_config(cfg)`, which validates.
  """
  vocab_size: int = 37000
  d_model: int = 512
  d_ff: int = 2048
  num_heads: int = 8
  d_k: int = 64
  d_v: int = 64
  num_layers: int = 6
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.0
  positional: str = 'sinusoidal'
  norm_position: str = 'post'
  max_len: int = 512
  dtype: Any = jnp.float32
  deterministic: bool = False
  decode: bool = False
  attention_impl: Optional[str] = None
  # Sow every attention layer's weights into 'intermediates' (see `attention_maps`); off in
  # training and decoding, whose fused attention path it would replace.
  capture_attention: bool = False
  # Rematerialisation of each encoder/decoder layer on the backward pass (`REMAT_POLICIES`);
  # decode mode (the cache) never remats.
  remat_policy: str = 'none'
  # Run each stack's N layers as one `jax.lax.scan` (`stack.py`): the same parameter tree and
  # numbers to float tolerance, one compiled layer body instead of N (base on v5e:2x4: ~3x
  # less compile CPU per bucket shape), but about twice the step's HBM temporaries, and not
  # bit-identical to the unrolled stack; off by default (`config.scan_layers`).
  scan_layers: bool = False

  @classmethod
  def from_config(cls, config, **overrides) -> 'TransformerConfig':
    """Validated model config from a run config (`configs/default.py` keys)."""
    from t2t_jax import config as config_lib  # local import: config imports this module
    config_lib.validate(config)
    heads = config.num_heads
    return cls(
        vocab_size=config.vocab_size, d_model=config.d_model, d_ff=config.d_ff,
        num_heads=heads, d_k=config.d_k or config.d_model // heads,
        d_v=config.d_v or config.d_model // heads, num_layers=config.num_layers,
        dropout_rate=config.dropout_rate, attention_dropout_rate=config.attention_dropout_rate,
        positional=config.positional, norm_position=config.norm_position,
        max_len=config.max_len, dtype=jnp.dtype(config.dtype),
        attention_impl=config.attention_impl or None, remat_policy=config.remat_policy,
        scan_layers=bool(config.scan_layers), **overrides)

  def replace(self, **changes) -> 'TransformerConfig':
    return dataclasses.replace(self, **changes)
