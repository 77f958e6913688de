"""grain input pipeline: tokenize, filter by length, length-bucketed batches to a token budget.

Every pair is tokenized and gets EOS (id 1) appended on both sides. Training pairs whose
source or target (with EOS) is longer than `config.max_length` are dropped and counted.
A kept pair goes to the smallest bucket length L in `config.bucket_lengths` with
L >= max(len(source), len(target)). A bucket of length L yields batches of exactly R_L rows
per process, R_L = the largest multiple of `rows_multiple` (the local device count) with
R_L * L <= tokens_per_batch / process_count, so the padded tokens of a step never exceed
the budget and there are at most len(bucket_lengths) distinct shapes (compilations).

Multi-process: all processes compute the same *global* plan from the token lengths of the
whole corpus: the same shuffle, the same sequence of buckets, global batches of
R_L * process_count rows, of which process p gets rows p, p + P, ... So every process sees
the same shape at the same step (as `jax.make_array_from_process_local_data` needs), the
shards are disjoint and together cover the data, and each process gathers the token ids of
its own rows only.

Tokenized once: every pair's ids are encoded once into a `token_store` (on disk under
`cache_dir`, memory-mapped; in memory without one), the token lengths that plan the epochs
come from it, and a batch is a vectorised gather from it: no tokenizer on the per-batch path.

The plan of an epoch is a pure function of (token lengths, shuffle_seed, epoch): a fresh
order every epoch; partially filled buckets are flushed at the epoch's end with all-zero
padding rows, so every kept pair appears exactly once per epoch and the number of batches
per epoch is the same for every epoch. The iterator's state is therefore just (epoch,
batch in epoch), JSON-serialisable, and restoring it reproduces the continuation exactly,
including the pairs that would sit half-way in a bucket buffer. A mixture (`--config.corpora`,
`mixture.py`) with weights draws each epoch's pairs anew from (shuffle_seed, epoch): its
epochs differ in size, and the state stays (epoch, batch in epoch).

Batches: dicts of numpy int32 arrays `inputs` [R_L, L] and `targets` [R_L, L], padded with
0; `targets` end with EOS (the trainer derives the decoder input by shifting right with
EOS as the start symbol).

Packing (`config.pack_examples`, training only): instead of buckets, one length L (the
smallest bucket length >= max_length) and R rows per process (as for bucket L); each row
holds several pairs back to back, with `inputs_segmentation`, `targets_segmentation`,
`inputs_position` and `targets_position` [R, L] int32 added (see `packing`). All of the
above holds, except that the number of batches of an epoch depends on how its order packs,
so it may differ by a few from epoch to epoch; `PipelineInfo` counts epoch 0. Eval batches
are never packed.
"""

import dataclasses
import sys
from typing import Any, Optional, Sequence

from absl import logging
import grain
import numpy as np

from t2t_jax.data import bucketing, gather, mixture, packing, token_store


class PipelineError(ValueError):
  """A configuration or state the pipeline cannot honour."""


def validate_config(config: Any, *, rows_multiple: int = 1, process_count: int = 1) -> None:
  """Raises PipelineError for data settings the pipeline cannot honour."""
  bucket_rows(config, rows_multiple, process_count)
  if not isinstance(config.shuffle_seed, int) or config.shuffle_seed < 0:
    raise PipelineError(f'config.shuffle_seed must be an int >= 0, not '
                        f'{config.shuffle_seed!r}.')


