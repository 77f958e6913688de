"""A batch of source rows searched on this process's devices: the jitted functions that
`Translator` (and `--mode=decode`, eval, the exports) run.

`SearchSettings` says how (static, one compilation per value): the paper's beam search (beam 4,
alpha 0.6, §6.1), greedy search, or sampling (`model/sampling.py`), with or without n-gram
blocking; a target prefix per row and the sampling keys are arrays beside the inputs.
`decode_batch` (the best hypothesis) is what the StableHLO export serializes and stays the
paper's beam search.
"""

import dataclasses
import functools
from typing import Any, Callable, Dict, Optional

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from t2t_jax.model import beam_decode, compaction, module_jit, search, transformer as model_lib
from t2t_jax.runtime import multihost

STRATEGIES = ('beam', 'greedy', 'sample')


@dataclasses.dataclass(frozen=True)
class SearchSettings:
  """How each row is decoded (`--config.decode_strategy` and its keys).

  Attributes:
    beam_size: K of 'beam' (the paper: 4); the n-best list is at most K long.
    alpha: the GNMT length penalty of 'beam' (0.6), and of the score of a sample.
    strategy: 'beam', 'greedy' (beam 1, alpha 0: the argmax each step) or 'sample'.
    no_repeat_ngram_size: no output repeats an n-gram of tokens (0: off).
    temperature, top_k, top_p: 'sample''s distribution (`sampling.truncated_logits`).
    length_rule: how 'beam' compares lengths, and a sample's score: 'gnmt' (the paper's) or
      'transformers' (`length_rules`).
  """
  beam_size: int = 4
  alpha: float = 0.6
  strategy: str = 'beam'
  no_repeat_ngram_size: int = 0
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  length_rule: str = 'gnmt'

  @property
  def plain(self) -> bool:
    """The paper's beam search, unconstrained: `decode_batch` exactly."""
    return self.strategy == 'beam' and not self.no_repeat_ngram_size

  @property
  def width(self) -> int:
    """Hypotheses per row the search returns (1 for greedy and sampling)."""
    return self.beam_size if self.strategy == 'beam' else 1


