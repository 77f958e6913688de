"""Incremental decoding (§6.1): the decoder one position at a time, with a key/value cache.

Beam search (`search.py`) calls `decode_step` once per output position; what the steps share
(the encoder output's keys and values for every decoder layer, the transposed vocabulary) is
computed once per batch of sentences by `decode_context`. The steps must compute exactly the
teacher-forced model that training and evaluation run, or a variant trains one model and
decodes another: `incremental_logits` runs the steps over a whole target sequence and
`check_incremental` compares them, with a cache as long as the targets and with a longer one
(as beam search's), and checks the attention weights the model's `attention_fn` returns for
attention maps. An `attention_fn` that reads positions (rotary, ALiBi) gets the step and the
cache slots from the cache in decoding, and a wrong one shows there first.
"""

from typing import NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.model import module_jit
from t2t_jax.model.array_checks import check_int
from t2t_jax.model.id_arrays import check_ids, check_same_batch
from t2t_jax.model.multi_head_attention import ANCESTRY
from t2t_jax.model.transformer import (PAD_ID, ModelLike, Transformer, as_model, param_shapes,
                                       attention_layer, shift_right)

Array = jax.Array


def cache_slots(model: ModelLike, max_decode_len: int) -> int:
  """The self-attention cache's slots for up to `max_decode_len` target positions:
  max_decode_len, or at most `decoder_window` W for a model with one (a ring buffer, position
  p in slot p % W)."""
  window = as_model(model).cfg.decoder_window
  return max_decode_len if window is None else min(max_decode_len, window)


def init_cache(model: ModelLike, batch: int, max_decode_len: int, *, ancestry: bool = False):
  """A zero decode cache for `batch` rows and up to `max_decode_len` target positions.

  Leaves: per-layer `cached_key` `[batch, kv_heads, slots, d_k]`, `cached_value`
  `[batch, kv_heads, slots, d_v]` (heads-first, see `attention.cached_attention`), and
  0-d int32 indices (`cache_index`, `position`); slots = `cache_slots(model,
  max_decode_len)`: max_decode_len, or the model's `decoder_window` when that is fewer.
  With `ancestry`, also per layer `ancestor_rows` `[batch, slots]` int32: an append-only
  cache for beam search, reordered by `reorder_cache` (which moves only those) instead of
  `search.beam_search`'s default (which moves every key and value at every step).

  Raises:
    TypeError / ValueError: `batch` < 1, or `max_decode_len` outside [1, the config's
      max_len] (a decoding step's position is below max_len).
  """
  net = as_model(model, deterministic=True, decode=True)
  batch = check_int('init_cache', 'batch', batch, minimum=1)
  max_decode_len = check_int('init_cache', 'max_decode_len', max_decode_len, minimum=1)
  if max_decode_len > net.cfg.max_len:
    raise ValueError(f'init_cache: max_decode_len={max_decode_len} exceeds the model\'s '
                     f'max_len={net.cfg.max_len}; expected 1 <= max_decode_len <= max_len')
  src = jnp.ones((batch, 1), jnp.int32)
  tgt = jnp.ones((batch, cache_slots(net, max_decode_len)), jnp.int32)
  shapes = jax.eval_shape(lambda: net.init(jax.random.PRNGKey(0), src, tgt)['cache'])
  cache = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  return _with_ancestry(cache) if ancestry else cache


def _with_ancestry(cache):
  """`cache` with a zero `ancestor_rows` `[rows, slots]` beside every layer's keys (each row
  reads its own: nothing reordered yet)."""
  if not hasattr(cache, 'keys'):
    return cache
  out = {name: _with_ancestry(leaf) for name, leaf in cache.items()}
  if 'cached_key' in out:
    rows, _, slots, _ = out['cached_key'].shape
    out[ANCESTRY] = jnp.zeros((rows, slots), jnp.int32)
  return out


