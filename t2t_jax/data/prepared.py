"""A local corpus prepared once, and whether that preparation is intact (`storage/layout.PREPARED`,
a derived folder).

`prepare_once` prepares (TFDS, array_record) or reuses; processes of a host take turns through
`host_lock`, processes of a run wait for process 0.

A local corpus or treebank is prepared once (TFDS, array_record) from files that stay where
they are, so a damaged preparation is rebuilt rather than reported as a traceback from deep
inside TFDS or array_record ("Corrupted Riegeli/records file", a protobuf ParseError). Two
checks, both before any use:

* opening: TFDS reads `dataset_info.json` and `metadata.json` when the builder is made; an
  error there, or a split whose record count is not the recorded one, is damage;
* the manifest `t2t_jax-manifest.json` written beside TFDS's files once the preparation is
  complete: every file's size and crc32 (`storage/manifest.py`), so truncated or garbled
  array_record files are found before a reader meets them. A preparation made before the
  manifest existed is checked by opening each array_record file and comparing its record
  count with TFDS's (a missing or truncated file), and then given one; so is a prepared
  WMT'14, which has no manifest.

A damaged folder is moved aside to `<data_dir>/damaged/<name>-<config>-<version>-<time>` (never
deleted: it is the user's to inspect or remove) and prepared again, after one warning line.
"""

import contextlib
import fcntl
import json
import os
import time
from typing import Any, Callable, Iterator, Optional, Tuple

from absl import logging
from array_record.python import array_record_module

from t2t_jax.data.textfiles import DataError
from t2t_jax.data.tfds_prepare import download_and_prepare
from t2t_jax.storage import layout, leftovers, manifest, paths, textio

MANIFEST = 't2t_jax-manifest.json'


def _files(folder: str) -> list:
  return sorted(n for n in os.listdir(folder)
                if n != MANIFEST and os.path.isfile(os.path.join(folder, n)))


def write_manifest(builder: Any) -> None:
  """Records the size and crc32 of every file of `builder`'s prepared folder."""
  folder = builder.data_dir
  record = {'format': 1, 'files': manifest.describe(folder, _files(folder))}
  paths.write_atomic(os.path.join(folder, MANIFEST), json.dumps(record, indent=1).encode(),
                     overwrite=True)


def adopt(builder: Any) -> None:
  """Gives a preparation made before manifests existed (checked by opening) its manifest;
  nothing when it has one or its folder is not writable (a shared, read-only data_dir)."""
  if not os.path.isfile(os.path.join(builder.data_dir, MANIFEST)):
    try:
      write_manifest(builder)
    except OSError:
      pass  # it is checked by opening each time instead


def _shard_records(path: str, expected: int) -> Optional[str]:
  """What is wrong with the array_record file `path` that should hold `expected` records:
  opening it reads its footer and index (not its records), so a missing or truncated file
  is found (a reader of a missing one, or of one cut before its footer, holds 0 records, and
  TFDS's data source then yields empty examples without an error)."""
  name = os.path.basename(path)
  if not os.path.isfile(path):
    return f'{name} is missing'
  try:
    reader = array_record_module.ArrayRecordReader(path, 'readahead_buffer_size:0')
    try:
      count = reader.num_records()
    finally:
      reader.close()
  except Exception as e:  # pylint: disable=broad-except  (riegeli's errors are RuntimeError)
    return f'{name} does not open ({textio.one_line(e) or type(e).__name__})'
  return None if count == expected else f'{name} holds {count} records, not {expected}'


def _split_counts(builder: Any) -> Optional[str]:
  """What is wrong opening each split's records (None when each holds its recorded count).

  TFDS's data source takes its length from `dataset_info.json` and opens its files only
  when a record is read, so each local array_record file is opened here and its record
  count compared with the recorded shard length."""
  for name, split in builder.info.splits.items():
    try:
      count = len(builder.as_data_source(split=name))
    except (RuntimeError, OSError, ValueError) as e:
      return f'split {name} does not open: {textio.one_line(e)}'
    if count != split.num_examples:
      return f'split {name} holds {count} records, not {split.num_examples}'
    for path, expected in zip(split.filepaths, split.shard_lengths):
      wrong = _shard_records(os.fspath(path), expected) if paths.is_local(path) else None
      if wrong:
        return f'split {name}: {wrong}'
  return None


# (folder, manifest mtime) whose crc32s this process checked: a run opens each split, the
# dev split again for evaluation; sizes are still checked every time.
_CHECKED = set()


def problem(builder: Any) -> Optional[str]:
  """What is wrong with the prepared folder of `builder` (None when it is intact)."""
  folder = builder.data_dir
  path = os.path.join(folder, MANIFEST)
  if not os.path.isfile(path):
    return _split_counts(builder)  # prepared before manifests: opening is the check
  try:
    key = (folder, os.stat(path).st_mtime_ns)
    with open(path, 'rb') as f:
      files = json.loads(f.read())['files']
    wrong = manifest.problem(folder, files, crc=key not in _CHECKED)
  except (OSError, ValueError, KeyError, TypeError) as e:
    return f'{MANIFEST} is unreadable ({e})'
  if wrong is None:
    _CHECKED.add(key)
  return wrong


