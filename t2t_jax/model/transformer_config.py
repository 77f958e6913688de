"""The model's hyperparameters (§3, Table 3): one frozen dataclass, `TransformerConfig`.

Modes derive from it with `.replace()` (decode, deterministic, capture_attention); a run config
(`configs/default.py` keys) becomes one with `TransformerConfig.from_config`. Every construction
(`.replace()` included) checks the fields, raising `ConfigError` (a ValueError) in one line.
"""

import dataclasses
import numbers
from typing import Literal, Optional, Tuple, Union, get_args, get_origin

import jax.numpy as jnp
from jax.typing import DTypeLike

from t2t_jax.choices import (Activation, AttentionImpl, ConfigError, DTypeName, NormPosition,
                             Positional, RematPolicy)

_POSITIVE = ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'd_k', 'd_v', 'num_layers',
             'max_len', 'num_kv_heads', 'num_encoder_layers', 'num_decoder_layers',
             'decoder_window', 'source_vocab_size')
_OPTIONAL = ('num_kv_heads', 'num_encoder_layers', 'num_decoder_layers',
             'decoder_window', 'source_vocab_size')  # None: follows (the window: unbounded)
_HEAD_WIDTHS = ('d_k', 'd_v')  # None: d_model / num_heads (h must divide d_model)

