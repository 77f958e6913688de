"""Every pair's token ids, written once after the vocabulary exists: the binarized store.

The input pipeline gathers its batches from here instead of tokenizing text per batch (as
fairseq's `preprocess`, seqio's cache and maxtext's pre-tokenized ArrayRecord do); token
lengths, and so the length buckets and packed rows, come from the same arrays.

A store on disk is a folder `<cache_dir>/tokens-<key>/`, key = sha256 of the source's name
(for local corpora it holds their content hash), its pair count, the tokenizer's fingerprint
and `FORMAT`:

  source.tokens, target.tokens    the ids of every pair back to back in pair order, without
                                  EOS: uint16 for vocabularies of at most 65536 pieces
                                  (37000 for WMT EN-DE), else int32
  source.offsets, target.offsets  int64 [N + 1]: pair i is tokens[offsets[i]:offsets[i + 1]]
  meta.json                       written last: pair and token counts, dtype, size and crc32
                                  of every file. A folder without it is incomplete.

Why flat memory-mapped arrays rather than array_record of int arrays: a batch is then one
vectorised numpy gather over the whole batch (`ragged`), with no per-pair record decoding
in Python (the per-pair cost the store removes), at 2 bytes per token, and no dependency
beyond numpy. Each process maps the files and touches only the pages of its own rows.

Building (`load_or_build`) reads and encodes the source in chunks of `CHUNK_PAIRS` pairs,
in `num_workers` processes for corpora of at least `PARALLEL_MIN_PAIRS` pairs (one per
usable core by default), each chunk written atomically to `<store>.partial/` so an
interrupted build resumes at the chunks that are missing; the chunks are then concatenated
into the store and removed. Memory per worker: the Python lists of `_ENCODE_PAIRS` pairs
(a few MB) and one chunk's numpy arrays (about 10 MB at WMT lengths); the assembling process
holds one chunk and the offsets (16 bytes a pair a side).

The store is a cache of (source, vocabulary): a store that fails its check (a file missing,
truncated or garbled: size or crc32 unlike meta.json) is rebuilt after one warning. Processes
of one host build it one at a time (a file lock on the cache folder), so the first builds and
the others open its result; with a remote workdir each host builds its own in a local folder
(`local_cache_dir`).
"""

import concurrent.futures
import hashlib
import io
import itertools
import json
import multiprocessing
import os
import shutil
import sys
import time
import zlib
from typing import Any, Optional, Sequence

from absl import logging
import numpy as np

from t2t_jax.data import bucketing, prepared, vocab_pair
from t2t_jax.storage import manifest, paths

FORMAT = 't2t_jax-token-store-v1'
SIDES = ('source', 'target')
CHUNK_PAIRS = 1 << 16
PARALLEL_MIN_PAIRS = 200_000
_ENCODE_PAIRS = 4096  # pairs read and encoded at once: bounds the Python lists alive


class TokenStoreError(ValueError):
  """A store that cannot be built (e.g. a tokenizer that returns no integer ids)."""


class TokenStore:
  """Token ids of every pair of a source; attributes `num_pairs`, `path` (None: in memory).

  Args:
    tokens: side -> [T_side] uint16 or int32 ids of all pairs back to back (no EOS).
    offsets: side -> [N + 1] int64, pair i is tokens[offsets[i]:offsets[i + 1]].
    path: the store's folder, or None for a store held in memory.
  """

  def __init__(self, tokens: dict[str, np.ndarray], offsets: dict[str, np.ndarray],
               path: Optional[str] = None):
    self._tokens, self._offsets, self.path = tokens, offsets, path
    self.num_pairs = len(offsets['source']) - 1

  def __len__(self) -> int:
    return self.num_pairs

  def lengths(self, side: str) -> np.ndarray:
    """[N] int32: the token count of every pair's `side` with EOS (what a batch slot holds)."""
    return (np.diff(self._offsets[side]) + 1).astype(np.int32)

  def ids(self, side: str, pair: int) -> np.ndarray:
    """[n] int32: the ids of one pair's `side`, without EOS."""
    off = self._offsets[side]
    return np.asarray(self._tokens[side][off[pair]:off[pair + 1]], np.int32)

  def spans(self, side: str, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) [len(pairs)] int64: where each pair's `side` ids begin in
    `flat(side)` and how many there are (without EOS)."""
    off = self._offsets[side]
    pairs = np.asarray(pairs, np.int64)
    starts = off[pairs]
    return starts, off[pairs + 1] - starts

  def flat(self, side: str) -> np.ndarray:
    """[T] uint16 or int32: the ids of every pair back to back (a memory map on disk)."""
    return self._tokens[side]

  def ragged(self, side: str, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ids of `pairs` back to back: ([sum(lengths)] int32, lengths [len(pairs)] int64),
    without EOS; one gather for the whole batch."""
    starts, lens = self.spans(side, pairs)
    first = np.cumsum(lens) - lens  # where each pair begins in the output
    index = np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(starts - first, lens)
    return self._tokens[side][index].astype(np.int32), lens


