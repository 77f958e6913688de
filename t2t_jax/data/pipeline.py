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
shards are disjoint and together cover the data, and each process reads and tokenizes the
text of its own rows only (after one pass over all pairs for their lengths, which
`cache_dir` can keep between runs).

The plan of an epoch is a pure function of (token lengths, shuffle_seed, epoch): a fresh
order every epoch; partially filled buckets are flushed at the epoch's end with all-zero
padding rows, so every kept pair appears exactly once per epoch and the number of batches
per epoch is the same for every epoch. The iterator's state is therefore just (epoch,
batch in epoch), JSON-serialisable, and restoring it reproduces the continuation exactly,
including the pairs that would sit half-way in a bucket buffer.

Batches: dicts of numpy int32 arrays `inputs` [R_L, L] and `targets` [R_L, L], padded with
0; `targets` end with EOS (the trainer derives the decoder input by shifting right with
EOS as the start symbol).
"""

import dataclasses
import hashlib
import os
import sys
import tempfile
import threading
from typing import Any, Optional, Sequence

from absl import logging
import grain
import numpy as np

from t2t_jax.data.tokenizer import EOS_ID


class PipelineError(ValueError):
  """A configuration or state the pipeline cannot honour."""


def validate_config(config: Any, *, rows_multiple: int = 1, process_count: int = 1) -> None:
  """Raises PipelineError for data settings the pipeline cannot honour."""
  if config.pack_examples:
    raise PipelineError('config.pack_examples=True is not supported: t2t_jax batches by '
                        'length buckets instead of packing; set pack_examples=False.')
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


def _get_items(source: Any, indices: Sequence[int]) -> list[dict[str, str]]:
  getitems = getattr(source, '__getitems__', None)
  return getitems(list(indices)) if getitems else [source[i] for i in indices]


def pair_lengths(source: Any, tokenizer: Any, *, cache_dir: Optional[str] = None,
                 chunk_size: int = 4096) -> tuple[np.ndarray, np.ndarray]:
  """Token lengths with EOS of every pair: (source [N] int32, target [N] int32).

  With `cache_dir`, a source that has a `name` (corpora.ParallelTextSource: it contains
  the content hash of local corpora) and a tokenizer with a `fingerprint` keep their
  lengths in `<cache_dir>/lengths-<key>.npz`, so a resumed run skips this pass.
  """
  n = len(source)
  cache = None
  name, fingerprint = getattr(source, 'name', None), getattr(tokenizer, 'fingerprint', None)
  if cache_dir and name and fingerprint:
    key = hashlib.sha256(f'{name}\0{n}\0{fingerprint}'.encode()).hexdigest()[:24]
    cache = os.path.join(cache_dir, f'lengths-{key}.npz')
    if os.path.isfile(cache):
      with np.load(cache) as f:
        if len(f['source']) == n:
          return f['source'], f['target']
  src_len, tgt_len = np.zeros(n, np.int32), np.zeros(n, np.int32)
  for start in range(0, n, chunk_size):
    items = _get_items(source, range(start, min(n, start + chunk_size)))
    stop = start + len(items)
    src_len[start:stop] = [len(x) + 1 for x in tokenizer.encode_batch(
        [it['source'] for it in items])]
    tgt_len[start:stop] = [len(x) + 1 for x in tokenizer.encode_batch(
        [it['target'] for it in items])]
    if (start // chunk_size) % 250 == 249:
      logging.info('Token lengths: %d of %d pairs', stop, n)
  if cache:  # atomic: temp file + rename
    os.makedirs(cache_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix='.tmp-lengths-', suffix='.npz')
    with os.fdopen(fd, 'wb') as f:
      np.savez(f, source=src_len, target=tgt_len)
    os.replace(tmp, cache)
  return src_len, tgt_len


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
  src_eff, tgt_eff = info.padding_efficiency
  return (f'{info.num_shapes} batch shapes [rows per process x length]: {shapes}; '
          f'{info.batches_per_epoch} batches per epoch over {info.process_count} '
          f'process(es); {info.num_used} of {info.num_pairs} pairs used, '
          f'{info.num_dropped_too_long} dropped as too long; padding efficiency (real / '
          f'padded tokens) source {src_eff:.2f}, target {tgt_eff:.2f}, about '
          f'{info.real_tokens[1] / max(info.batches_per_epoch, 1):,.0f} real target tokens '
          f'per batch.')


class _Plan:
  """Which pairs form which batch: a pure function of (lengths, seed, epoch)."""

  def __init__(self, bucket_of: np.ndarray, global_rows: Sequence[int], process_index: int,
               process_count: int, seed: Optional[int]):
    self._bucket_of = bucket_of  # [N] bucket of each pair, -1: dropped
    self._used = np.flatnonzero(bucket_of >= 0)
    self._global_rows = tuple(global_rows)
    self._process = (process_index, process_count)
    self._seed = seed  # None: corpus order (eval)
    self._cache: dict[int, list[tuple[int, np.ndarray]]] = {}
    self._lock = threading.Lock()  # grain reads batches from several threads
    counts = np.bincount(bucket_of[self._used], minlength=len(global_rows))
    self.bucket_pairs = tuple(int(c) for c in counts)
    self.num_batches = sum(-(-c // g) for c, g in zip(self.bucket_pairs, self._global_rows))

  def padded_tokens(self, lengths: Sequence[int]) -> int:
    """Slots (rows x length over all processes) of one side of an epoch's batches."""
    return sum(-(-c // g) * g * length
               for c, g, length in zip(self.bucket_pairs, self._global_rows, lengths))

  def _epoch(self, epoch: int) -> list[tuple[int, np.ndarray]]:
    """[(bucket, global row indices [R_L * P], -1 = padding)] in emission order."""
    order = self._used
    if self._seed is not None:
      order = np.random.default_rng([self._seed, epoch]).permutation(order)
    buckets = self._bucket_of[order]
    keys, batches = [], []
    for b, g in enumerate(self._global_rows):
      pos = np.flatnonzero(buckets == b)  # positions in the epoch order
      members = order[pos]
      n_full = len(pos) // g
      for j in range(n_full):
        # A full batch leaves when its last pair arrives, as a bucket buffer would.
        keys.append(int(pos[(j + 1) * g - 1]))
        batches.append((b, members[j * g:(j + 1) * g]))
      if len(pos) > n_full * g:  # the rest, flushed at the end in bucket order
        keys.append(len(order) + b)
        batches.append((b, np.concatenate([members[n_full * g:], np.full(
            g - (len(pos) - n_full * g), -1, members.dtype)])))
    return [batches[i] for i in np.argsort(keys, kind='stable')]

  def local_batch(self, epoch: int, index: int) -> tuple[int, np.ndarray]:
    """(bucket, this process's row indices [R_L]) of batch `index` of `epoch`."""
    with self._lock:
      if epoch not in self._cache:
        if len(self._cache) >= 2:  # prefetching may straddle one epoch boundary
          del self._cache[min(self._cache)]
        self._cache[epoch] = self._epoch(epoch)
      bucket, rows = self._cache[epoch][index]
    p, count = self._process
    return bucket, rows[p::count]


class _Reader:
  """Reads and tokenizes the rows of one batch into padded int32 arrays."""

  def __init__(self, source: Any, tokenizer: Any, lengths: Sequence[int]):
    self._source, self._tokenizer, self._lengths = source, tokenizer, tuple(lengths)

  def __call__(self, bucket: int, rows: np.ndarray) -> dict[str, np.ndarray]:
    length = self._lengths[bucket]
    batch = {k: np.zeros((len(rows), length), np.int32) for k in ('inputs', 'targets')}
    real = np.flatnonzero(rows >= 0)
    items = _get_items(self._source, [int(i) for i in rows[real]])
    for key, field in (('inputs', 'source'), ('targets', 'target')):
      ids = self._tokenizer.encode_batch([it[field] for it in items])
      for r, seq in zip(real, ids):
        if len(seq) + 1 > length:
          raise PipelineError(f'Pair {rows[r]} has {len(seq) + 1} {field} tokens, more than '
                              f'its bucket ({length}): the source or the tokenizer changed '
                              'since the lengths were computed.')
        batch[key][r, :len(seq)] = seq
        batch[key][r, len(seq)] = EOS_ID
    return batch


# State keys that define the data order; a state from another setting is refused.
_DATA_KEYS = ('num_pairs', 'num_used', 'shuffle_seed', 'bucket_lengths')
# Keys that change with the topology; a mismatch resumes at the same fraction of the epoch.
_TOPOLOGY_KEYS = ('process_count', 'bucket_rows', 'batches_per_epoch')


class TrainIterator(grain.DatasetIterator):
  """Endless (or `num_epochs`) iterator of training batches with exact get/set_state.

  Attribute `info` (PipelineInfo). State: {'epoch', 'batch_in_epoch', ...} (JSON-able).
  """

  def __init__(self, plan: _Plan, reader: _Reader, info: PipelineInfo, shuffle_seed: int,
               process_index: int, num_epochs: Optional[int],
               read_options: grain.ReadOptions):
    super().__init__()
    self.info = info
    self._plan, self._reader, self._num_epochs = plan, reader, num_epochs
    self._read_options = read_options
    self._fixed = {'num_pairs': info.num_pairs, 'num_used': info.num_used,
                   'shuffle_seed': shuffle_seed, 'bucket_lengths': list(info.bucket_lengths),
                   'process_count': info.process_count, 'process_index': process_index,
                   'bucket_rows': list(info.bucket_rows),
                   'batches_per_epoch': info.batches_per_epoch}
    self._position = 0
    self._inner = self._start(0)

  def _batch(self, k: int) -> dict[str, np.ndarray]:
    epoch, index = divmod(k, self._plan.num_batches)
    return self._reader(*self._plan.local_batch(epoch, index))

  def _start(self, position: int) -> Any:
    stop = (sys.maxsize if self._num_epochs is None
            else self._num_epochs * self._plan.num_batches)
    ds = grain.MapDataset.range(min(position, stop), stop).map(self._batch)
    return iter(ds.to_iter_dataset(self._read_options))

  def __next__(self) -> dict[str, np.ndarray]:
    batch = next(self._inner)
    self._position += 1
    return batch

  def get_state(self) -> dict[str, Any]:
    epoch, index = divmod(self._position, self._plan.num_batches)
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
      index = index * self._plan.num_batches // max(old_batches, 1)
      logging.warning('Data state from another topology (%s); resuming at batch %d of epoch '
                      '%d, which is not an exact continuation.',
                      {k: state.get(k) for k in _TOPOLOGY_KEYS}, index, epoch)
    self._inner.close()
    self._position = epoch * self._plan.num_batches + index
    self._inner = self._start(self._position)

  def close(self) -> None:
    self._inner.close()
    super().close()


def _bucketing(config: Any, source: Any, tokenizer: Any, rows_multiple: int,
               process_index: int, process_count: int, cache_dir: Optional[str],
               eval_mode: bool) -> tuple[np.ndarray, tuple, tuple, int, tuple[int, int]]:
  """Lengths -> (bucket of each pair, bucket lengths, rows per process, dropped count,
  (source, target) tokens of the kept pairs)."""
  if not 0 <= process_index < process_count:
    raise PipelineError(f'process_index {process_index} not in [0, {process_count}).')
  validate_config(config, rows_multiple=rows_multiple, process_count=process_count)
  lengths, rows = bucket_rows(config, rows_multiple, process_count)
  src_len, tgt_len = pair_lengths(source, tokenizer, cache_dir=cache_dir)
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
  return bucket_of, lengths, rows, int(np.sum(longest > limit)), real


def _make(config, source, tokenizer, rows_multiple, process_index, process_count, cache_dir,
          seed: Optional[int]) -> tuple[_Plan, _Reader, PipelineInfo]:
  bucket_of, lengths, rows, dropped, real = _bucketing(
      config, source, tokenizer, rows_multiple, process_index, process_count, cache_dir,
      eval_mode=seed is None)
  plan = _Plan(bucket_of, [r * process_count for r in rows], process_index, process_count,
               seed)
  info = PipelineInfo(len(source), len(source) - dropped, dropped, lengths, rows,
                      plan.bucket_pairs, plan.num_batches, process_count, real,
                      plan.padded_tokens(lengths))
  name = getattr(source, 'name', None) or type(source).__name__
  if info.num_used == 0:
    raise PipelineError(f'No pair of {name} fits: all {info.num_pairs} are longer than '
                        f'{config.max_length} tokens.')
  if dropped:
    logging.warning('%s: dropped %d of %d pairs longer than %d tokens.', name, dropped,
                    info.num_pairs, config.max_length if seed is not None else config.max_len)
  logging.info('%s pipeline (%s): %s', 'Eval' if seed is None else 'Train', name,
               shapes_summary(info))
  return plan, _Reader(source, tokenizer, lengths), info


def make_train_iterator(config: Any, source: Any, tokenizer: Any, *, rows_multiple: int = 1,
                        process_index: int = 0, process_count: int = 1,
                        num_epochs: Optional[int] = None, cache_dir: Optional[str] = None,
                        num_threads: int = 2, prefetch_buffer_size: int = 4) -> TrainIterator:
  """The training batches of this process (see the module docstring).

  Args:
    config: uses max_length, bucket_lengths, tokens_per_batch, shuffle_seed, pack_examples.
    source: random access to `{'source': str, 'target': str}` with `len()`.
    tokenizer: `encode_batch(texts) -> list[list[int]]` (tokenizer.Tokenizer).
    rows_multiple: rows of every batch are a multiple of this (the local device count).
    process_index, process_count: this process and the number of processes.
    num_epochs: None repeats forever.
    cache_dir: where to keep the token lengths between runs (e.g. the workdir).
    num_threads, prefetch_buffer_size: grain read threads and batches read ahead.

  Returns:
    A grain DatasetIterator of {'inputs': int32 [R_L, L], 'targets': int32 [R_L, L]}.
  """
  plan, reader, info = _make(config, source, tokenizer, rows_multiple, process_index,
                             process_count, cache_dir, seed=int(config.shuffle_seed))
  return TrainIterator(plan, reader, info, int(config.shuffle_seed), process_index,
                       num_epochs, grain.ReadOptions(num_threads=num_threads,
                                                     prefetch_buffer_size=prefetch_buffer_size))


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
  plan, reader, info = _make(config, source, tokenizer, rows_multiple, process_index,
                             process_count, None, seed=None)
  batches = EvalBatches(reader(*plan.local_batch(0, k)) for k in range(plan.num_batches))
  batches.info = info
  return batches