def reorder_cache(cache, flat_parent: Array):
  """`search.beam_search`'s `reorder_cache` for a cache made with `init_cache(ancestry=True)`:
  the hypotheses of rows `flat_parent` `[rows]` int32 continue in rows 0, 1, ...; their keys
  and values stay where they were written, and `ancestor_rows` says where (the gather of a
  `[rows, slots]` int32 array a step instead of every layer's `[rows, heads, slots, d]`
  keys and values, and their copy back into the loop's buffer). Other leaves with rows are
  reordered as the search's default does; 0-d ones pass through. Only for such a cache:
  without `ancestor_rows` a row would read another hypothesis's keys."""
  rows = jnp.arange(flat_parent.shape[0], dtype=jnp.int32)

  def reorder(path, x):
    name = getattr(path[-1], 'key', None)
    if jnp.ndim(x) == 0 or name in ('cached_key', 'cached_value'):
      return x
    moved = x.at[flat_parent].get(mode='promise_in_bounds')
    return moved + (flat_parent - rows)[:, None] if name == ANCESTRY else moved
  return jax.tree_util.tree_map_with_path(reorder, cache)


def grow_cache(cache, length: int, window: Optional[int] = None):
  """`cache` (from `init_cache`) with room for `length` positions, as `search.beam_search`'s
  `grow_cache`: keys/values zero-padded at the end, beyond the fill index that masks them.
  With a `window` (the model's `decoder_window`) a cache grows to at most `window` slots (a
  ring buffer: grown only before it wraps, as the search's growing segments ensure)."""
  if not hasattr(cache, 'keys'):
    raise TypeError(f'grow_cache: cache is a {type(cache).__name__}; expected a decode cache '
                    '(the nested dict init_cache returns)')
  length = check_int('grow_cache', 'length', length, minimum=1)
  if window is not None:
    length = min(length, window)

  def grow(path, x):
    if getattr(path[-1], 'key', None) == ANCESTRY:  # new slots: each row's own (unfilled)
      return jnp.pad(x, ((0, 0), (0, length - x.shape[1])))
    if getattr(path[-1], 'key', None) not in ('cached_key', 'cached_value'):
      return x
    if length < x.shape[2]:
      raise ValueError(f'grow_cache: length={length} is shorter than the cache\'s '
                       f'{x.shape[2]} positions; a cache grows, it cannot shrink')
    return jnp.pad(x, ((0, 0), (0, 0), (0, length - x.shape[2]), (0, 0)))
  return jax.tree_util.tree_map_with_path(grow, cache)


def cross_key_values(model: ModelLike, params, encoded: Array):
  """Every decoder layer's encoder-decoder keys and values, projected once per sentence.

  Args:
    model: the model (or its config).
    params: model parameters.
    encoded: `[batch, src_len, d_model]` encoder output.

  Returns:
    A tuple over layers of (keys `[batch, kv_heads, src_len, d_k]`, values `[..., d_v]`), the
    same numbers the cross-attention computes from `encoded` (the same module: projections,
    and the model's `qk_transform` at the source positions), heads-first
    (`attention.heads_first_attention`: no transposed copy at every step).
  """
  net = as_model(model)
  positions = jnp.arange(encoded.shape[1], dtype=jnp.int32)[None]
  layer = attention_layer(net.cfg, net.parts, 'cross_attention', 'encoder_decoder')
  return tuple(
      layer.apply({'params': params['decoder'][f'layer_{i}']['cross_attention']}, None,
                  encoded, key_positions=positions)
      for i in range(net.cfg.decoder_layers))


class DecodeContext(NamedTuple):
  """What every decode step of a batch of sentences reads and never changes.

  One row per sentence, not per beam: close over it in the search's `logits_fn` rather than
  putting it in the search's cache, which is tiled over beams and reordered at every step.
  """
  inputs: Array      # [batch, src_len] int32 source ids, for the encoder-decoder padding mask.
  cross_kv: Tuple    # per decoder layer: keys [batch, kv_heads, src_len, d_k], values [.., d_v].
  vocab_t: Array     # [d_model, vocab]: the pre-softmax matrix (the tied embedding, or the
                     # untied projection), transposed once (`Transformer.vocab_transposed`).


def decode_context(model: ModelLike, params, inputs: Array,
                   encoded: Optional[Array] = None) -> DecodeContext:
  """Encodes `[batch, src_len]` source ids (unless `encoded` is given) and precomputes what
  the decode steps share: the encoder-decoder keys/values and the transposed vocabulary."""
  check_ids('decode_context', 'inputs', inputs, as_model(model).cfg.input_vocab_size)
  if encoded is None:
    encoded = as_model(model, deterministic=True, decode=False).apply(
        {'params': params}, inputs, method=Transformer.encode)
  vocab_t = as_model(model).apply({'params': params}, method=Transformer.vocab_transposed)
  return DecodeContext(inputs, cross_key_values(model, params, encoded), vocab_t)