# Token ids the model reserves (transformer.py re-exports them): padding 0; on the decoder side
# EOS 1, which also serves as the start symbol. A vocabulary must hold them and a real token.
PAD_ID = 0
EOS_ID = 1
RESERVED_IDS = (PAD_ID, EOS_ID)
MIN_VOCAB_SIZE = max(RESERVED_IDS) + 2
_RATES = ('dropout_rate', 'attention_dropout_rate')


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Everything the model needs, frozen; modes derive by `.replace()` (`dataclasses.replace`).

  Build it from a run configuration with `TransformerConfig.from_config(cfg)`. Each field is
  checked on construction; a wrong one raises `ConfigError` naming the field and what it takes.

  Attributes:
    vocab_size: rows of the one embedding shared by source, target and the pre-softmax
      projection (§3.4; the shared BPE vocabulary of §5.1: 37000 EN-DE, 32000 EN-FR); > 2:
      ids 0 (padding) and 1 (EOS/BOS) are reserved. With `source_vocab_size`: the target
      side's (decoder embedding and pre-softmax projection).
    source_vocab_size: separate vocabularies (`config.share_vocab=False`): rows of the
      encoder's own embedding (`source_embedding/embedding`, `[source_vocab_size, d_model]`),
      even when equal to vocab_size; needs share_embeddings=False (one matrix cannot embed
      two vocabularies). None (the default): the source shares the target's vocabulary and
      embedding (§3.4, §5.1). Read `input_vocab_size` for the encoder's number.
    d_model: width of the embeddings and of every sub-layer's output (§3.1; 512 base, 1024 big).
    d_ff: inner width of the position-wise feed-forward network (§3.3, Eq. 2; 2048 base).
    num_heads: h, the parallel attention heads (§3.2.2; 8 base, 16 big).
    d_k: per-head query/key width (§3.2.2; 64 in the base model); None (the default): d_model
      / num_heads (h must then divide d_model), as `from_config` and the paper; set it apart from d_model / h for Table 3
      rows A and B. Resolved on construction: `.replace(d_model=...)` keeps the number (pass
      d_k=None to derive it again).
    d_v: per-head value width (§3.2.2; 64 in the base model), the heads' outputs concatenate
      to h * d_v before W^O; None (the default): d_model / num_heads, as d_k.
    num_layers: N, the identical layers of the encoder and, as many, of the decoder (§3.1; 6);
      the shorthand for both stacks.
    num_encoder_layers: the encoder's layers apart from the decoder's (fairseq's
      --encoder-layers, e.g. a deep encoder and a shallow decoder); None (the default):
      num_layers. Stored as None when equal to num_layers, so the paper's config is unchanged
      and `.replace(num_layers=...)` moves both; read `encoder_layers` for the number.
    num_decoder_layers: the decoder's layers, as num_encoder_layers (fairseq's
      --decoder-layers); read `decoder_layers` for the number.
    share_embeddings: one matrix for the source and target embeddings and the pre-softmax
      projection (§3.4, the default); False: the pre-softmax projection is a matrix of its
      own (`shared_embedding/projection`, `[vocab, d_model]`), untied from the embeddings
      (which source and target still share: one vocabulary; with `source_vocab_size` the
      encoder has its own, and `shared_embedding` is the target side's).
    scale_embeddings: multiply the embeddings by sqrt(d_model) (§3.4, the default); False:
      the table's rows as they are (fairseq's --no-scale-embedding).
    dropout_rate: P_drop on each sub-layer's output and on embeddings + positions, in [0, 1)
      (§5.4; 0.1 base, 0.3 big).
    attention_dropout_rate: dropout on the attention weights, in [0, 1) (not in the paper; 0).
    positional: 'sinusoidal', the fixed encoding of §3.5, 'learned' embeddings (Table 3 E),
      or 'sinusoidal_halves', §3.5's sinusoids with the sines in the first d_model/2 columns
      and the cosines in the rest (Marian's layout; a permutation of the paper's columns).
    activation: the feed-forward nonlinearity (§3.3, Eq. 2): 'relu' (the paper), 'swish'
      (x * sigmoid(x); OPUS-MT's) or 'gelu' (the exact, erf form).
    attention_bias: biases on W^Q, W^K, W^V and W^O (`query/bias`, ...); False: none, as the
      paper's equations (§3.2.2). Models made by fairseq, Marian and transformers have them.
    logits_bias: a `[vocab]` bias added to the pre-softmax logits (`shared_embedding/
      logits_bias`; Marian's `final_logits_bias`); False: none (§3.4).
    layer_norm_epsilon: epsilon of every LayerNorm (§3.1): 1e-6 (tensor2tensor's, the
      default); 1e-5 is PyTorch's (fairseq, Marian, transformers).
    decoder_start_id: the id the decoder reads before the first target token (§3.1's
      "shifted right"): EOS (1, the default, as tensor2tensor); 0 (padding) is Marian's.
    norm_position: 'post', LayerNorm(x + Sublayer(x)) as §3.1 writes it, or 'pre',
      x + Sublayer(LayerNorm(x)) with a final LayerNorm after each stack.
    max_len: the most positions (tokens) a sequence may have: rows of the position table.
    dtype: activation dtype, float32 or bfloat16 (parameters are always float32); any spelling
      `jnp.dtype` takes (`jnp.bfloat16`, `np.dtype('bfloat16')`, 'bfloat16'), stored as the
      numpy dtype so that equal configs hash equal.
    deterministic: no dropout (evaluation, decoding).
    decode: autoregressive decoding, one position per call, with a key/value cache
      (`init_cache`, `decode_step`).
    attention_impl: `jax.nn.dot_product_attention`'s implementation, 'xla' or 'cudnn'; None
      lets jax choose for the backend.
    capture_attention: sow every attention layer's weights into 'intermediates' (see
      `attention_maps`); off in training and decoding, whose fused attention path it would
      replace.
    remat_policy: rematerialisation of each encoder/decoder layer on the backward pass: 'none'
      or a key of `REMAT_POLICIES`; decode mode (the cache) never remats.
    scan_layers: run each stack's N layers as one `jax.lax.scan` (`stack.py`): the same
      parameter tree and numbers to float tolerance, one compiled layer body instead of N (base
      on v5e:2x4: ~3x less compile CPU per bucket shape), but about twice the step's HBM
      temporaries, and not bit-identical to the unrolled stack; off by default
      (`config.scan_layers`).
    num_kv_heads: the key/value heads of every attention layer, a divisor of num_heads; None
      (the default): num_heads, the paper. Fewer is grouped-query attention (1: multi-query):
      W^K and W^V project to num_kv_heads heads, the decoding cache holds that many, and each
      serves num_heads // num_kv_heads query heads (`attention` module docstring). Stored as
      None when equal to num_heads, so `.replace(num_heads=...)` of the paper's model keeps
      one key/value head per query head; read `kv_heads` for the number.
    decoder_window: W, how far back the decoder's self-attention looks: position i attends
      to positions i - W + 1 .. i (a sliding window, as Longformer's and Mistral's local
      attention); None (the default) or 0: every earlier position, the paper. Training
      masks the band (`attention.sliding_window_mask`), and decoding keeps a ring buffer of
      W key/value slots per layer (slot = position % W) instead of max_decode_len
      (`incremental.cache_slots`). Stored as None when 0.
  """
  vocab_size: int = 37000
  d_model: int = 512
  d_ff: int = 2048
  num_heads: int = 8
  d_k: Optional[int] = None
  d_v: Optional[int] = None
  num_layers: int = 6
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.0
  positional: Positional = 'sinusoidal'
  norm_position: NormPosition = 'post'
  max_len: int = 512
  dtype: DTypeLike = jnp.float32
  deterministic: bool = False
  decode: bool = False
  attention_impl: Optional[AttentionImpl] = None
  capture_attention: bool = False
  remat_policy: RematPolicy = 'none'
  scan_layers: bool = False
  num_kv_heads: Optional[int] = None
  num_encoder_layers: Optional[int] = None
  num_decoder_layers: Optional[int] = None
  share_embeddings: bool = True
  scale_embeddings: bool = True
  decoder_window: Optional[int] = None
  source_vocab_size: Optional[int] = None
  activation: Activation = 'relu'
  attention_bias: bool = False
  logits_bias: bool = False
  layer_norm_epsilon: float = 1e-6
  decoder_start_id: int = EOS_ID

  def __post_init__(self):
    # 0 is None: an unbounded window (the paper's), one vocabulary for both sides.
    for name in ('decoder_window', 'source_vocab_size'):
      value = getattr(self, name)
      if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value == 0:
        object.__setattr__(self, name, None)
    for field in dataclasses.fields(self):
      value, allowed = getattr(self, field.name), _allowed(field.type)
      if allowed is not None and not (isinstance(value, (str, type(None))) and value in allowed):
        _fail(field.name, value, 'one of ' + ', '.join(map(repr, allowed)))
      if field.type is bool and not isinstance(value, bool):
        _fail(field.name, value, 'True or False')
    for name in _HEAD_WIDTHS:
      if getattr(self, name) is None and _positive_int(self.d_model) and _positive_int(
          self.num_heads):
        width, rest = divmod(int(self.d_model), int(self.num_heads))
        if width <= 0 or rest:
          # As `config.validate` refuses it: a floored width would silently give h * d_v !=
          # d_model; Table 3 rows A and B set d_k and d_v.
          _fail('num_heads', self.num_heads, f'a divisor of d_model={self.d_model} while '
                f'{name} is None (None means d_model / num_heads); or set d_k and d_v')
        object.__setattr__(self, name, width)
    for name in _POSITIVE:
      value = getattr(self, name)
      if value is None and name in _OPTIONAL:
        continue
      if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        _fail(name, value, 'an integer > 0')
      object.__setattr__(self, name, int(value))  # numpy ints too: hash and equality unchanged
    if self.num_heads % self.kv_heads:
      _fail('num_kv_heads', self.num_kv_heads, f'a divisor of num_heads={self.num_heads} '
            '(None means num_heads)')
    if self.num_kv_heads == self.num_heads:  # the paper's: None, which follows num_heads
      object.__setattr__(self, 'num_kv_heads', None)
    for name in ('num_encoder_layers', 'num_decoder_layers'):
      if getattr(self, name) == self.num_layers:  # None follows num_layers: the paper's value
        object.__setattr__(self, name, None)
    for name in ('vocab_size', 'source_vocab_size'):
      if (getattr(self, name) or MIN_VOCAB_SIZE) < MIN_VOCAB_SIZE:
        _fail(name, getattr(self, name),
              f'an integer >= {MIN_VOCAB_SIZE} (ids {PAD_ID} = padding and {EOS_ID} = EOS/BOS '
              'are reserved, and one token more)')
    if self.source_vocab_size is not None and self.share_embeddings:
      _fail('source_vocab_size', self.source_vocab_size, 'None while share_embeddings=True '
            '(one matrix cannot embed two vocabularies); or set share_embeddings=False')
    self._check_imported_options()
    for name in _RATES:
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        _fail(name, value, 'a number in [0, 1)')
    dtypes = get_args(DTypeName)
    try:
      dtype = jnp.dtype(self.dtype)
    except (TypeError, ValueError):
      dtype = None
    if dtype is None or dtype.name not in dtypes:
      _fail('dtype', self.dtype, 'one of ' + ', '.join(map(repr, dtypes)))
    # One value per dtype: jnp.float32 == np.dtype('float32'), but their hashes differ, and a
    # config is a static (hashed) argument of jitted functions.
    object.__setattr__(self, 'dtype', dtype)

  def _check_imported_options(self) -> None:
    """`layer_norm_epsilon` in (0, 1) and `decoder_start_id` an id, stored as float / int."""
    epsilon = self.layer_norm_epsilon
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not 0 < epsilon < 1:
      _fail('layer_norm_epsilon', epsilon, 'a number in (0, 1)')
    object.__setattr__(self, 'layer_norm_epsilon', float(epsilon))
    start = self.decoder_start_id
    if (isinstance(start, bool) or not isinstance(start, numbers.Integral)
        or not 0 <= start < self.vocab_size):
      _fail('decoder_start_id', start, f'an id in [0, vocab_size={self.vocab_size})')
    object.__setattr__(self, 'decoder_start_id', int(start))

  @classmethod
  def from_config(cls, config, **overrides) -> 'TransformerConfig':
    """Validated model config from a run config (`configs/default.py` keys)."""
    from t2t_jax import config as config_lib  # local import: config imports this module
    config_lib.validate(config)
    heads = config.num_heads
    return cls(
        vocab_size=config.vocab_size, d_model=config.d_model, d_ff=config.d_ff,
        num_heads=heads, d_k=config.d_k or None, d_v=config.d_v or None,
        num_layers=config.num_layers,
        num_encoder_layers=config.num_encoder_layers or None,
        num_decoder_layers=config.num_decoder_layers or None,
        share_embeddings=bool(config.share_embeddings),
        scale_embeddings=bool(config.scale_embeddings),
        dropout_rate=config.dropout_rate, attention_dropout_rate=config.attention_dropout_rate,
        positional=config.positional, norm_position=config.norm_position,
        max_len=config.max_len, dtype=jnp.dtype(config.dtype),
        attention_impl=config.attention_impl or None, remat_policy=config.remat_policy,
        scan_layers=bool(config.scan_layers), num_kv_heads=config.num_kv_heads or None,
        decoder_window=config.decoder_window or None,
        source_vocab_size=None if config.share_vocab else (config.source_vocab_size
                                                           or config.vocab_size),
        activation=config.activation, attention_bias=bool(config.attention_bias),
        logits_bias=bool(config.logits_bias), layer_norm_epsilon=config.layer_norm_epsilon,
        decoder_start_id=config.decoder_start_id, **overrides)

  @property
  def kv_heads(self) -> int:
    """The key/value heads: `num_kv_heads`, or num_heads when it is None."""
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @property
  def input_vocab_size(self) -> int:
    """The encoder's vocabulary size (ids `inputs` may hold): `source_vocab_size`, or
    vocab_size when the two sides share one vocabulary."""
    return self.vocab_size if self.source_vocab_size is None else self.source_vocab_size

  def source_side(self) -> 'TransformerConfig':
    """The config the encoder's own embedding part is built with (`source_vocab_size` set):
    vocab_size the source's, tied (no pre-softmax matrix of its own: the encoder has no
    output)."""
    return self.replace(vocab_size=self.input_vocab_size, source_vocab_size=None,
                        share_embeddings=True)

  @property
  def encoder_layers(self) -> int:
    """The encoder's layers: `num_encoder_layers`, or num_layers when it is None."""
    return self.num_layers if self.num_encoder_layers is None else self.num_encoder_layers

  @property
  def decoder_layers(self) -> int:
    """The decoder's layers: `num_decoder_layers`, or num_layers when it is None."""
    return self.num_layers if self.num_decoder_layers is None else self.num_decoder_layers

  def replace(self, **changes) -> 'TransformerConfig':
    """A copy with `changes`, checked as a new config is."""
    return dataclasses.replace(self, **changes)


def _positive_int(value) -> bool:
  return (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0)


def _allowed(annotation) -> Optional[Tuple]:
  """The values a `Literal[...]` or `Optional[Literal[...]]` annotation allows; else None."""
  if get_origin(annotation) is Literal:
    return get_args(annotation)
  parts = get_args(annotation) if get_origin(annotation) is Union else ()
  if parts and all(p is type(None) or get_origin(p) is Literal for p in parts):
    return tuple(v for p in parts for v in ((None,) if p is type(None) else get_args(p)))
  return None


def _fail(name: str, value, expected: str) -> None:
  raise ConfigError(f'TransformerConfig.{name}={value!r}: expected {expected}')
