"""Beam search (§6.1) of a Transformer over a batch of source id arrays: the incremental
decoder (`incremental.decode_context` / `decode_step` / `init_cache`) driven by
`search.beam_search`.

The one search every decoding path runs: `Translator` and `--mode=decode`
(`translate.decode_batch`), the StableHLO artifact (which serializes that function) and the
NNX module's `generate` (`nnx_bridge`). Here, in the model layer, so that the NNX module can
call it without importing inference.
"""

import functools

import jax

from t2t_jax.model import incremental, scoring, search
from t2t_jax.model.transformer import BOS_ID, EOS_ID, PAD_ID, ModelLike, as_model


def beam_decode(model: ModelLike, beam_size: int, alpha: float, params, inputs: jax.Array,
                max_lengths: jax.Array, max_decode_len: int,
                grow_cache: bool = True) -> tuple[jax.Array, jax.Array]:
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

  Returns:
    (sequences `[rows, K, L]` int32, best first, EOS-terminated then 0s; scores `[rows, K]`
    float32, descending: log p / length_penalty, `search.NEG_INF` for an empty slot), as
    `search.beam_search`. Jittable with everything but params, inputs and max_lengths static.
  """
  # Per sentence, closed over: the encoder-decoder keys/values and the transposed vocabulary.
  # Only the self-attention cache goes through the search, which tiles it over beams and
  # reorders it at every step.
  context = incremental.decode_context(model, params, inputs)

  def logits_fn(tokens, cache):
    logits, cache = incremental.decode_step(model, params, cache, tokens, context)
    # Padding is never a translation token (search.py does not mask it).
    return logits.at[:, PAD_ID].set(scoring.PAD_LOGIT), cache

  cache = incremental.init_cache(model, inputs.shape[0], 1 if grow_cache else max_decode_len)
  return search.beam_search(
      logits_fn, cache, batch_size=inputs.shape[0], beam_size=beam_size, alpha=alpha,
      max_decode_len=max_decode_len, max_lengths=max_lengths, eos_id=EOS_ID, bos_id=BOS_ID,
      grow_cache=functools.partial(incremental.grow_cache,
                                   window=as_model(model).cfg.decoder_window)
      if grow_cache else None)