def decode_step(model: ModelLike, params, cache, tokens: Array, context: DecodeContext):
  """One incremental decoder step with the key/value cache.

  Args:
    model: the model, or its config (decode and deterministic are forced on).
    params: model parameters.
    cache: from `init_cache(model, rows, max_decode_len)` or a previous step.
    tokens: `[rows, 1]` int32, the previous output token (BOS at the first step). `rows` is a
      multiple of the context's batch: row r belongs to sentence r // (rows // batch), as
      `search.beam_search` lays out beams.
    context: `decode_context(model, params, inputs)` of the batch's sentences.

  Returns:
    (`[rows, vocab]` float32 logits for the next position, the updated cache).
  """
  net = as_model(model, deterministic=True, decode=True)
  check_ids('decode_step', 'tokens', tokens, net.cfg.vocab_size)
  if np.shape(tokens)[1] != 1:
    raise ValueError(f'decode_step: tokens has shape {np.shape(tokens)}; expected [rows, 1], '
                     'one previous token per row')
  logits, updated = net.apply({'params': params, 'cache': cache}, tokens, None, context.inputs,
                                context.cross_kv, context.vocab_t, method=Transformer.decode,
                                mutable=['cache'])
  return logits[:, 0], updated['cache']


def incremental_logits(model: ModelLike, params, inputs: Array, targets: Array,
                       max_decode_len: Optional[int] = None) -> Array:
  """The logits of every target position from `decode_step`, one position at a time.

  Args:
    model: a `Transformer` (or variant), or its config.
    params: its parameters.
    inputs: `[batch, src_len]` int32 source ids, EOS-terminated, 0-padded.
    targets: `[batch, tgt_len]` int32 target ids (the decoder reads them shifted right).
    max_decode_len: the self-attention cache's positions, >= tgt_len (None: tgt_len); beam
      search's caches are longer than the output so far, their unfilled slots masked.

  Returns:
    `[batch, tgt_len, vocab]` float32, what `Transformer.__call__(inputs, targets)` gives.
  """
  cfg = as_model(model).cfg
  for name, ids, size in (('inputs', inputs, cfg.input_vocab_size),
                          ('targets', targets, cfg.vocab_size)):
    check_ids('incremental_logits', name, ids, size)
  inputs, targets = jnp.asarray(inputs, jnp.int32), jnp.asarray(targets, jnp.int32)
  if max_decode_len is None:
    max_decode_len = targets.shape[1]
  if max_decode_len < targets.shape[1]:
    raise ValueError(f'incremental_logits: max_decode_len={max_decode_len} is shorter than the '
                     f'targets ({targets.shape[1]} positions)')
  context = decode_context(model, params, inputs)
  tokens = shift_right(targets, cfg.decoder_start_id)

  def step(cache, token):
    logits, cache = decode_step(model, params, cache, token[:, None], context)
    return cache, logits

  cache = init_cache(model, inputs.shape[0], max_decode_len)
  _, logits = jax.lax.scan(step, cache, tokens.T)
  return logits.transpose(1, 0, 2)


# One program per model and length across calls (a jit made inside the check traced anew).
_stepped_logits = module_jit.jit_on_module(incremental_logits, static_argnums=(4,))