def bucket_rows(config: Any, rows_multiple: int = 1,
                process_count: int = 1) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """(bucket lengths used for training, rows per process of each bucket).

  Buckets above the first one that covers `config.max_length` can never be used and are
  left out.
  """
  lengths = tuple(int(x) for x in config.bucket_lengths)
  max_length = int(config.max_length)
  if max_length < 1:
    raise PipelineError(f'config.max_length must be >= 1, not {max_length}.')
  if not lengths or min(lengths) < 1 or list(lengths) != sorted(set(lengths)):
    raise PipelineError(f'config.bucket_lengths must be increasing positive ints, not '
                        f'{config.bucket_lengths}.')
  if lengths[-1] < max_length:
    raise PipelineError(f'config.bucket_lengths {lengths} must cover config.max_length='
                        f'{max_length}: the largest bucket is {lengths[-1]}.')
  if rows_multiple < 1 or process_count < 1:
    raise PipelineError(f'rows_multiple ({rows_multiple}) and process_count '
                        f'({process_count}) must be >= 1.')
  used = tuple(x for x in lengths if x < max_length) + (
      next(x for x in lengths if x >= max_length),)
  rows = tuple(_rows(config.tokens_per_batch, x, rows_multiple, process_count) for x in used)
  if rows[-1] < rows_multiple:
    raise PipelineError(
        f'config.tokens_per_batch={config.tokens_per_batch} is too small: the largest bucket '
        f'({used[-1]} tokens) needs at least {rows_multiple * used[-1] * process_count} '
        f'({rows_multiple} rows per process x {process_count} processes).')
  return used, rows


