"""Scoring given translations with the model: teacher-forced per-token log probabilities.

`token_log_probs` is log p(y_t | x, y_<t) for every target position of a batch, one
teacher-forced forward pass (the training path). Summed over a hypothesis (its EOS included)
with `exclude_pad=True`, it is the plain log probability beam search ranks by
(`search.raw_log_probs`, `Translator.translate_n_best`'s `log_prob`); divided by
`search.length_penalty(length with EOS, alpha, length_rule)`, the search's score.

Ids outside [0, vocab_size) are refused here (`check_ids`): the embedding lookup would turn
them into NaN logits without a word.
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.model import id_arrays, transformer

# The logit decoding gives padding (translate.decode_batch): never an output token.
PAD_LOGIT = -1e9


def check_ids(ids: Any, vocab_size: int, name: str) -> None:
  """Raises ValueError naming the first id of `ids` (any shape, row-major order) outside
  [0, vocab_size), its position and vocab_size. Looks only at concrete values: under
  `jax.jit` (a tracer) it checks nothing, as it cannot see the ids."""
  if isinstance(ids, jax.core.Tracer):
    return
  array = np.asarray(ids)
  bad = (array < 0) | (array >= vocab_size)
  if bad.any():
    position = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f'{name} id {int(array[position])} at position {position} is outside '
                     f'the vocabulary (vocab_size={vocab_size}): ids must be in '
                     f'[0, {vocab_size})')


def token_log_probs(model: transformer.ModelLike, params: Any, inputs: Any, targets: Any, *,
                    exclude_pad: bool = False) -> jax.Array:
  """Per-token log probabilities of `targets` given `inputs`, teacher-forced.

  Args:
    model: the model (a `Transformer` or a variant) or its `TransformerConfig`
      (`transformer.as_model`); run deterministic (no dropout).
    params: its parameters.
    inputs: `[batch, src_len]` int source ids, EOS-terminated, 0-padded.
    targets: `[batch, tgt_len]` int target ids, EOS-terminated, 0-padded (the decoder reads
      them shifted right behind BOS, as in training).
    exclude_pad: False: the model's own distribution (the training loss's). True: padding's
      probability is excluded (the softmax over the other ids), the distribution beam
      search decodes from, so sums equal the search's log probabilities.

  Returns:
    `[batch, tgt_len]` float32: log p(targets[b, t] | inputs[b], targets[b, :t]), and 0
    where targets[b, t] is padding (0).

  Raises:
    TypeError: `inputs` or `targets` not integer ids.
    ValueError: not `[batch, length]` with batch, length >= 1; an id of `inputs` or
      `targets` outside [0, vocab_size), named with its position (checked on concrete arrays only: under `jax.jit` nothing is checked).
  """
  net = transformer.as_model(model, deterministic=True, decode=False)
  for name, ids in (('inputs', inputs), ('targets', targets)):
    id_arrays.check_ids('token_log_probs', name, ids)  # dtype, rank, empty; values below
  check_ids(inputs, net.cfg.input_vocab_size, 'inputs')
  check_ids(targets, net.cfg.vocab_size, 'targets')
  return _token_log_probs(net, exclude_pad, params, jnp.asarray(inputs, jnp.int32),
                          jnp.asarray(targets, jnp.int32))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _token_log_probs(net: transformer.Transformer, exclude_pad: bool, params: Any,
                     inputs: jax.Array, targets: jax.Array) -> jax.Array:
  logits = net.apply({'params': params}, inputs, targets).astype(jnp.float32)
  if exclude_pad:
    logits = logits.at[..., transformer.PAD_ID].set(PAD_LOGIT)
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  chosen = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
  return jnp.where(targets != transformer.PAD_ID, chosen, 0.0)