def check_incremental(model: ModelLike, params, inputs: Array, targets: Array,
                      atol: float = 1e-4, max_decode_len: Optional[int] = None) -> float:
  """Teacher-forced logits vs `incremental_logits` at the real (non-padding) target positions,
  and the attention weights the model's `attention_fn` returns when asked for them.

  Decoding is compared twice: with a cache of exactly the targets' length, and with one of
  `max_decode_len` positions (None: `cfg.max_len`, the longest a decode may use), as beam
  search's caches are longer than the output (a variant whose logits depend on the number of
  keys decodes differently only then). Each padded row is also run alone, without its
  padding: its logits must be those it has inside the padded batch, since decoding pads a
  sentence to its batch's bucket (a variant that reads the padded length, e.g. a key
  normalised over every position, translates a sentence differently in different batches).
  With `capture_attention` (attention maps, `return_weights=True`) the logits must be the teacher-forced ones, and every layer's weights
  `[batch, heads, q_len, kv_len]` with rows summing to 1 over the unmasked keys.

  Returns the largest absolute difference of the logits; raises ValueError naming it and
  where it is when it exceeds `atol` (float32 on CPU stays near 1e-5 for the paper's model),
  or naming `attention_fn` when its weights are not attention weights.

  Raises (before any work): TypeError for `inputs` or `targets` that are not integer ids,
  ValueError for ones that are not `[batch, length]` with batch, length >= 1, ids outside
  the vocabulary, or batches of different sizes; each naming the argument.
  """
  net = as_model(model, deterministic=True, decode=False)
  for name, ids, size in (('inputs', inputs, net.cfg.input_vocab_size),
                          ('targets', targets, net.cfg.vocab_size)):
    check_ids('check_incremental', name, ids, size)
  check_same_batch('check_incremental', inputs, targets)
  if max_decode_len is not None and (isinstance(max_decode_len, bool) or not isinstance(
      max_decode_len, int) or not 1 <= max_decode_len <= net.cfg.max_len):
    raise ValueError(f'check_incremental: max_decode_len={max_decode_len!r}; expected an '
                     f'integer in [1, max_len={net.cfg.max_len}] (None: max_len)')
  _check_params(net, params)
  inputs, targets = np.asarray(inputs, np.int32), np.asarray(targets, np.int32)
  tgt_len = targets.shape[1]
  longest = net.cfg.max_len if max_decode_len is None else max_decode_len
  forced = np.asarray(_teacher_forced(net, params, inputs, targets), np.float64)
  real = (targets != PAD_ID)[..., None]
  worst = 0.0
  for length in sorted({tgt_len, max(longest, tgt_len)}):
    stepped = np.asarray(_stepped_logits(net, params, inputs, targets, length), np.float64)
    gap = np.abs(forced - stepped) * real
    worst = max(worst, float(gap.max()))
    if not gap.max() <= atol:
      row, position, _ = np.unravel_index(int(np.argmax(gap)), gap.shape)
      raise ValueError(f'incremental decoding differs from teacher forcing by {gap.max():.3g} '
                       f'(row {row}, target position {position}, a cache of {length} '
                       f'positions; atol {atol}): the model decodes differently from how it '
                       'trains')
  worst = max(worst, _check_alone(net, params, inputs, targets, forced, atol))
  _check_captured(net, params, inputs, targets, forced, real, atol)
  return worst


@module_jit.jit_on_module(static_argnames=('capture',))
def _teacher_forced(net: Transformer, params, inputs: Array, targets: Array,
                    capture: bool = False):
  """`net`'s teacher-forced logits `[batch, tgt_len, vocab]` (with `capture`: and its sown
  intermediates, the attention maps), compiled as one program per shape: run op by op, the
  check compiled every operation again for each padded row's own length (961 programs for
  16 dev pairs, 40 s of a 55 s variants smoke run)."""
  if capture:
    return net.apply({'params': params}, inputs, targets, mutable=['intermediates'])
  return net.apply({'params': params}, inputs, targets)


def _check_params(net: Transformer, params) -> None:
  """ValueError naming the first parameter `params` lacks, adds or shapes otherwise than
  `net` (rather than a flax scope error from inside the model)."""
  if not isinstance(params, dict) and not hasattr(params, 'keys'):
    raise ValueError(f'check_incremental: params is a {type(params).__name__}; expected the '
                     "model's parameter tree (init_params' nested dict)")
  flat = lambda tree: {jax.tree_util.keystr(k): tuple(np.shape(v))  # noqa: E731
                       for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}
  want, got = flat(param_shapes(net)), flat(params)
  for path in sorted(want.keys() | got.keys()):
    if want.get(path) != got.get(path):
      raise ValueError(f'check_incremental: params{path} is {got.get(path, "missing")}, the '
                       f'model needs {want.get(path, "nothing there")}; are they the '
                       'parameters of this model?')


