"""Translating text with beam search (§6.1), in input order.

Sentences are tokenized, sorted by length and decoded in batches of a fixed number of rows
padded to a fixed set of lengths, so one compilation serves every batch of a length bucket;
results are put back in input order. Empty input lines give empty output lines without
being decoded. Maximum output length = input length (tokens, with EOS) + max_decode_extra.
"""

import functools
import sys
from typing import Callable, List, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from t2t_jax.inference import portable
from t2t_jax.model import transformer as model, search


class Translator:
  """Beam-search decoding of sentences with a trained model.

  Args:
    cfg: the model config.
    params: model parameters.
    tokenizer: `encode(str) -> ids` (no EOS), `decode(ids) -> str` (data.tokenizer.Tokenizer).
    beam_size: 4 in the paper; 1 is greedy.
    alpha: length penalty (0.6 in the paper).
    max_decode_extra: maximum output length = input length + this (50 in the paper).
    batch_sentences: rows of every decode batch.
    bucket_lengths: padded source lengths; longer inputs are padded to a multiple of 32.
    threads: batches decoded at once (None or 0: `portable.default_threads()`, one per core
      on a CPU backend).

  Attributes:
    truncated_lines: 1-based positions, in the last `translate` call's input, of the inputs
      cut to fit `cfg.max_len` (a warning names them too).
  """

  def __init__(self, cfg: model.TransformerConfig, params, tokenizer, *, beam_size: int = 4,
               alpha: float = 0.6, max_decode_extra: int = 50, batch_sentences: int = 64,
               bucket_lengths: Sequence[int] = (16, 32, 64, 128, 256),
               threads: Optional[int] = None):
    self.cfg = cfg.replace(deterministic=True, decode=False)
    self.params = params
    self.tokenizer = tokenizer
    self.beam_size, self.alpha = beam_size, alpha
    self.max_decode_extra = max_decode_extra
    self.batch_sentences = batch_sentences
    self.bucket_lengths = tuple(sorted(bucket_lengths))
    self.threads = threads or portable.default_threads()
    self.compiled_shapes = set()
    self.truncated_lines: List[int] = []

  @functools.partial(jax.jit, static_argnums=(0, 4))
  def _decode_batch(self, params, inputs: jax.Array, max_lengths: jax.Array,
                    max_decode_len: int) -> jax.Array:
    return decode_batch(self.cfg, self.beam_size, self.alpha, params, inputs, max_lengths,
                        max_decode_len)

  def _decode_numpy(self, inputs: np.ndarray, max_lengths: np.ndarray,
                    max_decode_len: int) -> np.ndarray:
    if (inputs.shape[1], max_decode_len) not in self.compiled_shapes:
      self.compiled_shapes.add((inputs.shape[1], max_decode_len))
      logging.info('compiling decode for source length %d, output length %d', inputs.shape[1],
                   max_decode_len)
    return np.asarray(self._decode_batch(self.params, jnp.asarray(inputs),
                                         jnp.asarray(max_lengths), max_decode_len))

  def translate(self, sentences: Sequence[str],
                progress: Optional[Callable[[int, int, float], None]] = None,
                line_numbers: Optional[Sequence[int]] = None) -> List[str]:
    """Translations of `sentences`, in the same order; empty (whitespace) lines stay empty.

    `line_numbers` name the sentences in warnings (default 1, 2, ...; a process decoding its
    share of a file passes the file's line numbers).
    """
    return [self.tokenizer.decode(ids)
            for ids in self.translate_ids(sentences, progress, line_numbers)]

  def translate_ids(self, sentences: Sequence[str],
                    progress: Optional[Callable[[int, int, float], None]] = None,
                    line_numbers: Optional[Sequence[int]] = None) -> List[List[int]]:
    """`translate`, as the best hypotheses' token ids (up to, not including, EOS; [] for an
    empty line). Batching: `portable` (the exported artifact batches alike)."""
    outputs, truncated = portable.translate_ids(
        sentences, self.tokenizer.encode, self._decode_numpy, rows=self.batch_sentences,
        buckets=self.bucket_lengths, max_len=self.cfg.max_len,
        max_decode_extra=self.max_decode_extra, progress=progress, threads=self.threads)
    self.truncated_lines = ([line_numbers[i - 1] for i in truncated]
                            if line_numbers is not None else truncated)
    if self.truncated_lines:
      logging.warning('%s', truncation_warning(self.truncated_lines, self.cfg.max_len))
    return outputs


def decode_batch(cfg: model.TransformerConfig, beam_size: int, alpha: float, params,
                 inputs: jax.Array, max_lengths: jax.Array, max_decode_len: int,
                 grow_cache: bool = True) -> jax.Array:
  """`[rows, src_len]` ids -> best hypotheses `[rows, max_decode_len]` (EOS-terminated).

  Jittable with `cfg`, `beam_size`, `max_decode_len` and `grow_cache` static; the StableHLO
  export serializes exactly this function. The self-attention cache grows with the output
  (`search.cache_lengths`; `grow_cache=False`: one cache of max_decode_len positions, the
  same translations, slower).
  """
  # Per sentence, closed over: the encoder-decoder keys/values and the transposed vocabulary.
  # Only the self-attention cache goes through the search, which tiles it over beams and
  # reorders it at every step.
  context = model.decode_context(cfg, params, inputs)

  def logits_fn(tokens, cache):
    logits, cache = model.decode_step(cfg, params, cache, tokens, context)
    # Padding is never a translation token (search.py does not mask it).
    return logits.at[:, model.PAD_ID].set(-1e9), cache

  cache = model.init_cache(cfg, inputs.shape[0], 1 if grow_cache else max_decode_len)
  sequences, _ = search.beam_search(
      logits_fn, cache, batch_size=inputs.shape[0], beam_size=beam_size, alpha=alpha,
      max_decode_len=max_decode_len, max_lengths=max_lengths, eos_id=model.EOS_ID,
      bos_id=model.BOS_ID, grow_cache=model.grow_cache if grow_cache else None)
  return sequences[:, 0]


def truncation_warning(lines: Sequence[int], max_len: int, shown: int = 10) -> str:
  """'3 inputs longer than max_len=256 tokens were truncated: lines 4, 17, 90', naming the
  first `shown` line numbers and counting the rest ('and 5 more')."""
  listed = ', '.join(map(str, lines[:shown]))
  more = f' and {len(lines) - shown} more' if len(lines) > shown else ''
  if len(lines) == 1:
    return f'1 input longer than max_len={max_len} tokens was truncated: line {listed}'
  return (f'{len(lines)} inputs longer than max_len={max_len} tokens were truncated: '
          f'lines {listed}{more}')


def print_progress(done: int, total: int, elapsed: float, stream=sys.stderr) -> None:
  """A one-line progress bar with sentences/s, redrawn in place."""
  width = 30
  filled = int(width * done / max(total, 1))
  rate = done / max(elapsed, 1e-9)
  stream.write(f'\r[{"#" * filled}{"." * (width - filled)}] {done}/{total} sentences '
               f'{rate:.1f} sent/s')
  if done >= total:
    stream.write('\n')
  stream.flush()


def from_config(config, params, tokenizer) -> Translator:
  """A Translator with the inference settings of a run config (configs/default.py keys)."""
  cfg = model.TransformerConfig.from_config(config)
  return Translator(cfg, params, tokenizer, beam_size=config.beam_size,
                    alpha=config.length_penalty_alpha, max_decode_extra=config.max_decode_extra,
                    batch_sentences=config.decode_batch_sentences,
                    bucket_lengths=config.bucket_lengths, threads=config.decode_threads)