def search_batch(model: model_lib.ModelLike, settings: SearchSettings, params,
                 inputs: jax.Array, max_lengths: jax.Array, max_decode_len: int,
                 extras: Dict[str, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(sequences `[rows, W, L]` int32, scores `[rows, W]` float32, log probs `[rows, W]`
  float32), W = `settings.width`, best first, as `decode_batch_n_best`. `extras`: 'prefix'
  `[rows, P]` int32 (0-padded target prefixes) and, for sampling, 'row_keys' `[rows, 2]`
  uint32. A sample's score is its log prob over `search.length_penalty(its length, alpha)`."""
  prefix = extras.get('prefix')
  if settings.strategy == 'sample':
    sequences, log_probs = beam_decode.sample_decode(
        model, params, inputs, max_lengths, max_decode_len, extras['row_keys'],
        temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
        no_repeat_ngram_size=settings.no_repeat_ngram_size, prefix=prefix)
    lengths = search.output_lengths(sequences, model_lib.EOS_ID)
    scores = log_probs / search.length_penalty(lengths, settings.alpha, settings.length_rule)
    return sequences[:, None], scores[:, None], log_probs[:, None]
  beam, alpha = ((1, 0.0) if settings.strategy == 'greedy'
                 else (settings.beam_size, settings.alpha))
  sequences, scores = beam_decode.beam_decode(
      model, beam, alpha, params, inputs, max_lengths, max_decode_len,
      no_repeat_ngram_size=settings.no_repeat_ngram_size, prefix=prefix,
      length_rule=settings.length_rule)
  return sequences, scores, search.raw_log_probs(sequences, scores, alpha, model_lib.EOS_ID,
                                                 settings.length_rule)


def sharded_decoder(model: model_lib.ModelLike, beam_size: int, alpha: float,
                    mesh: Mesh, n_best: bool = False,
                    settings: Optional[SearchSettings] = None,
                    length_rule: str = 'gnmt') -> Callable[..., Any]:
  """Jitted `(params, inputs, max_lengths, max_decode_len) -> [rows, max_decode_len]` int32:
  `decode_batch` with the rows of `inputs` `[rows, src_len]` int32 and `max_lengths`
  `[rows]` int32 split over `mesh` (axis `multihost.ROWS`; rows a multiple of its size) and
  `params` replicated on it; `max_decode_len` is static. With `n_best`,
  `decode_batch_n_best` instead (its three outputs, split alike). `length_rule`: the
  search's (`length_rules`).

  A shard_map, not sharding propagation: every device runs exactly the one-device beam
  search on its own rows, with no collective at all; its while loops stop when its own
  sentences are done, which changes no result (search.py freezes finished sentences).

  `settings` given: `search_batch` instead, with n_best's three outputs, and a fifth argument
  `extras` (its arrays, split alike).

  Decoders of equal models and settings share their compiled programs (`module_jit`): a
  second `Translator` of the same run, or the final test decode after the dev BLEU evals,
  compiles nothing again.
  """
  if settings is not None:
    return _search_rows.bind(model, settings, mesh)
  return _decode_rows.bind(model, beam_size, alpha, mesh, n_best, length_rule)


@module_jit.jit_on_module(static_argnums=(1, 2, 3, 4, 5, 9))
def _decode_rows(model: model_lib.ModelLike, beam_size: int, alpha: float, mesh: Mesh,
                 n_best: bool, length_rule: str, params, inputs: jax.Array,
                 max_lengths: jax.Array, max_decode_len: int):
  """`sharded_decoder`'s program without settings."""
  rows = P(multihost.ROWS)

  def per_device(params, inputs, max_lengths):
    return (decode_batch_n_best if n_best else decode_batch)(
        model, beam_size, alpha, params, inputs, max_lengths, max_decode_len,
        length_rule=length_rule)
  return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), rows, rows),
                       out_specs=(rows,) * 3 if n_best else rows,
                       check_vma=False)(params, inputs, max_lengths)


@module_jit.jit_on_module(static_argnums=(1, 2, 6))
def _search_rows(model: model_lib.ModelLike, settings: SearchSettings, mesh: Mesh, params,
                 inputs: jax.Array, max_lengths: jax.Array, max_decode_len: int, extras):
  """`sharded_decoder`'s program with settings."""
  rows = P(multihost.ROWS)
  return jax.shard_map(
      lambda p, x, m, e: search_batch(model, settings, p, x, m, max_decode_len, e),
      mesh=mesh, in_specs=(P(), rows, rows, rows), out_specs=(rows,) * 3,
      check_vma=False)(params, inputs, max_lengths, extras)


def decoder(model: model_lib.ModelLike, beam_size: int, alpha: float, mesh: Mesh,
            n_best: bool = False, length_rule: str = 'gnmt') -> Callable[..., Any]:
  """How `Translator` decodes a batch on `mesh`, as `sharded_decoder(..., n_best)` takes it: on
  one CPU device a batch of `compaction.MIN_ROWS` rows or more goes to `compacting_decoder`,
  where finished sentences leaving the batch pays; smaller ones, every batch on several
  devices and on an accelerator, to `sharded_decoder` (one program a batch; the same
  translations either way). See `compacts`."""
  sharded = sharded_decoder(model, beam_size, alpha, mesh, n_best, length_rule=length_rule)
  platform = mesh.devices.flat[0].platform
  if not compacts(platform, mesh.size, compaction.MIN_ROWS):
    return sharded
  compacting = compacting_decoder(model, beam_size, alpha, n_best, length_rule)

  def decode(params, inputs, max_lengths, max_decode_len: int):
    chosen = compacting if compacts(platform, mesh.size, inputs.shape[0]) else sharded
    return chosen(params, inputs, max_lengths, max_decode_len)
  return decode