def local_cache_dir(cache_dir: str) -> str:
  """`cache_dir` if it is local (memory maps need local files), else this host's folder
  `$T2T_DATA_CACHE_DIR/tokens` or `~/.cache/t2t_jax/tokens` (keyed by content, so shared
  safely between runs)."""
  if paths.is_local(cache_dir):
    return paths.absolute(cache_dir)
  root = os.environ.get('T2T_DATA_CACHE_DIR') or os.path.join('~', '.cache', 't2t_jax')
  return os.path.join(os.path.expanduser(root), 'tokens')


def store_key(name: str, num_pairs: int, fingerprint: str) -> str:
  """The folder name of a store: `tokens-<24 hex digits>`."""
  digest = hashlib.sha256(f'{FORMAT}\0{name}\0{num_pairs}\0{fingerprint}'.encode())
  return f'tokens-{digest.hexdigest()[:24]}'


def _dtype(tokenizer: Any) -> np.dtype:
  """uint16 when both sides' vocabularies (one shared, or a `VocabPair`'s) have at most 65536
  pieces, else int32."""
  sizes = [getattr(vocab_pair.side(tokenizer, side), 'vocab_size', None) for side in SIDES]
  small = None not in sizes and max(sizes) <= 1 << 16
  return np.dtype(np.uint16 if small else np.int32)


def _encode_range(source: Any, tokenizer: Any, start: int, stop: int,
                  dtype: np.dtype) -> dict[str, np.ndarray]:
  """Pairs [start, stop) -> {'<side>_ids': flat ids, '<side>_len': [n] int64 lengths}."""
  ids = {side: [] for side in SIDES}
  lens = {side: [] for side in SIDES}
  for a in range(start, stop, _ENCODE_PAIRS):
    b = min(stop, a + _ENCODE_PAIRS)
    items = bucketing.get_items(source, range(a, b))
    for side in SIDES:
      encoded = vocab_pair.side(tokenizer, side).encode_batch([it[side] for it in items])
      n = np.fromiter(map(len, encoded), np.int64, count=len(encoded))
      try:
        flat = np.fromiter(itertools.chain.from_iterable(encoded), dtype, count=int(n.sum()))
      except (TypeError, ValueError, OverflowError) as e:
        raise TokenStoreError(f'The tokenizer returned ids that are not {dtype} integers '
                              f'for pairs {a}-{b - 1}: {e}') from e
      ids[side].append(flat)
      lens[side].append(n)
  out = {}
  for side in SIDES:
    out[f'{side}_ids'] = np.concatenate(ids[side]) if ids[side] else np.zeros(0, dtype)
    out[f'{side}_len'] = np.concatenate(lens[side]) if lens[side] else np.zeros(0, np.int64)
  return out


def encode_in_memory(source: Any, tokenizer: Any) -> TokenStore:
  """A store of `source` held in memory (eval splits, sources without a name)."""
  arrays = _encode_range(source, tokenizer, 0, len(source), _dtype(tokenizer))
  return TokenStore({s: arrays[f'{s}_ids'] for s in SIDES},
                    {s: _offsets(arrays[f'{s}_len']) for s in SIDES})


def _offsets(lengths: np.ndarray) -> np.ndarray:
  out = np.zeros(len(lengths) + 1, np.int64)
  np.cumsum(lengths, out=out[1:])
  return out


def _chunk_path(partial: str, k: int) -> str:
  return os.path.join(partial, f'chunk-{k:06d}.npz')


def _write_chunk(source: Any, tokenizer: Any, start: int, stop: int, dtype_name: str,
                 path: str) -> str:
  """Encodes pairs [start, stop) into the chunk file `path` (atomically); returns path."""
  arrays = _encode_range(source, tokenizer, start, stop, np.dtype(dtype_name))
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  paths.write_atomic(path, buffer.getvalue(), overwrite=True)
  return path


def _read_chunk(path: str, expected_pairs: int) -> Optional[dict[str, np.ndarray]]:
  """A chunk's arrays, or None when it is missing or damaged (then it is encoded again)."""
  if not os.path.isfile(path):
    return None
  try:
    with np.load(path) as f:
      arrays = {k: f[k] for k in f.files}
    for side in SIDES:
      if (len(arrays[f'{side}_len']) != expected_pairs
          or int(arrays[f'{side}_len'].sum()) != len(arrays[f'{side}_ids'])):
        return None
    return arrays
  except Exception:  # noqa: BLE001 - any unreadable chunk is simply encoded again
    return None


