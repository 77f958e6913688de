"""Beam search (§6.1) of a Transformer over a batch of source id arrays: the incremental
decoder (`incremental.decode_context` / `decode_step` / `init_cache`) driven by
`search.beam_search`.

The one search every decoding path runs: `Translator` and `--mode=decode`
(`translate.decode_batch`), the StableHLO artifact (which serializes that function) and the
NNX module's `generate` (`nnx_bridge`). Here, in the model layer, so that the NNX module can
call it without importing inference.
"""

import functools
from typing import Mapping, Optional

import jax
import numpy as np

from t2t_jax.model import incremental, sampling, scoring, search
from t2t_jax.model.array_checks import check_array, check_int, check_real
from t2t_jax.model.id_arrays import check_ids
from t2t_jax.model.transformer import EOS_ID, PAD_ID, ModelLike, as_model


def beam_decode(model: ModelLike, beam_size: int, alpha: float, params, inputs: jax.Array,
                max_lengths: jax.Array, max_decode_len: int,
                grow_cache: bool = True, *, no_repeat_ngram_size: int = 0,
                prefix: Optional[jax.Array] = None,
                append_only: bool = True, best_only: bool = False, length_rule: str = 'gnmt'
                ) -> tuple[jax.Array, jax.Array]:
  """Every beam of the search and its score.

  Args:
    model: the model (a `Transformer`, a variant, or a config); decoding is deterministic.
    beam_size: K (4 in the paper); alpha: the GNMT length penalty (0.6 in the paper).
    params: the model's parameters (`init_params`'s tree).
    inputs: `[rows, src_len]` int32 source ids, EOS-terminated, padded with 0.
    max_lengths: `[rows]` int32, per sentence the most output tokens, EOS included (the
      paper: input length + 50), clipped to [1, max_decode_len].
    max_decode_len: L, the length of the outputs (static).
    grow_cache: the self-attention cache grows with the output (`search.cache_lengths`);
      False: one cache of L positions, the same results, slower.
    no_repeat_ngram_size, prefix: `search.beam_search`'s constraints (static n; `[rows, P]`
      int32 target prefixes, 0-padded); off by default, the paper's search.
    append_only: each hypothesis reads its keys and values from where its ancestors wrote
      them (`incremental.reorder_cache`); False: the whole cache is reordered by parent
      every step, the same results bit for bit, slower.
    best_only: `search.beam_search`'s: stop a sentence once its best hypothesis is certain
      (the same best sequence and score, in fewer steps; the other beams may differ).
    length_rule: 'gnmt' (the paper's) or 'transformers' (`length_rules`), static.

  Returns:
    (sequences `[rows, K, L]` int32, best first, EOS-terminated then 0s; scores `[rows, K]`
    float32, descending: log p / length_penalty, `search.NEG_INF` for an empty slot), as
    `search.beam_search`. Jittable with everything but params, inputs and max_lengths static.

  Raises (before any work, from Python values, shapes and dtypes; each naming the argument):
    TypeError: a `beam_size` or `max_decode_len` that is no integer, an `alpha` that is no
      number, `params` that are no dict, `inputs` or `max_lengths` that are no integers.
    ValueError: `beam_size` or `max_decode_len` below 1, `max_decode_len` beyond the model's
      `max_len`, a non-finite `alpha`, `inputs` not `[rows, src_len]` or (values known, not
      under `jit`) holding an id outside the vocabulary, `max_lengths` not `[rows]`.
  """
  _check_arguments(model, beam_size, alpha, params, inputs, max_lengths, max_decode_len)
  append_only = append_only and beam_size > 1  # one beam: nothing is ever reordered
  logits_fn, cache, grow = _decoder(model, params, inputs, max_decode_len, grow_cache,
                                    ancestry=append_only)
  return search.beam_search(
      logits_fn, cache, batch_size=inputs.shape[0], beam_size=beam_size, alpha=alpha,
      max_decode_len=max_decode_len, max_lengths=max_lengths, eos_id=EOS_ID,
      bos_id=start_id(model),
      grow_cache=grow, no_repeat_ngram_size=no_repeat_ngram_size, prefix=prefix,
      reorder_cache=incremental.reorder_cache if append_only else None, best_only=best_only,
      length_rule=length_rule)


