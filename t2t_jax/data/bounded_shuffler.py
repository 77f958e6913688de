"""A drop-in replacement of TFDS's `Shuffler` that needs no TensorFlow and bounded memory.

TFDS 4.9.10's `Writer` hands every serialized example to
`tensorflow_datasets.core.shuffle.Shuffler`, which keeps up to 1 GB in memory and then spills
into 1000 bucket files through `tf.io.gfile` (a ModuleNotFoundError without TensorFlow). With
`disable_shuffling` (keys are line numbers) its bucket choice puts every record in bucket 0,
so even with TensorFlow its memory grows with the corpus. `BoundedShuffler` yields exactly
what TFDS's in-memory path yields, at any size:

* Records come out sorted by the md5 of their key (TFDS's `Hasher` and salt), or by the raw
  key with `disable_shuffling`. Two records with one key raise TFDS's `DuplicatedKeysError`
  at the same place and with the same two records as TFDS (the two smallest payloads of the
  key, after the smallest one was yielded); `ignore_duplicates` keeps the first one added.
* Records are buffered until the buffer's memory (Python's size of each payload and key,
  plus 72 bytes for its tuple, list slot and sort key) would pass `MEMORY_BUDGET_BYTES`; the
  buffer is then sorted (stable, so equal keys keep their insertion order) and written as
  one sorted run file with plain binary I/O, next to where TFDS puts its buckets (the
  builder's temporary folder, which TFDS deletes if the preparation fails; the system's
  temp folder when that is not local). Iterating yields a k-way `heapq.merge` of the runs
  and the last buffer (stable: ties go to the earlier run, i.e. the earlier insertion) and
  deletes the run files when done or abandoned.
* `ignore_duplicates` drops repeats inside the buffer at each spill and across runs during
  the merge; no set of every key is kept. TFDS's `Writer` asks `num_examples` and `size`
  before iterating, so when runs were spilled these first count the repeats across runs in
  one pass over the run files' headers (payloads are skipped by seeking). One difference:
  with `disable_shuffling` TFDS compares hashed keys here, so it also takes int 1 and str
  '1' for one key; we compare the raw keys (TFDS could not sort such a mix anyway).

Memory bound: `MEMORY_BUDGET_BYTES` (256 MiB) for the buffer, plus `READ_BUFFER_BYTES`
(1 MiB) per run while merging, plus one record per run in the merge heap. A serialized pair
is about 300 bytes of payload (302 on average for a 325k-pair EN-ES corpus) and 130-150 bytes
of Python overhead, so a run holds about 600k pairs: WMT14 EN-DE (4.5M pairs) spills 8 runs
(8 MiB of read buffers), EN-FR (36M pairs) about 60 (60 MiB); ~0.3 GiB at most either way.
Below the budget nothing touches the disk and the cost is TFDS's own (append, then one sort).
Spilling costs 1-1.5 us of CPU per record (write, read, merge).

`bucket_lengths` is `[num_examples]`, what TFDS's in-memory path returns: TFDS's
`_get_shard_specs` takes the shard sizes from `num_examples` and `size` alone and only
attaches bucket-relative read instructions (which `Writer` does not use), so the shards are
the ones TFDS writes for the same data.
"""

import heapq
import itertools
import operator
import os
import pickle
import struct
import sys
import tempfile
import weakref
from typing import Any, Iterable, Iterator, Optional

from absl import logging
from etils import epath
from tensorflow_datasets.core import hashing
from tensorflow_datasets.core.shuffle import DuplicatedKeysError

from t2t_jax.storage import paths

# Bytes of Python memory the buffer may hold before it is spilled as a sorted run (tests
# lower it to exercise the spill path on small data).
MEMORY_BUDGET_BYTES = 256 << 20
# Per run file: the read buffer while merging, the write buffer while spilling.
READ_BUFFER_BYTES = 1 << 20

Key = Any  # TFDS's example key: int, str or bytes (hashed to int unless disable_shuffling)
Record = tuple[Key, bytes]

# Run file record: key type, key length, payload length, then the key and payload bytes.
_HEADER = struct.Struct('<BIQ')
_INT, _BYTES, _STR, _PICKLED = range(4)
_PLAIN_KEYS = (int, bytes, str)
# A buffered record's cost beyond its key and payload objects: a 2-tuple (56 bytes), its
# slot in the buffer list (8) and its slot in the sort's key list (8).
_ENTRY_BYTES = 72
_sort_key = operator.itemgetter(0)