def _rows(tokens_per_batch: int, length: int, rows_multiple: int, process_count: int) -> int:
  """Largest multiple R of rows_multiple with R * length <= tokens_per_batch / processes."""
  return (int(tokens_per_batch) // (process_count * length * rows_multiple)) * rows_multiple


@dataclasses.dataclass(frozen=True)
class PipelineInfo:
  """What a pipeline does with its corpus (all counts over all processes)."""
  num_pairs: int               # pairs in the source
  num_used: int                # pairs that go into batches
  num_dropped_too_long: int    # pairs longer than max_length (eval: than config.max_len)
  bucket_lengths: tuple[int, ...]
  bucket_rows: tuple[int, ...]   # rows per process of each bucket's batches
  bucket_pairs: tuple[int, ...]  # pairs per bucket
  batches_per_epoch: int
  process_count: int
  real_tokens: tuple[int, int] = (0, 0)  # (source, target) tokens with EOS of the used pairs
  padded_tokens: int = 0         # slots per side of all batches of an epoch (rows x length)
  packed_rows: int = 0           # packing: non-empty rows of epoch 0 (0: length buckets)

  @property
  def padding_efficiency(self) -> tuple[float, float]:
    """(source, target) real tokens / padded slots over an epoch's batches."""
    return tuple(n / max(self.padded_tokens, 1) for n in self.real_tokens)

  @property
  def num_shapes(self) -> int:
    """Distinct batch shapes that actually occur."""
    return sum(1 for n in self.bucket_pairs if n)


def shapes_summary(info: PipelineInfo) -> str:
  """One log line: the batch shapes (rows per process x length) and the counts."""
  shapes = ', '.join(f'{r}x{length} ({n} pairs)' for length, r, n in zip(
      info.bucket_lengths, info.bucket_rows, info.bucket_pairs) if n)
  if info.packed_rows:
    shapes += f', packed, {info.num_used / info.packed_rows:.2f} pairs per row'
  src_eff, tgt_eff = info.padding_efficiency
  return (f'{info.num_shapes} batch shapes [rows per process x length]: {shapes}; '
          f'{info.batches_per_epoch} batches per epoch over {info.process_count} '
          f'process(es); {info.num_used} of {info.num_pairs} pairs used, '
          f'{info.num_dropped_too_long} dropped as too long; padding efficiency (real / '
          f'padded tokens) source {src_eff:.2f}, target {tgt_eff:.2f}, about '
          f'{info.real_tokens[1] / max(info.batches_per_epoch, 1):,.0f} real target tokens '
          f'per batch.')


# State keys that define the data order; a state from another setting is refused.
_DATA_KEYS = ('num_pairs', 'num_used', 'shuffle_seed', 'bucket_lengths', 'pack_examples',
              'mixture')
# Keys that change with the topology; a mismatch resumes at the same fraction of the epoch.
_TOPOLOGY_KEYS = ('process_count', 'bucket_rows', 'batches_per_epoch')


_CORPUS_PAIRS = '_corpus_pairs'


class TrainIterator(grain.DatasetIterator):
  """Endless (or `num_epochs`) iterator of training batches with exact get/set_state.

  Attribute `info` (PipelineInfo). State: {'epoch', 'batch_in_epoch', ...} (JSON-able).
  A mixture's (`sampler`, `mixture.Sampler`) counts the pairs it hands out per entry:
  `take_shares`.
  """

  def __init__(self, plan: Any, reader: gather.Reader, info: PipelineInfo, shuffle_seed: int,
               process_index: int, num_epochs: Optional[int],
               read_options: grain.ReadOptions, sampler: Optional[mixture.Sampler] = None):
    super().__init__()
    self.info, self._sampler = info, sampler
    self._shares = mixture.ShareCounter([e.name for e in sampler.entries]) if sampler else None
    self._plan, self._reader, self._num_epochs = plan, reader, num_epochs
    self._read_options = read_options
    self._fixed = {'num_pairs': info.num_pairs, 'num_used': info.num_used,
                   'shuffle_seed': shuffle_seed, 'bucket_lengths': list(info.bucket_lengths),
                   'pack_examples': bool(info.packed_rows),
                   'process_count': info.process_count, 'process_index': process_index,
                   'bucket_rows': list(info.bucket_rows),
                   'batches_per_epoch': info.batches_per_epoch}
    if sampler is not None:  # another mixture is another data order; its shares for `info`
      self._fixed.update(mixture=sampler.state(), mixture_shares=sampler.shares)
    # The inner iterator's k-th batch is batch k after `_origin` (epoch, batch in epoch);
    # `_taken` batches of it were handed out.
    self._origin, self._taken = (0, 0), 0
    self._inner = self._start()

  def _locate(self, k: int) -> tuple[int, int]:
    """(epoch, batch in epoch) of batch k after the origin (packed epochs vary in size)."""
    epoch, index = self._origin
    index += k
    while index >= (n := self._plan.epoch_batches(epoch)):
      epoch, index = epoch + 1, index - n
    return epoch, index

  def _batch(self, k: int) -> dict[str, np.ndarray]:
    bucket, rows = self._plan.local_batch(*self._locate(k))
    batch = self._reader(bucket, rows)
    if self._sampler is not None:  # taken out again as the batch is handed out
      batch[_CORPUS_PAIRS] = self._sampler.corpus_pairs(rows)
    return batch

  def _start(self) -> Any:
    epoch, index = self._origin
    stop = sys.maxsize if self._num_epochs is None else max(0, sum(
        self._plan.epoch_batches(e) for e in range(epoch, self._num_epochs)) - index)
    ds = grain.MapDataset.range(0, stop).map(self._batch)
    return iter(ds.to_iter_dataset(self._read_options))

  def __next__(self) -> dict[str, np.ndarray]:
    batch = next(self._inner)
    self._taken += 1
    if self._shares is not None:
      self._shares.add(batch.pop(_CORPUS_PAIRS))
    return batch

  def take_shares(self) -> dict[str, float]:
    """A mixture's realised shares since the last call: {'data/share/<entry name>': the
    fraction of this process's pairs handed out that came from it}; {} for one corpus."""
    return self._shares.take() if self._shares is not None else {}

  def get_state(self) -> dict[str, Any]:
    epoch, index = self._locate(self._taken)
    return {'epoch': epoch, 'batch_in_epoch': index, **self._fixed}

  def set_state(self, state: dict[str, Any]) -> None:
    changed = [k for k in _DATA_KEYS if k in state and state[k] != self._fixed[k]]
    if changed:
      raise PipelineError('The data pipeline differs from the one that saved this state: ' +
                          ', '.join(f'{k} {state[k]} -> {self._fixed[k]}' for k in changed))
    epoch, index = int(state['epoch']), int(state['batch_in_epoch'])
    old_batches = int(state.get('batches_per_epoch', self._plan.num_batches))
    if any(k in state and state[k] != self._fixed[k] for k in _TOPOLOGY_KEYS):
      # Another device/process count gives another plan: resume at the same fraction.
      index = index * self._plan.epoch_batches(epoch) // max(old_batches, 1)
      logging.warning('Data state from another topology (%s); resuming at batch %d of epoch '
                      '%d, which is not an exact continuation.',
                      {k: state.get(k) for k in _TOPOLOGY_KEYS}, index, epoch)
    self._inner.close()
    self._origin, self._taken = (epoch, index), 0
    self._inner = self._start()

  def close(self) -> None:
    self._inner.close()
    super().close()


def _bucketing(config: Any, source: Any, tokenizer: Any, rows_multiple: int,
               process_index: int, process_count: int, cache_dir: Optional[str],
               eval_mode: bool) -> tuple[np.ndarray, tuple, tuple, int, tuple[int, int],
                                         tuple[np.ndarray, np.ndarray],
                                         token_store.TokenStore]:
  """Lengths -> (bucket of each pair, bucket lengths, rows per process, dropped count,
  (source, target) tokens of the kept pairs, (source, target) lengths of every pair, the
  token store the lengths come from)."""
  if not 0 <= process_index < process_count:
    raise PipelineError(f'process_index {process_index} not in [0, {process_count}).')
  validate_config(config, rows_multiple=rows_multiple, process_count=process_count)
  lengths, rows = bucket_rows(config, rows_multiple, process_count)
  store = token_store.load_or_build(source, tokenizer, cache_dir)
  src_len, tgt_len = store.lengths('source'), store.lengths('target')
  longest = np.maximum(src_len, tgt_len)
  limit = config.max_length
  if eval_mode:
    # Eval keeps every pair the model can take (up to config.max_len positions): the
    # pairs longer than every bucket get one more bucket.
    limit = max(lengths[-1], int(config.max_len))
    over = longest[(longest > lengths[-1]) & (longest <= limit)]
    if over.size:
      extra = min(-(-int(over.max()) // 8) * 8, limit)
      lengths += (extra,)
      rows += (max(rows_multiple, _rows(config.tokens_per_batch, extra, rows_multiple,
                                        process_count)),)
  bucket_of = np.searchsorted(np.asarray(lengths), longest, side='left').astype(np.int64)
  bucket_of[longest > limit] = -1
  kept = bucket_of >= 0
  real = (int(np.sum(src_len[kept])), int(np.sum(tgt_len[kept])))
  return (bucket_of, lengths, rows, int(np.sum(longest > limit)), real, (src_len, tgt_len),
          store)


def _make(config, source, tokenizer, rows_multiple, process_index, process_count, cache_dir,
          seed: Optional[int], row_ids: Optional[packing.RowIds] = None
          ) -> tuple[Any, gather.Reader, PipelineInfo, Optional[mixture.Sampler]]:
  bucket_of, lengths, rows, dropped, real, (src_len, tgt_len), store = _bucketing(
      config, source, tokenizer, rows_multiple, process_index, process_count, cache_dir,
      eval_mode=seed is None)
  sampler = None  # a training mixture (`mixture.MixedSource`) draws each epoch's pairs
  if seed is not None and getattr(source, 'entries', None):
    sampler = mixture.Sampler(source.boundaries, np.flatnonzero(bucket_of >= 0),
                              source.entries, seed)
    logging.info('Mixture: %s of each epoch\'s %d pairs', ', '.join(
        f'{n} {share:.1%}' for n, share in sampler.shares.items()), sampler.counts.sum())
  epoch_pairs = sampler.pairs if sampler else None
  packed = bool(config.pack_examples) and seed is not None  # eval is never packed
  if packed:  # one shape: the largest bucket used, with its rows
    lengths, rows = lengths[-1:], rows[-1:]
    plan = packing.PackedPlan(src_len, tgt_len, np.flatnonzero(bucket_of >= 0), lengths[0],
                              rows[0] * process_count, process_index, process_count, seed,
                              row_ids=row_ids, epoch_pairs=epoch_pairs)
  else:
    plan = bucketing.BucketPlan(bucket_of, [r * process_count for r in rows], process_index,
                                process_count, seed, epoch_pairs)
  info = PipelineInfo(len(source), len(source) - dropped, dropped, lengths, rows,
                      plan.bucket_pairs, plan.num_batches, process_count, real,
                      plan.padded_tokens(lengths), plan.rows_per_epoch(0) if packed else 0)
  name = getattr(source, 'name', None) or type(source).__name__
  if info.num_used == 0:
    raise PipelineError(f'No pair of {name} fits: all {info.num_pairs} are longer than '
                        f'{config.max_length} tokens.')
  if dropped:
    logging.warning('%s: dropped %d of %d pairs longer than %d tokens.', name, dropped,
                    info.num_pairs, config.max_length if seed is not None else config.max_len)
  logging.info('%s pipeline (%s): %s', 'Eval' if seed is None else 'Train', name,
               shapes_summary(info))
  return plan, gather.Reader(store, lengths, packed), info, sampler


def make_train_iterator(config: Any, source: Any, tokenizer: Any, *, rows_multiple: int = 1,
                        process_index: int = 0, process_count: int = 1,
                        num_epochs: Optional[int] = None, cache_dir: Optional[str] = None,
                        num_threads: int = 2, prefetch_buffer_size: int = 4,
                        row_ids: Optional[packing.RowIds] = None) -> TrainIterator:
  """The training batches of this process (see the module docstring).

  Args:
    config: uses max_length, bucket_lengths, tokens_per_batch, shuffle_seed, pack_examples.
    source: random access to `{'source': str, 'target': str}` with `len()`.
    tokenizer: `encode_batch(texts) -> list[list[int]]` (tokenizer.Tokenizer).
    rows_multiple: rows of every batch are a multiple of this (the local device count).
    process_index, process_count: this process and the number of processes.
    num_epochs: None repeats forever.
    cache_dir: where the token store lives between runs (`<workdir>/data_cache`; a remote
      one means this host's cache folder, `token_store.local_cache_dir`).
    num_threads, prefetch_buffer_size: grain read threads and batches read ahead.
    row_ids: with `pack_examples`, a faster first-fit for large corpora
      (`runtime.first_fit.row_ids`; see `packing.pack`).

  Returns:
    A grain DatasetIterator of {'inputs': int32 [R_L, L], 'targets': int32 [R_L, L]}, and
    with `config.pack_examples` `inputs_segmentation`, `targets_segmentation`,
    `inputs_position`, `targets_position` (all [R, L] int32, see `packing`).
  """
  plan, reader, info, sampler = _make(config, source, tokenizer, rows_multiple, process_index,
                                      process_count, cache_dir, seed=int(config.shuffle_seed),
                                      row_ids=row_ids)
  return TrainIterator(plan, reader, info, int(config.shuffle_seed), process_index,
                       num_epochs, grain.ReadOptions(num_threads=num_threads,
                                                     prefetch_buffer_size=prefetch_buffer_size),
                       sampler)


class EvalBatches(list):
  """A list of eval batches with attribute `info` (PipelineInfo)."""
  info: PipelineInfo


def make_eval_batches(config: Any, source: Any, tokenizer: Any, *, rows_multiple: int = 1,
                      process_index: int = 0, process_count: int = 1) -> EvalBatches:
  """All batches of an eval split, in a fixed order (corpus order within each bucket).

  Same buckets and rows as training, but eval keeps the pairs longer than max_length: they
  go to one extra bucket whose length is the longest such pair rounded up to a multiple of
  8 (at least rows_multiple rows, so it may exceed the token budget). Only pairs longer
  than config.max_len (the model's largest position) are dropped, counted and logged.
  Every process gets the same number of batches with the same shapes.
  """
  plan, reader, info, _ = _make(config, source, tokenizer, rows_multiple, process_index,
                             process_count, None, seed=None)
  batches = EvalBatches(reader(*plan.local_batch(0, k)) for k in range(plan.num_batches))
  batches.info = info
  return batches