def compacts(platform: str, devices: int, rows: int) -> bool:
  """Whether a batch of `rows` on `devices` devices of `platform` decodes compacting. Only on
  one CPU device, where it was measured to pay from `compaction.MIN_ROWS` rows (1.29x at 64
  rows). Not on an accelerator, where it is unmeasured: a small model's step there is mostly
  kernel launches, which fewer rows do not shorten, while every segment waits on the host and
  every batch size x cache length is one more program to compile (the embedded default on
  the H200 spent half its 166 s compiling, issue 55 part 2). Several devices shard one
  program."""
  return platform == 'cpu' and devices == 1 and rows >= compaction.MIN_ROWS


def compacting_decoder(model: model_lib.ModelLike, beam_size: int, alpha: float,
                       n_best: bool = False, length_rule: str = 'gnmt') -> Callable[..., Any]:
  """`(params, inputs, max_lengths, max_decode_len)` -> `decode_batch`'s result (with
  `n_best`, `decode_batch_n_best`'s three) as numpy arrays, the same numbers, from
  `compaction.compacting_beam_decode`: finished sentences leave the batch (rows x steps
  75.4 -> 56.6 a sentence on the bundled test set at 64 rows). One device; not jittable."""
  def decode(params, inputs, max_lengths, max_decode_len: int):
    sequences, scores = compaction.compacting_beam_decode(
        model, beam_size, alpha, params, np.asarray(inputs), np.asarray(max_lengths),
        max_decode_len, best_only=not n_best, length_rule=length_rule)
    if not n_best:
      return sequences[:, 0]
    return sequences, scores, np.asarray(search.raw_log_probs(sequences, scores, alpha,
                                                              model_lib.EOS_ID, length_rule))
  return decode


def decode_batch(model: model_lib.ModelLike, beam_size: int, alpha: float, params,
                 inputs: jax.Array, max_lengths: jax.Array, max_decode_len: int,
                 grow_cache: bool = True, length_rule: str = 'gnmt') -> jax.Array:
  """`[rows, src_len]` ids -> best hypotheses `[rows, max_decode_len]` (EOS-terminated).

  Jittable with `model`, `beam_size`, `max_decode_len` and `grow_cache` static; the StableHLO
  export serializes exactly this function. The self-attention cache grows with the output
  (`search.cache_lengths`; `grow_cache=False`: one cache of max_decode_len positions, the
  same translations, slower). Only the best beam is returned, so each sentence stops as soon
  as it is certain (`search.beam_search`'s `best_only`: 7% fewer steps on the bundled test
  set, the same translations as `decode_batch_n_best`'s first beam). `length_rule`: the
  search's (`length_rules`; 'transformers' stops by the K-th hypothesis, as transformers).
  """
  sequences, _ = beam_decode.beam_decode(model, beam_size, alpha, params, inputs, max_lengths,
                                         max_decode_len, grow_cache, best_only=True,
                                         length_rule=length_rule)
  return sequences[:, 0]


def decode_batch_n_best(model: model_lib.ModelLike, beam_size: int, alpha: float, params,
                        inputs: jax.Array, max_lengths: jax.Array, max_decode_len: int,
                        grow_cache: bool = True, length_rule: str = 'gnmt'
                        ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`decode_batch`'s search, every beam: sequences `[rows, beam_size, max_decode_len]`
  int32 (EOS-terminated, best first, `[:, 0]` is decode_batch's), scores `[rows, beam_size]`
  float32 (descending, length-penalised: what the search ranks by; `search.NEG_INF` for a
  slot without a hypothesis) and their plain log probabilities `[rows, beam_size]` float32
  (`search.raw_log_probs`)."""
  sequences, scores = beam_decode.beam_decode(model, beam_size, alpha, params, inputs,
                                              max_lengths, max_decode_len, grow_cache,
                                              length_rule=length_rule)
  return sequences, scores, search.raw_log_probs(sequences, scores, alpha,
                                                 model_lib.EOS_ID, length_rule)
