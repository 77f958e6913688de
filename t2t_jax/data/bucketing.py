"""Length buckets: the epoch plan of bucketed batches (token lengths: `token_store`).

`pipeline` puts each kept pair in the smallest bucket length that holds its source and its
target and batches each bucket to the token budget (see its module docstring for the
invariants); `BucketPlan` decides which pairs form which batch, `packing.PackedPlan` is the
same interface for packed rows.
"""

import threading
from typing import Any, Callable, Optional, Sequence

import numpy as np


def get_items(source: Any, indices: Sequence[int]) -> list[dict[str, str]]:
  """The pairs at `indices`, in one read where the source supports it."""
  getitems = getattr(source, '__getitems__', None)
  return getitems(list(indices)) if getitems else [source[i] for i in indices]


class BucketPlan:
  """Which pairs form which batch: a pure function of (lengths, seed, epoch)."""

  def __init__(self, bucket_of: np.ndarray, global_rows: Sequence[int], process_index: int,
               process_count: int, seed: Optional[int],
               epoch_pairs: Optional[Callable[[int], np.ndarray]] = None):
    """`epoch_pairs(epoch)`: the pair indices an epoch holds (`mixture.Sampler.pairs`:
    repeats allowed); None: every kept pair once."""
    self._bucket_of = bucket_of  # [N] bucket of each pair, -1: dropped
    self._used = np.flatnonzero(bucket_of >= 0)
    self._epoch_pairs = epoch_pairs
    self._global_rows = tuple(global_rows)
    self._process = (process_index, process_count)
    self._seed = seed  # None: corpus order (eval)
    self._cache: dict[int, list[tuple[int, np.ndarray]]] = {}
    self._lock = threading.Lock()  # grain reads batches from several threads
    counts = np.bincount(bucket_of[self._pairs(0)], minlength=len(global_rows))
    self.bucket_pairs = tuple(int(c) for c in counts)
    self.num_batches = sum(-(-c // g) for c, g in zip(self.bucket_pairs, self._global_rows))

  def _pairs(self, epoch: int) -> np.ndarray:
    return self._used if self._epoch_pairs is None else self._epoch_pairs(epoch)

  def epoch_batches(self, epoch: int) -> int:
    """Batches of `epoch`: the same for every epoch, except in a weighted mixture, whose
    epochs draw other pairs (so other bucket sizes)."""
    if self._epoch_pairs is None:
      return self.num_batches
    return len(self._planned(epoch))

  def padded_tokens(self, lengths: Sequence[int]) -> int:
    """Slots (rows x length over all processes) of one side of an epoch's batches."""
    return sum(-(-c // g) * g * length
               for c, g, length in zip(self.bucket_pairs, self._global_rows, lengths))

  def _epoch(self, epoch: int) -> list[tuple[int, np.ndarray]]:
    """[(bucket, global row indices [R_L * P], -1 = padding)] in emission order."""
    order = self._pairs(epoch)
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

  def _planned(self, epoch: int) -> list[tuple[int, np.ndarray]]:
    with self._lock:
      if epoch not in self._cache:
        if len(self._cache) >= 2:  # prefetching may straddle one epoch boundary
          del self._cache[min(self._cache)]
        self._cache[epoch] = self._epoch(epoch)
      return self._cache[epoch]

  def local_batch(self, epoch: int, index: int) -> tuple[int, np.ndarray]:
    """(bucket, this process's row indices [R_L]) of batch `index` of `epoch`."""
    bucket, rows = self._planned(epoch)[index]
    p, count = self._process
    return bucket, rows[p::count]
