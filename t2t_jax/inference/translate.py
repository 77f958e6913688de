"""Translating text with beam search (§6.1), in input order.

Sentences are tokenized, sorted by length and decoded in batches of a fixed number of rows
padded to a fixed set of lengths, so one compilation serves every batch of a length bucket;
results are put back in input order. Empty input lines give empty output lines without
being decoded. Maximum output length = input length (tokens, with EOS) + max_decode_extra.

Devices: on an accelerator host with several chips every batch is split over all of them
(one beam search, SPMD, on this process's devices; `multihost` splits the sentences across
processes); on CPU batches run on one device, one batch per core at once
(`choose_parallelism`).
"""

import functools
import sys
from typing import Callable, List, Optional, Sequence

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from t2t_jax.inference import portable
from t2t_jax.model import transformer as model_lib, search
from t2t_jax.runtime import multihost


PARALLELISM = ('auto', 'sharded', 'threads')


def choose_parallelism(parallelism: str = 'auto',
                       devices: Optional[Sequence[jax.Device]] = None) -> str:
  """'sharded' or 'threads': how a process spreads decoding over `devices` (its local ones).

  'sharded': every batch's rows split over all local devices, one SPMD beam search
  (`sharded_decoder`). 'threads': every batch on the first local device, `threads` batches
  at once. 'auto' is 'sharded' on accelerators with several local devices (a TPU v5e-8 host,
  an 8-GPU host: each chip decodes its own rows instead of idling), otherwise 'threads'. A
  CPU has one device unless more are simulated (--xla_force_host_platform_device_count, as
  the tests do), and simulated devices share the same cores: splitting rows over them adds
  no compute, only per-device overhead and batches rounded up to the device count. On the
  bundled test set (2 loaded cores, 8 simulated devices, quickstart's model, 4 and 8 rows:
  benchmarks/decode_sharded.py) sharded decoding ran 0.81-0.87x as fast as one device, the
  same translations; threads use idle cores (1.6x on 2 idle ones: `default_threads`).
  """
  if parallelism not in PARALLELISM:
    raise ValueError(f'parallelism {parallelism!r}: expected one of {PARALLELISM}')
  if parallelism != 'auto':
    return parallelism
  devices = jax.local_devices() if devices is None else devices
  return 'sharded' if len(devices) > 1 and devices[0].platform != 'cpu' else 'threads'


