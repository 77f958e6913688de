"""Example packing (`config.pack_examples`): several short pairs share one row of a batch.

The plan of an epoch packs the shuffled kept pairs greedily into rows of one length L per
side: a pair goes into the oldest open row where both its source and its target (with EOS)
still fit, else it opens a new row; when more than `OPEN_ROWS` rows are open, the oldest is
closed. Closed rows, in closing order, form global batches of G rows (G = rows per process x
processes); the rows still open at the end of the epoch are closed last and the final batch
is topped up with empty rows. Every kept pair is in exactly one row per epoch, and the plan
is a pure function of (lengths, seed, epoch), as the bucketed plan of `pipeline` is. The
number of batches of an epoch depends on how well its order packs, so it varies a little
from epoch to epoch (`PackedPlan.epoch_batches`).

A batch row holds its pairs back to back: `inputs` the sources, `targets` the targets in
the same order, each with its EOS, then padding (0). `*_segmentation` numbers the pairs of
a row 1, 2, ... (0 on padding) and `*_position` counts positions from 0 within each pair.
"""

import threading
from typing import Callable, Optional, Sequence

import numpy as np

# Rows kept open for later pairs: more packs tighter. On the bundled corpus at L=64 (quickstart)
# 1 (next-fit) fills 70% of the slots, 16 87%, 64 90%, 256 92%, 1024 93%; each pair costs
# about 6 microseconds (a few numpy operations over the open rows) for any of these.
OPEN_ROWS = 256


# From this many pairs on, `pack` takes the `row_ids` kernel it is given (the training loop
# gives `runtime.first_fit.row_ids`: one lax.scan, 1.3 us a pair, compiled once in about
# 1 s) instead of the loop (`pack_loop`, 6-7 us a pair): 4.5M pairs (WMT14 EN-DE) pack in
# about 6 s instead of 30 s, every epoch. The data layer itself runs no jax (host only).
SCAN_MIN_PAIRS = 100_000

# (source lengths [n], target lengths [n], L, open rows) -> [n] int row numbers.
RowIds = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]


def pack(src_len: np.ndarray, tgt_len: np.ndarray, order: np.ndarray, length: int,
         open_rows: int = OPEN_ROWS,
         row_ids: Optional[RowIds] = None) -> tuple[np.ndarray, np.ndarray]:
  """Greedy first-fit of the pairs `order` into rows of `length` tokens per side.

  Args:
    src_len, tgt_len: `[N]` token lengths (with EOS) of every pair of the corpus.
    order: the pair indices to pack, in the order they arrive; each must fit alone.
    length: L, the row length of each side.
    open_rows: at most this many rows take new pairs; the oldest is closed beyond that.
    row_ids: a faster kernel for the same first-fit (`RowIds`: each arriving pair's row,
      rows numbered in opening order), used from `SCAN_MIN_PAIRS` pairs on.

  Returns:
    (members, starts): row r holds pairs `members[starts[r]:starts[r + 1]]`, in arrival
    order; rows in closing order.
  """
  order = np.asarray(order, np.int64)
  if row_ids is None or len(order) < SCAN_MIN_PAIRS:
    return pack_loop(src_len, tgt_len, order, length, open_rows)
  s, t = np.asarray(src_len)[order], np.asarray(tgt_len)[order]
  over = np.flatnonzero((s > length) | (t > length))
  if over.size:
    i = over[0]
    raise ValueError(f'pair {order[i]} ({s[i]}, {t[i]} tokens) does not fit a row of {length}')
  # A row is closed only as the oldest open one (or at the end, oldest first), so rows
  # close in the order they opened: each pair's row number is the whole plan.
  rows = np.asarray(row_ids(s, t, length, open_rows), np.int64)
  members = order[np.argsort(rows, kind='stable')]
  starts = np.zeros(int(rows.max(initial=-1)) + 2, np.int64)
  np.cumsum(np.bincount(rows), out=starts[1:])
  return members, starts


def pack_loop(src_len: np.ndarray, tgt_len: np.ndarray, order: np.ndarray, length: int,
              open_rows: int = OPEN_ROWS) -> tuple[np.ndarray, np.ndarray]:
  """`pack` as a plain loop over the pairs (the reference the scanned kernel equals; the
  faster choice below `SCAN_MIN_PAIRS` pairs, where compiling would cost more)."""
  big = np.iinfo(np.int64).max
  room_src = np.full(open_rows, -1, np.int64)  # -1: a free slot, which nothing fits
  room_tgt = np.full(open_rows, -1, np.int64)
  opened = np.full(open_rows, big, np.int64)  # opening sequence number of each slot's row
  slots: list[list[int]] = [[] for _ in range(open_rows)]
  members: list[int] = []
  starts = [0]
  count = 0
  for pair, s, t in zip(order.tolist(), src_len[order].tolist(), tgt_len[order].tolist()):
    if s > length or t > length:
      raise ValueError(f'pair {pair} ({s}, {t} tokens) does not fit a row of {length}')
    fits = (room_src >= s) & (room_tgt >= t)
    if fits.any():
      slot = int(np.where(fits, opened, big).argmin())
    else:
      free = np.flatnonzero(opened == big)
      if free.size:
        slot = int(free[0])
      else:  # all slots busy: close the oldest row
        slot = int(opened.argmin())
        members.extend(slots[slot])
        starts.append(len(members))
      slots[slot] = []
      room_src[slot], room_tgt[slot], opened[slot] = length, length, count
      count += 1
    slots[slot].append(pair)
    room_src[slot] -= s
    room_tgt[slot] -= t
  for slot in np.argsort(opened, kind='stable'):  # the rest, oldest first
    if opened[slot] != big:
      members.extend(slots[slot])
      starts.append(len(members))
  return np.asarray(members, np.int64), np.asarray(starts, np.int64)