def _encode_key(key: Key) -> tuple[int, bytes]:
  if type(key) is int:  # pylint: disable=unidiomatic-typecheck  (bool must round-trip)
    return _INT, key.to_bytes(key.bit_length() // 8 + 1, 'big', signed=True)
  if type(key) is bytes:  # pylint: disable=unidiomatic-typecheck
    return _BYTES, key
  if type(key) is str:  # pylint: disable=unidiomatic-typecheck
    return _STR, key.encode('utf-8', 'surrogatepass')
  return _PICKLED, pickle.dumps(key)  # what else TFDS takes: bool, one-element numpy arrays


def _decode_key(tag: int, raw: bytes) -> Key:
  if tag == _INT:
    return int.from_bytes(raw, 'big', signed=True)
  if tag == _BYTES:
    return raw
  if tag == _STR:
    return raw.decode('utf-8', 'surrogatepass')
  return pickle.loads(raw)


def _write_run(path: str, records: Iterable[Record]) -> None:
  with open(path, 'wb', buffering=READ_BUFFER_BYTES) as f:
    for key, data in records:
      tag, raw = _encode_key(key)
      f.write(_HEADER.pack(tag, len(raw), len(data)))
      f.write(raw)
      f.write(data)


def _read_run(path: str, payloads: bool = True) -> Iterator[tuple[Key, Any]]:
  """Yields (key, payload) from a run file; (key, payload length) when not `payloads`."""
  with open(path, 'rb', buffering=READ_BUFFER_BYTES) as f:
    read, unpack, size = f.read, _HEADER.unpack, _HEADER.size
    while head := read(size):
      tag, key_len, data_len = unpack(head)
      raw = read(key_len)
      key = int.from_bytes(raw, 'big', signed=True) if tag == _INT else _decode_key(tag, raw)
      if payloads:
        yield key, read(data_len)
      else:
        f.seek(data_len, os.SEEK_CUR)
        yield key, data_len


def _remove_files(files: list[str]) -> None:
  for path in files:
    try:
      os.remove(path)
    except FileNotFoundError:
      pass
  files.clear()


def _check_unique(records: Iterator[Record], ignore_duplicates: bool) -> Iterator[Record]:
  """`records` (sorted by key, stable) with repeated keys dropped (`ignore_duplicates`) or
  reported as TFDS's in-memory path does: it sorts (key, payload) pairs, so it yields the
  key's smallest payload, then raises DuplicatedKeysError(second smallest, smallest)."""
  pending = None
  for record in records:
    if pending is not None:
      if record[0] == pending[0]:
        if ignore_duplicates:
          continue
        key = record[0]
        same = itertools.takewhile(lambda r: r[0] == key, records)
        group = sorted([pending[1], record[1], *(data for _, data in same)])
        yield key, group[0]
        raise DuplicatedKeysError(group[1], group[0])
      yield pending
    pending = record
  if pending is not None:
    yield pending


class BoundedShuffler:
  """TFDS's `Shuffler` (same constructor and the members `Writer` uses) in bounded memory;
  see the module docstring."""

  def __init__(self, dirpath: epath.PathLike, hash_salt: str | bytes,
               disable_shuffling: bool = False, ignore_duplicates: bool = False):
    self._hasher = hashing.Hasher(hash_salt)
    self._disable_shuffling = disable_shuffling
    self._ignore_duplicates = ignore_duplicates
    # Plain file I/O needs a local folder; TFDS's temporary folder is one unless the data
    # dir is on an object store.
    self._run_dir = os.fspath(dirpath) if paths.is_local(dirpath) else tempfile.gettempdir()
    self._runs: list[str] = []  # run files not yet deleted
    self._num_runs = 0
    self._buffer: list[Record] = []
    self._buffer_bytes = 0  # Python memory held by the buffer, as charged in add()
    self._num_added = 0
    self._bytes_added = 0
    # ignore_duplicates: repeats dropped from buffers (final), and across runs (recounted).
    self._dropped = [0, 0]  # examples, payload bytes
    self._dropped_across = (0, 0)
    self._settled_at: Optional[int] = None  # _num_added when last settled
    self._read_only = False
    # Run files are deleted after iterating, and by this if the shuffler is never iterated.
    self._cleanup = weakref.finalize(self, _remove_files, self._runs)

  @property
  def size(self) -> int:
    """Total bytes of the records (payloads, not keys) that will be yielded."""
    self._settle()
    return self._bytes_added - self._dropped[1] - self._dropped_across[1]

  @property
  def num_examples(self) -> int:
    """Number of records that will be yielded."""
    self._settle()
    return self._num_added - self._dropped[0] - self._dropped_across[0]

  @property
  def bucket_lengths(self) -> list[int]:
    """`[num_examples]`, as TFDS's in-memory path: one bucket, hence TFDS's own shards."""
    return [self.num_examples]

  @property
  def num_runs(self) -> int:
    """Sorted run files written so far (deleted or not)."""
    return self._num_runs

  @property
  def buffer_bytes(self) -> int:
    """Python memory the buffer holds now, as counted against `MEMORY_BUDGET_BYTES`."""
    return self._buffer_bytes

  def add(self, key: Key, data: bytes) -> None:
    """Adds one record; spills the buffer first if the record would take it past the
    budget (a record larger than the budget is buffered alone)."""
    if self._read_only:
      raise AssertionError('add() cannot be called after __iter__.')
    if not isinstance(data, bytes):
      raise AssertionError(
          f'Only bytes (not {type(data)}) can be stored in Shuffler! This likely indicates '
          'that non-integer keys were used when generating the dataset.')
    if not self._disable_shuffling:
      sort_key = self._hasher.hash_key(key)
    else:
      if type(key) not in _PLAIN_KEYS:
        self._hasher.hash_key(key)  # TFDS's TypeError for a key type it cannot take
      sort_key = key
    cost = sys.getsizeof(data) + sys.getsizeof(sort_key) + _ENTRY_BYTES
    if self._buffer and self._buffer_bytes + cost > MEMORY_BUDGET_BYTES:
      self._spill()
    self._buffer.append((sort_key, data))
    self._buffer_bytes += cost
    self._num_added += 1
    self._bytes_added += len(data)

  def _sort_buffer(self) -> None:
    """Sorts the buffer by key (stable); with ignore_duplicates keeps the first of each key."""
    buffer = self._buffer
    buffer.sort(key=_sort_key)
    if self._ignore_duplicates:
      unique = [r for i, r in enumerate(buffer) if i == 0 or r[0] != buffer[i - 1][0]]
      self._dropped[0] += len(buffer) - len(unique)
      self._dropped[1] += sum(map(len, (r[1] for r in buffer))) - sum(
          map(len, (r[1] for r in unique)))
      self._buffer = unique

  def _spill(self) -> None:
    self._sort_buffer()
    os.makedirs(self._run_dir, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix='bounded_shuffler_', suffix='.run', dir=self._run_dir)
    os.close(fd)
    self._runs.append(path)  # before writing, so that a failed write is cleaned up too
    self._num_runs += 1
    _write_run(path, self._buffer)
    logging.info('Shuffler: wrote sorted run %d (%d records, %.1f MiB) to %s',
                 self._num_runs, len(self._buffer), self._buffer_bytes / 2**20, path)
    self._buffer, self._buffer_bytes = [], 0

  def _settle(self) -> None:
    """ignore_duplicates: drops repeats from the buffer and counts those across runs, so
    that `num_examples` and `size` are what iterating will yield."""
    if not self._ignore_duplicates or self._settled_at == self._num_added:
      return
    self._sort_buffer()
    dropped = [0, 0]
    if self._runs:
      keys = heapq.merge(*(_read_run(p, payloads=False) for p in self._runs),
                         ((k, len(d)) for k, d in self._buffer), key=_sort_key)
      previous = object()
      for key, data_len in keys:
        if key == previous:
          dropped[0] += 1
          dropped[1] += data_len
        previous = key
    self._dropped_across = tuple(dropped)
    self._settled_at = self._num_added

  def __iter__(self) -> Iterator[Record]:
    """Yields (key, payload) sorted by key (hashed unless disable_shuffling); then no more
    record may be added. The run files are deleted when the iteration ends or is abandoned."""
    self._settle()
    self._read_only = True
    try:
      self._sort_buffer()
      if self._runs:
        records = heapq.merge(*(_read_run(p) for p in self._runs), self._buffer,
                              key=_sort_key)
      else:
        records = iter(self._buffer)
      yield from _check_unique(records, self._ignore_duplicates)
    finally:
      _remove_files(self._runs)