def _real_length(row: np.ndarray) -> int:
  """The positions of `row` up to its last non-padding id (1 for a row of padding)."""
  return max(int(np.flatnonzero(row != PAD_ID)[-1]) + 1 if (row != PAD_ID).any() else 1, 1)


def _check_alone(net: Transformer, params, inputs: np.ndarray, targets: np.ndarray,
                 forced: np.ndarray, atol: float) -> float:
  """Each row with padding, alone and unpadded, vs its teacher-forced logits in the batch
  (`forced`) at its real target positions; the largest gap (ValueError above `atol`)."""
  worst = 0.0
  for row in range(inputs.shape[0]):
    src, tgt = _real_length(inputs[row]), _real_length(targets[row])
    if (src, tgt) == (inputs.shape[1], targets.shape[1]):
      continue  # nothing padded: the row is the batch's
    alone = np.asarray(_teacher_forced(net, params, inputs[row:row + 1, :src],
                                       targets[row:row + 1, :tgt]), np.float64)[0]
    gap = np.abs(alone - forced[row, :tgt]) * (targets[row, :tgt] != PAD_ID)[:, None]
    worst = max(worst, float(gap.max()))
    if not gap.max() <= atol:
      position = int(np.argmax(gap.max(-1)))
      raise ValueError(f'row {row} gives other logits alone than inside the padded batch '
                       f'(by {gap.max():.3g} at target position {position}; atol {atol}): the '
                       "model reads the batch's padding, so a sentence translates differently "
                       'in different batches')
  return worst


def _self_mask(length: int, window: Optional[int]) -> np.ndarray:
  """The decoder's teacher-forced self-attention mask `[1, 1, length, length]`: causal, and
  within the last `window` positions when there is one."""
  distance = np.arange(length)[:, None] - np.arange(length)[None, :]
  return ((distance >= 0) & (window is None or distance < window))[None, None]


def _check_captured(net: Transformer, params, inputs: np.ndarray, targets: np.ndarray,
                    forced: np.ndarray, real: np.ndarray, atol: float) -> None:
  """The teacher-forced model with `capture_attention`: the same logits, and weights that
  are attention weights (rows sum to 1 over the unmasked keys, masked keys ~0)."""
  name = getattr(net.attention_fn, '__name__', None) or repr(net.attention_fn)
  captured, state = _teacher_forced(as_model(net, capture_attention=True), params, inputs,
                                    targets, capture=True)
  gap = np.abs(np.asarray(captured, np.float64) - forced) * real
  if not gap.max() <= atol:
    raise ValueError(f'attention_fn {name}: with return_weights=True (attention maps) the '
                     f'logits differ from training by {gap.max():.3g} (atol {atol})')
  source = inputs != PAD_ID
  tgt_len = targets.shape[1]
  allowed = {'encoder/self_attention': source[:, None, None, :],
             'decoder/self_attention': _self_mask(tgt_len, net.cfg.decoder_window),
             'decoder/cross_attention': source[:, None, None, :]}
  for path, leaf in jax.tree_util.tree_leaves_with_path(state['intermediates']):
    keys = [str(getattr(k, 'key', getattr(k, 'idx', k))) for k in path]
    where = '/'.join(k for k in keys if not k.isdigit())
    if 'attention_weights' not in keys:
      continue
    kind = f"{keys[0]}/{keys[keys.index('attention_weights') - 1]}"
    if kind not in allowed:
      continue
    weights = np.asarray(leaf, np.float64)
    mask = np.broadcast_to(allowed[kind], weights.shape)
    rows = mask.any(-1)  # a row with every key masked has no weights to check
    sums = np.abs((weights * mask).sum(-1) - 1.0)[rows]
    masked = np.abs(np.where(mask, 0.0, weights)).max(-1)[rows]
    bad_sum = float(sums.max(initial=0.0))
    bad_masked = float(masked.max(initial=0.0))
    if not (bad_sum <= 1e-3 and bad_masked <= 1e-6 and np.isfinite(weights).all() and
            weights.min() >= 0):
      raise ValueError(f'attention_fn {name}: the weights it returns for return_weights=True '
                       f'({where}) are not attention weights: rows must sum to 1 over the '
                       f'unmasked keys (off by up to {bad_sum:.3g}) with masked keys 0 (up to '
                       f'{bad_masked:.3g})')