def sample_decode(model: ModelLike, params, inputs: jax.Array, max_lengths: jax.Array,
                  max_decode_len: int, row_keys: jax.Array, *, temperature: float = 1.0,
                  top_k: int = 0, top_p: float = 1.0, no_repeat_ngram_size: int = 0,
                  prefix: Optional[jax.Array] = None,
                  grow_cache: bool = True) -> tuple[jax.Array, jax.Array]:
  """One sample per source row (`sampling.sample`): sequences `[rows, L]` int32 and their
  log probabilities `[rows]` float32 under the model (untempered). Arguments as
  `beam_decode`; `row_keys` `[rows, 2]` uint32, one PRNG key per row; `temperature`, `top_k`,
  `top_p` static."""
  _check_arguments(model, 1, 0.0, params, inputs, max_lengths, max_decode_len)
  logits_fn, cache, grow = _decoder(model, params, inputs, max_decode_len, grow_cache)
  return sampling.sample(
      logits_fn, cache, row_keys=row_keys, max_decode_len=max_decode_len,
      max_lengths=max_lengths, temperature=temperature, top_k=top_k, top_p=top_p,
      eos_id=EOS_ID, bos_id=start_id(model), grow_cache=grow,
      no_repeat_ngram_size=no_repeat_ngram_size, prefix=prefix)


def start_id(model: ModelLike) -> int:
  """The id the decoder reads first (`TransformerConfig.decoder_start_id`)."""
  return as_model(model).cfg.decoder_start_id


def _decoder(model: ModelLike, params, inputs: jax.Array, max_decode_len: int,
             grow_cache: bool, ancestry: bool = False):
  """(logits_fn, initial cache, grow_cache function or None) of the incremental decoder;
  `ancestry`: an append-only self-attention cache (`incremental.reorder_cache`)."""
  # Per sentence, closed over: the encoder-decoder keys/values and the transposed vocabulary.
  # Only the self-attention cache goes through the search, which tiles it over beams and
  # reorders it at every step.
  logits_fn = step_logits(model, params, incremental.decode_context(model, params, inputs))
  cache = incremental.init_cache(model, inputs.shape[0], 1 if grow_cache else max_decode_len,
                                 ancestry=ancestry)
  grow = (functools.partial(incremental.grow_cache, window=as_model(model).cfg.decoder_window)
          if grow_cache else None)
  return logits_fn, cache, grow


def step_logits(model: ModelLike, params, context: incremental.DecodeContext):
  """The search's `LogitsFn` over a batch's `context`: (tokens `[rows, 1]` int32, cache) ->
  (logits `[rows, vocab]` float32, cache), one `incremental.decode_step`, with padding never
  a translation token (search.py does not mask it)."""
  def logits_fn(tokens, cache):
    logits, cache = incremental.decode_step(model, params, cache, tokens, context)
    return logits.at[:, PAD_ID].set(scoring.PAD_LOGIT), cache
  return logits_fn


def _check_arguments(model: ModelLike, beam_size: int, alpha: float, params, inputs: jax.Array,
                     max_lengths: jax.Array, max_decode_len: int) -> None:
  """`beam_decode`'s argument checks: static ones (trace time under `jit`), and the ids'
  values when they are known."""
  cfg = as_model(model).cfg
  check_int('beam_decode', 'beam_size', beam_size, minimum=1)
  check_real('beam_decode', 'alpha', alpha, hint="(the length penalty's exponent; 0.6 in the "
             'paper, 0: none)')
  max_decode_len = check_int('beam_decode', 'max_decode_len', max_decode_len, minimum=1)
  if max_decode_len > cfg.max_len:
    raise ValueError(f'beam_decode: max_decode_len={max_decode_len}; expected at most the '
                     f"model's max_len={cfg.max_len}")
  if not isinstance(params, Mapping):
    raise TypeError(f'beam_decode: params is a {type(params).__name__}; expected the model\'s '
                    "parameter tree (init_params' nested dict)")
  check_ids('beam_decode', 'inputs', inputs, cfg.input_vocab_size)
  rows = check_array('beam_decode', 'max_lengths', max_lengths, kind='int', rank=1,
                     layout='[rows], the most output tokens of each source row')[0]
  if rows != np.shape(inputs)[0]:
    raise ValueError(f'beam_decode: max_lengths has shape {np.shape(max_lengths)}; expected '
                     f'[rows] = ({np.shape(inputs)[0]},), one per source row')