def default_workers() -> int:
  """Processes that encode a large corpus: one per usable core."""
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except AttributeError:  # not on Linux
    return max(1, os.cpu_count() or 1)


MAIN_GUARD = "if __name__ == '__main__':"


def refuse_in_a_starting_process() -> None:
  """Stops (SystemExit, one line) a process that multiprocessing is starting while it runs its
  parent's main script again.

  The encoding processes are started with spawn: each imports the parent's main script
  (as `__mp_main__`) before it takes any work. A script that calls the library at its top
  level, without a main guard, then builds the store again in each of them, and they would
  wait for the lock the parent holds while the parent waits for them, for ever. Python itself
  refuses a process started from there (`multiprocessing.spawn._check_not_importing_main`).
  """
  if not getattr(multiprocessing.current_process(), '_inheriting', False):
    return
  script = getattr(sys.modules.get('__mp_main__'), '__file__', None) or 'the main script'
  # One write of the whole line: Python prints a SystemExit's text and its newline in two,
  # which the sibling processes' lines split apart when stderr is unbuffered (PYTHONUNBUFFERED).
  sys.stderr.write(f'error: {script} calls t2t_jax at its top level, so every process that '
                   'multiprocessing starts for it (the token store is encoded in several) runs '
                   f'it again: put its calls under {MAIN_GUARD}\n')
  sys.stderr.flush()
  raise SystemExit(1)


def _pool_broke(folder: str) -> TokenStoreError:
  """The error of a build whose encoding processes stopped before they finished."""
  main = sys.modules.get('__main__')  # a script (not -m) is run again by each process
  script = getattr(main, '__file__', None) if getattr(main, '__spec__', None) is None else None
  why = (f'each runs {script} again, so its calls of t2t_jax belong under {MAIN_GUARD}; or '
         'one was killed (out of memory?)' if script else 'one was killed (out of memory?)')
  return TokenStoreError(f'The processes encoding the token store {folder} stopped before '
                         f'they finished: {why}. The chunks encoded so far are kept.')


def _build(source: Any, tokenizer: Any, folder: str, num_workers: int) -> None:
  """Encodes every chunk (resuming at the missing ones) and assembles the store in `folder`."""
  n, dtype = len(source), _dtype(tokenizer)
  partial = folder + '.partial'
  os.makedirs(partial, exist_ok=True)
  bounds = [(a, min(n, a + CHUNK_PAIRS)) for a in range(0, n, CHUNK_PAIRS)] or [(0, 0)]
  todo = [k for k, (a, b) in enumerate(bounds)
          if _read_chunk(_chunk_path(partial, k), b - a) is None]
  start = time.monotonic()
  if len(todo) < len(bounds):
    logging.info('Token store %s: resuming, %d of %d chunks already encoded.', folder,
                 len(bounds) - len(todo), len(bounds))
  workers = min(num_workers, len(todo)) if n >= PARALLEL_MIN_PAIRS else 1
  if workers > 1:
    # spawn: the parent has JAX's threads running, which fork would copy mid-flight.
    try:
      with concurrent.futures.ProcessPoolExecutor(
          workers, mp_context=multiprocessing.get_context('spawn')) as pool:
        futures = [pool.submit(_write_chunk, source, tokenizer, *bounds[k], dtype.name,
                               _chunk_path(partial, k)) for k in todo]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
          future.result()
          if done % 16 == 0:
            logging.info('Token store: %d of %d chunks encoded', done, len(todo))
    except concurrent.futures.process.BrokenProcessPool:
      raise _pool_broke(folder) from None
  else:
    for k in todo:
      _write_chunk(source, tokenizer, *bounds[k], dtype.name, _chunk_path(partial, k))
  _assemble(partial, bounds, folder, dtype)
  shutil.rmtree(partial, ignore_errors=True)
  logging.info('Token store %s: %d pairs encoded in %.1f s (%d process(es)).', folder, n,
               time.monotonic() - start, workers)