def folder_of(builder_class: Any, config: Any, data_dir: str) -> str:
  """`<data_dir>/<name>/<config>/<version>`: where `builder_class` prepares `config`."""
  return os.path.join(data_dir, builder_class.name, config.name, str(builder_class.VERSION))


def open_checked(make_builder: Callable[[], Any]) -> Tuple[Any, Optional[str]]:
  """(the builder, what is damaged in its prepared folder or None).

  The builder reads TFDS's own JSON files when made; when that fails the folder is damaged
  and the returned builder is None.
  """
  try:
    builder = make_builder()
    if not builder.is_prepared():
      folder = builder.data_dir
      leftover = os.path.isdir(folder) and os.listdir(folder)
      return builder, 'dataset_info.json is missing' if leftover else None
    builder.info.metadata  # pylint: disable=pointless-statement  (reads metadata.json)
    return builder, problem(builder)
  except Exception as e:  # pylint: disable=broad-except
    # TFDS reading its own files: json and protobuf errors (protobuf's ParseError is no
    # ValueError), OSError; whatever it raises, the folder does not open.
    return None, f'its TFDS files do not read ({type(e).__name__}: {textio.one_line(e)})'


def set_aside(folder: str, reason: str) -> str:
  """Moves the damaged prepared `folder` (`<root>/<name>/<config>/<version>`) to
  `<root>/damaged/<name>-<config>-<version>-<time>` and says so in one warning line."""
  parts = folder.rstrip('/').split('/')
  root, tail = '/'.join(parts[:-3]), '-'.join(parts[-3:])
  target = os.path.join(root, 'damaged', f'{tail}-{int(time.time())}')
  paths.move(folder, target)
  logging.warning('The prepared corpus %s is damaged (%s); it is made from the corpus files, '
                  'so it is prepared again (the damaged copy is in %s).', folder, reason,
                  target)
  return target


def wait_until_prepared(make_builder: Callable[[], Any], folder: str, process_index: int,
                         timeout_s: float, poll_s: float) -> Any:
  """Processes other than 0 wait for process 0's preparation of `folder` (or for it to
  replace a damaged one). TFDS writes into a temp folder and renames it, so a folder that
  exists is complete."""
  deadline = time.monotonic() + timeout_s
  while True:
    builder, damage = open_checked(make_builder)
    if builder is not None and not damage and builder.is_prepared():
      return builder
    if time.monotonic() > deadline:
      raise DataError(f'Process {process_index} waited {timeout_s:g} s for process 0 to '
                      f'prepare {folder}; it did not appear{" intact" if damage else ""}.')
    time.sleep(poll_s)


@contextlib.contextmanager
def host_lock(data_dir: str) -> Iterator[None]:
  """Holds an exclusive flock on `<data_dir>/.t2t_jax-prepare.lock` (local folders only),
  so the processes of one host prepare one after the other."""
  os.makedirs(data_dir, exist_ok=True)
  path = os.path.join(data_dir, layout.PREPARE_LOCK_NAME)
  try:
    f = open(path, 'a')
  except OSError as e:  # e.g. a folder of that name
    raise DataError(f'cannot open the lock file {path}: {e.strerror or e}; remove what is '
                    'there (no run keeps anything in it)') from None
  with f:
    fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
    yield


def prepare_once(make_builder: Callable[[Optional[dict]], Any], sha: str,
                 check: Callable[[], dict], *, folder: str, process_index: int,
                 timeout_s: float, poll_s: float) -> Any:
  """The prepared builder of a local data set whose files have fingerprint `sha`.

  A preparation of exactly these files is reused (another one under the same name is
  refused); a damaged one in `folder` (`problem`) is moved aside by process 0 and
  prepared again. Otherwise `check()` reads the files, raising DataError before anything is
  written, and returns what the preparation records (`make_builder(result)`); process 0
  prepares (array_record), the other processes wait for it. `make_builder(None)` opens the
  builder without preparing.
  """
  builder, damage = open_checked(lambda: make_builder(None))
  if damage and process_index == 0:
    set_aside(folder, damage)
    builder = make_builder(None)
  elif damage:  # process 0 prepares it again; wait for that
    builder = None
  if builder is not None and builder.is_prepared():
    stored = builder.info.metadata.get('sha256') if builder.info.metadata else None
    if stored != sha:
      raise DataError(f'{builder.data_dir} was prepared from other files (sha256 {stored}, '
                      f'now {sha}); delete that folder to prepare it again.')
    logging.info('Reusing the prepared corpus %s', builder.data_dir)
    if process_index == 0:
      adopt(builder)
    return builder
  checked = check()
  if process_index != 0:
    return wait_until_prepared(lambda: make_builder(None), folder, process_index, timeout_s,
                                poll_s)
  # TFDS prepares into `incomplete.*` beside the result; a killed preparation leaves one.
  leftovers.remove_idle(os.path.dirname(folder), 'incomplete.')
  builder = make_builder(checked)
  download_and_prepare(builder)
  write_manifest(builder)
  return builder