class PackedPlan:
  """Which pairs form which row of which batch; the interface of `bucketing.BucketPlan`.

  `local_batch(epoch, index)` -> (0, this process's rows: a list of pair-index arrays, empty
  for a padding row). Process p of P gets global rows p, p + P, ...
  """

  def __init__(self, src_len: np.ndarray, tgt_len: np.ndarray, used: np.ndarray, length: int,
               global_rows: int, process_index: int, process_count: int, seed: int,
               open_rows: int = OPEN_ROWS, row_ids: Optional[RowIds] = None,
               epoch_pairs: Optional[Callable[[int], np.ndarray]] = None):
    """`epoch_pairs(epoch)`: the pairs an epoch holds (`mixture.Sampler.pairs`); None: `used`."""
    self._src_len, self._tgt_len = np.asarray(src_len), np.asarray(tgt_len)
    self._used = np.asarray(used, np.int64)
    self._epoch_pairs = epoch_pairs or (lambda epoch: self._used)
    self._length, self._global_rows, self._open_rows = int(length), int(global_rows), open_rows
    self._process = (process_index, process_count)
    self._seed, self._row_ids = seed, row_ids
    self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    self._counts: dict[int, int] = {}
    self._lock = threading.Lock()  # grain reads batches from several threads
    self.bucket_pairs = (len(self._epoch_pairs(0)),)

  def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """(members, row starts) of the epoch; caller holds the lock."""
    if epoch not in self._cache:
      if len(self._cache) >= 2:  # prefetching may straddle one epoch boundary
        del self._cache[min(self._cache)]
      order = np.random.default_rng([self._seed, epoch]).permutation(self._epoch_pairs(epoch))
      plan = pack(self._src_len, self._tgt_len, order, self._length, self._open_rows,
                  self._row_ids)
      self._cache[epoch] = plan
      self._counts[epoch] = -(-(len(plan[1]) - 1) // self._global_rows)
    return self._cache[epoch]

  def epoch_batches(self, epoch: int) -> int:
    """Batches of `epoch` (the same on every process)."""
    with self._lock:
      if epoch not in self._counts:
        self._epoch(epoch)
      return self._counts[epoch]

  @property
  def num_batches(self) -> int:
    """Batches of epoch 0 (other epochs differ by a few: see `epoch_batches`)."""
    return self.epoch_batches(0)

  def padded_tokens(self, lengths: Sequence[int]) -> int:
    """Slots (rows x length over all processes) of one side of epoch 0's batches."""
    return self.num_batches * self._global_rows * int(lengths[0])

  def rows_per_epoch(self, epoch: int) -> int:
    """Non-empty rows of `epoch`."""
    with self._lock:
      return len(self._epoch(epoch)[1]) - 1

  def local_batch(self, epoch: int, index: int) -> tuple[int, list[np.ndarray]]:
    """(0, this process's rows) of batch `index` of `epoch`."""
    with self._lock:
      members, starts = self._epoch(epoch)
    p, count = self._process
    first = index * self._global_rows
    rows = []
    for r in range(first + p, first + self._global_rows, count):
      rows.append(members[starts[r]:starts[r + 1]] if r + 1 < len(starts)
                  else members[:0])
    return 0, rows


def layout(rows: Sequence[Sequence[Sequence[int]]],
           length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """One side of a packed batch: rows of token sequences (EOS included) -> int32 `[rows, L]`
  (tokens, segmentation, position), the sequences of a row back to back, then padding 0."""
  shape = (len(rows), length)
  tokens, segmentation, position = (np.zeros(shape, np.int32) for _ in range(3))
  for r, row in enumerate(rows):
    at = 0
    for k, seq in enumerate(row):
      n = len(seq)
      if at + n > length:
        raise ValueError(f'row {r}: {at + n} tokens do not fit {length}')
      tokens[r, at:at + n] = seq
      segmentation[r, at:at + n] = k + 1
      position[r, at:at + n] = np.arange(n)
      at += n
  return tokens, segmentation, position