def _assemble(partial: str, bounds: Sequence[tuple[int, int]], folder: str,
              dtype: np.dtype) -> None:
  """Concatenates the chunks into the store's files, one chunk in memory at a time."""
  os.makedirs(folder, exist_ok=True)
  meta_path = os.path.join(folder, 'meta.json')
  if os.path.exists(meta_path):
    os.remove(meta_path)  # the store is incomplete until the new meta.json exists
  lengths = {side: [] for side in SIDES}
  files = {side: open(os.path.join(folder, f'{side}.tokens'), 'wb') for side in SIDES}
  crc = {side: 0 for side in SIDES}
  try:
    for k, (a, b) in enumerate(bounds):
      arrays = _read_chunk(_chunk_path(partial, k), b - a)
      if arrays is None:
        raise TokenStoreError(f'Chunk {k} of {partial} vanished while assembling the store.')
      for side in SIDES:
        data = arrays[f'{side}_ids'].astype(dtype, copy=False).tobytes()
        files[side].write(data)
        crc[side] = zlib.crc32(data, crc[side])
        lengths[side].append(arrays[f'{side}_len'])
  finally:
    for f in files.values():
      f.close()
  meta = {'format': FORMAT, 'pairs': int(bounds[-1][1]), 'dtype': dtype.name, 'files': {}}
  for side in SIDES:
    offsets = _offsets(np.concatenate(lengths[side]))
    data = offsets.tobytes()
    with open(os.path.join(folder, f'{side}.offsets'), 'wb') as f:
      f.write(data)
    meta['files'][f'{side}.offsets'] = {'bytes': len(data), 'crc32': zlib.crc32(data)}
    meta['files'][f'{side}.tokens'] = {'bytes': int(offsets[-1]) * dtype.itemsize,
                                       'crc32': crc[side]}
  paths.write_atomic(meta_path, json.dumps(meta, indent=1).encode(), overwrite=True)


def _open(folder: str, num_pairs: int) -> tuple[Optional[TokenStore], str]:
  """(the store in `folder`, '') if it is complete and intact, else (None, what is wrong)."""
  meta_path = os.path.join(folder, 'meta.json')
  if not os.path.isfile(meta_path):
    return None, 'no meta.json'
  try:
    with open(meta_path, 'rb') as f:
      meta = json.loads(f.read())
    if meta.get('format') != FORMAT or meta.get('pairs') != num_pairs:
      return None, f'meta.json describes {meta.get("pairs")} pairs of {meta.get("format")}'
    dtype = np.dtype(meta['dtype'])
    wrong = manifest.problem(folder, meta['files'])
    if wrong:
      return None, wrong
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    return None, f'meta.json is unreadable ({e})'
  tokens, offsets = {}, {}
  for side in SIDES:
    offsets[side] = np.fromfile(os.path.join(folder, f'{side}.offsets'), np.int64)
    size = int(offsets[side][-1])
    tokens[side] = (np.memmap(os.path.join(folder, f'{side}.tokens'), dtype, 'r', shape=(size,))
                    if size else np.zeros(0, dtype))
  return TokenStore(tokens, offsets, folder), ''


def load_or_build(source: Any, tokenizer: Any, cache_dir: Optional[str], *,
                  num_workers: Optional[int] = None) -> TokenStore:
  """The token store of (`source`, `tokenizer`), built once.

  Args:
    source: random access to `{'source': str, 'target': str}` with `len()`; its `name`
      (corpora.ParallelTextSource) keys the store on disk. Picklable when the corpus has at
      least `PARALLEL_MIN_PAIRS` pairs (the encoding processes receive it).
    tokenizer: `encode_batch(texts) -> list[list[int]]`, or a `vocab_pair.VocabPair` (each
      side encoded with its own); its `fingerprint` keys the store.
    cache_dir: the folder that holds stores (`local_cache_dir` of it is used); None, or a
      source or tokenizer without a name or fingerprint, gives a store in memory.
    num_workers: encoding processes for large corpora (None: `default_workers()`).
  """
  refuse_in_a_starting_process()  # before the lock its parent holds (a script's top level)
  name, fingerprint = getattr(source, 'name', None), getattr(tokenizer, 'fingerprint', None)
  if not cache_dir or not name or not fingerprint:
    return encode_in_memory(source, tokenizer)
  root = local_cache_dir(cache_dir)
  folder = os.path.join(root, store_key(name, len(source), fingerprint))
  store, _ = _open(folder, len(source))
  if store is not None:
    return store
  with prepared.host_lock(root):  # another process of this host may have built it by now
    store, problem = _open(folder, len(source))
    if store is not None:
      return store
    interrupted = problem == 'no meta.json' and os.path.isdir(folder + '.partial')
    if os.path.isdir(folder) and not interrupted:
      logging.warning('Token store %s is damaged (%s); it is a cache of %s: rebuilding it.',
                      folder, problem, name)
      shutil.rmtree(folder, ignore_errors=True)
    _build(source, tokenizer, folder, num_workers or default_workers())
    store, problem = _open(folder, len(source))
  if store is None:
    raise TokenStoreError(f'The token store {folder} just built does not open: {problem}.')
  return store