class Translator:
  """Beam-search decoding of sentences with a trained model.

  Args:
    model: the model (`Transformer`, or a variant with its own extension points), or its
      `TransformerConfig` (the paper's model).
    params: model parameters (host arrays, device arrays or the training mesh's replicated
      arrays); placed on the decoding devices once, at the first `translate` after they are
      set (assigning `translator.params` re-places them, and compiles nothing new).
    tokenizer: `encode(str) -> ids` (no EOS), `decode(ids) -> str` (data.tokenizer.Tokenizer).
    beam_size: 4 in the paper; 1 is greedy.
    alpha: length penalty (0.6 in the paper).
    max_decode_extra: maximum output length = input length + this (50 in the paper).
    batch_sentences: rows of every decode batch; sharded, rounded up to a multiple of the
      local device count (the last batch of a call is padded with empty rows).
    bucket_lengths: padded source lengths; longer inputs are padded to a multiple of 32.
    threads: batches decoded at once (None or 0: `portable.default_threads()`, one per core
      on a CPU backend, with 'threads'; 1 with 'sharded').
    parallelism: 'auto', 'sharded' or 'threads' (`choose_parallelism`); no choice changes a
      translation.

  Attributes:
    parallelism: 'sharded' or 'threads', as chosen.
    mesh: the decoding devices (`multihost.local_mesh`): all local ones when sharded, else
      the first.
    placements: how many times parameters were placed on `mesh`.
    truncated_lines: 1-based positions, in the last `translate` call's input, of the inputs
      cut to fit `cfg.max_len` (a warning names them too).
  """

  def __init__(self, model: model_lib.ModelLike, params, tokenizer, *, beam_size: int = 4,
               alpha: float = 0.6, max_decode_extra: int = 50, batch_sentences: int = 64,
               bucket_lengths: Sequence[int] = (16, 32, 64, 128, 256),
               threads: Optional[int] = None, parallelism: str = 'auto'):
    self.model = model_lib.as_model(model, deterministic=True, decode=False)
    self.cfg = self.model.cfg
    self.params = params
    self.tokenizer = tokenizer
    self.beam_size, self.alpha = beam_size, alpha
    self.max_decode_extra = max_decode_extra
    self.parallelism = choose_parallelism(parallelism)
    devices = jax.local_devices()
    self.mesh = multihost.local_mesh(devices if self.parallelism == 'sharded' else devices[:1])
    self.batch_sentences = -(-batch_sentences // self.mesh.size) * self.mesh.size
    self.bucket_lengths = tuple(sorted(bucket_lengths))
    self.threads = threads or (portable.default_threads() if self.parallelism == 'threads'
                               else 1)
    self._decode = sharded_decoder(self.model, beam_size, alpha, self.mesh)
    self.placements = 0
    self.compiled_shapes = set()
    self.truncated_lines: List[int] = []

  @property
  def params(self):
    return self._params

  @params.setter
  def params(self, params) -> None:
    self._params, self._placed = params, None

  def _placed_params(self):
    """The parameters replicated on `mesh`: placed once per params object, not per batch."""
    if self._placed is None:
      self._placed = multihost.local_replicas(self._params, self.mesh)
      self.placements += 1
    return self._placed

  def _decode_numpy(self, params, inputs: np.ndarray, max_lengths: np.ndarray,
                    max_decode_len: int) -> np.ndarray:
    if (inputs.shape[1], max_decode_len) not in self.compiled_shapes:
      self.compiled_shapes.add((inputs.shape[1], max_decode_len))
      logging.info('compiling decode for source length %d, output length %d', inputs.shape[1],
                   max_decode_len)
    rows = NamedSharding(self.mesh, P(multihost.ROWS))
    return np.asarray(self._decode(params, *jax.device_put((inputs, max_lengths), rows),
                                   max_decode_len))

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
    params = self._placed_params()  # here, not in the decoding threads: placed once
    outputs, truncated = portable.translate_ids(
        sentences, self.tokenizer.encode, functools.partial(self._decode_numpy, params),
        rows=self.batch_sentences, buckets=self.bucket_lengths, max_len=self.cfg.max_len,
        max_decode_extra=self.max_decode_extra, progress=progress, threads=self.threads)
    self.truncated_lines = ([line_numbers[i - 1] for i in truncated]
                            if line_numbers is not None else truncated)
    if self.truncated_lines:
      logging.warning('%s', truncation_warning(self.truncated_lines, self.cfg.max_len))
    return outputs


def sharded_decoder(model: model_lib.ModelLike, beam_size: int, alpha: float,
                    mesh: Mesh) -> Callable[..., jax.Array]:
  """Jitted `(params, inputs, max_lengths, max_decode_len) -> [rows, max_decode_len]` int32:
  `decode_batch` with the rows of `inputs` `[rows, src_len]` int32 and `max_lengths`
  `[rows]` int32 split over `mesh` (axis `multihost.ROWS`; rows a multiple of its size) and
  `params` replicated on it; `max_decode_len` is static.

  A shard_map, not sharding propagation: every device runs exactly the one-device beam
  search on its own rows, with no collective at all; its while loops stop when its own
  sentences are done, which changes no result (search.py freezes finished sentences).
  """
  rows = P(multihost.ROWS)

  @functools.partial(jax.jit, static_argnums=3)
  def decode(params, inputs: jax.Array, max_lengths: jax.Array, max_decode_len: int):
    def per_device(params, inputs, max_lengths):
      return decode_batch(model, beam_size, alpha, params, inputs, max_lengths, max_decode_len)
    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), rows, rows), out_specs=rows,
                         check_vma=False)(params, inputs, max_lengths)
  return decode


def decode_batch(model: model_lib.ModelLike, beam_size: int, alpha: float, params,
                 inputs: jax.Array, max_lengths: jax.Array, max_decode_len: int,
                 grow_cache: bool = True) -> jax.Array:
  """`[rows, src_len]` ids -> best hypotheses `[rows, max_decode_len]` (EOS-terminated).

  Jittable with `model`, `beam_size`, `max_decode_len` and `grow_cache` static; the StableHLO
  export serializes exactly this function. The self-attention cache grows with the output
  (`search.cache_lengths`; `grow_cache=False`: one cache of max_decode_len positions, the
  same translations, slower).
  """
  # Per sentence, closed over: the encoder-decoder keys/values and the transposed vocabulary.
  # Only the self-attention cache goes through the search, which tiles it over beams and
  # reorders it at every step.
  context = model_lib.decode_context(model, params, inputs)

  def logits_fn(tokens, cache):
    logits, cache = model_lib.decode_step(model, params, cache, tokens, context)
    # Padding is never a translation token (search.py does not mask it).
    return logits.at[:, model_lib.PAD_ID].set(-1e9), cache

  cache = model_lib.init_cache(model, inputs.shape[0], 1 if grow_cache else max_decode_len)
  sequences, _ = search.beam_search(
      logits_fn, cache, batch_size=inputs.shape[0], beam_size=beam_size, alpha=alpha,
      max_decode_len=max_decode_len, max_lengths=max_lengths, eos_id=model_lib.EOS_ID,
      bos_id=model_lib.BOS_ID, grow_cache=model_lib.grow_cache if grow_cache else None)
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
  """A Translator with the inference settings of a run config (configs/default.py keys;
  `decode_parallelism`)."""
  cfg = model_lib.TransformerConfig.from_config(config)
  return Translator(cfg, params, tokenizer, beam_size=config.beam_size,
                    alpha=config.length_penalty_alpha, max_decode_extra=config.max_decode_extra,
                    batch_sentences=config.decode_batch_sentences,
                    bucket_lengths=config.bucket_lengths, threads=config.decode_threads,
                    parallelism=config.decode_parallelism)
