"""Paths on any file system: local folders and object stores (gs://, s3://) through etils.epath.

Paths stay plain strings everywhere in the project (`os.path.join`, `dirname` and `basename`
are correct on `gs://bucket/run` strings); what touches the file system goes through
`etils.epath.Path` or the helpers here. Local paths behave exactly as before: made absolute,
written through a temporary file and a rename (or a hard link where an existing file must not
be replaced), with the usual umask mode.

Object stores have neither renames nor links, but writing a whole object is atomic: readers see
the old object or the new one, never half of it. "Must not overwrite" is a check followed by a
write; on gs:// that write is also conditional (gcsfs's exclusive mode sends
`ifGenerationMatch=0`, so GCS refuses it if another writer created the object between the
check and the write). Other stores keep a small race between the check and the write.

gcsfs caches directory listings for the life of the process; `forget` drops what it knows of
a path, for files that other processes change (a lease, a file another host writes).
"""

import io
import os
import tempfile
from typing import Callable, Optional, Tuple, Union

from etils import epath

PathLike = Union[str, os.PathLike]

# The process umask, read once (reading it means setting it) before any thread starts.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def is_local(path: PathLike) -> bool:
  """True for a path of the local file system, False for a URI such as gs://bucket/dir."""
  return '://' not in os.fspath(path)


def absolute(path: PathLike) -> str:
  """The absolute form of a local path; a URI is returned as given, less a trailing '/'."""
  path = os.fspath(path)
  return os.path.abspath(path) if is_local(path) else path.rstrip('/')


def makedirs(path: PathLike) -> None:
  """Creates a local folder and its parents. A no-op on object stores, which have no
  folders (and where gcsfs would create a missing *bucket* instead)."""
  if is_local(path):
    os.makedirs(path, exist_ok=True)


def default_mode(fd: int) -> None:
  """Gives a `tempfile.mkstemp` file (created 0600) the mode a plain `open` would have made,
  so outputs renamed into place stay readable by others as usual."""
  os.fchmod(fd, 0o666 & ~_UMASK)


def _filesystem(path: str):
  """The fsspec file system epath uses for a URI (one cached instance per protocol)."""
  from etils.epath import backend  # pylint: disable=g-import-not-at-top
  return backend.fsspec_backend.fs(path)


def forget(path: PathLike) -> None:
  """Drops cached listings of `path` and its folder (remote paths; a no-op for local ones),
  so the next `exists` or read asks the store instead of this process's memory."""
  path = os.fspath(path)
  if not is_local(path):
    fs = _filesystem(path)
    fs.invalidate_cache(path)
    fs.invalidate_cache(os.path.dirname(path))


def _write_local(path: str, data: bytes, overwrite: bool) -> None:
  directory = os.path.dirname(path)
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix='.' + os.path.basename(path) + '.tmp')
  default_mode(fd)
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
    if overwrite:
      os.replace(tmp, path)
    else:
      os.link(tmp, path)  # fails if `path` appeared meanwhile, unlike rename
      os.remove(tmp)
  except FileExistsError:
    raise _exists(path) from None
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def _exists(path: str) -> FileExistsError:
  return FileExistsError(f'{path} already exists; choose another output path or remove it')


def write_atomic(path: PathLike, data: bytes, *, overwrite: bool = False) -> None:
  """Writes `data` to `path` so that a reader never sees half of it.

  With overwrite=False an existing file is refused (FileExistsError naming it) rather than
  replaced. Local: temp file + rename or link (see the module doc); remote: one object write.
  """
  path = absolute(path)
  if is_local(path):
    if not overwrite and os.path.exists(path):
      raise _exists(path)
    _write_local(path, data, overwrite)
    return
  if not overwrite:
    forget(path)
    if epath.Path(path).exists():
      raise _exists(path)
  # 'xb' is gcsfs's write-once mode (ifGenerationMatch=0), which epath does not pass on;
  # other stores only know 'wb'.
  mode = 'xb' if not overwrite and path.startswith('gs://') else 'wb'
  try:
    with _filesystem(path).open(path, mode) as f:
      f.write(data)
  except FileExistsError:
    raise _exists(path) from None
  forget(path)


def read_bytes(path: PathLike) -> bytes:
  """The bytes of a file, fresh from the store (see `forget`)."""
  forget(path)
  return epath.Path(path).read_bytes()


def move(source: PathLike, target: PathLike) -> None:
  """Moves a file or a folder to `target` (which must not exist), creating its folder.

  Local: one rename. Remote: a recursive copy then delete, so not atomic; callers move only
  what no reader needs meanwhile (e.g. an unreadable checkpoint set aside).
  """
  source, target = absolute(source), absolute(target)
  if is_local(source) and is_local(target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.rename(source, target)
    return
  forget(source)
  fs = _filesystem(source)
  protocol = source.split('://', 1)[0] + '://'
  # Object by object (gcsfs's own mv first tries an API that not every store offers).
  for name in fs.find(source):
    name = protocol + name
    fs.copy(name, target + name[len(source):])
  fs.rm(source, recursive=True)
  forget(source)
  forget(target)


def upload_directory(local_dir: str, target: str) -> None:
  """Copies the files under the local folder `local_dir` to the URI `target` (gs://...),
  which nothing else writes meanwhile, streaming each file.

  Not atomic (object stores have no renames): if a copy fails, the objects copied so far are
  removed again, and the error is raised.
  """
  fs = _filesystem(target)
  written = []
  try:
    for folder, _, names in sorted(os.walk(local_dir)):
      for name in sorted(names):
        local = os.path.join(folder, name)
        remote = f'{target}/{os.path.relpath(local, local_dir)}'
        written.append(remote)
        fs.put_file(local, remote)
  except BaseException:
    for remote in written:
      try:
        fs.rm_file(remote)
      except OSError:
        pass  # never written, or already gone
    raise
  finally:
    forget(target)


def _end_last_line(data: bytes, whole_line: Optional[Callable[[str], bool]]
                   ) -> Tuple[bytes, Optional[str]]:
  """(`data` with an unterminated last line ended by a newline, or cut off when `whole_line`
  says it is not whole; the line cut off, or None)."""
  if not data or data.endswith(b'\n'):
    return data, None
  start = data.rfind(b'\n') + 1
  last = data[start:].decode('utf-8', 'replace')
  if whole_line is None or whole_line(last):
    return data + b'\n', None
  return data[:start], last


class AppendFile:
  """A text file open for appending lines, on any file system.

  Local: an ordinary file opened with 'a', flushed after each `write`. Object stores cannot
  append, so the whole content (what existed when opened, plus every line since) is kept in
  memory and the object is rewritten in one piece by each `write`: it stays complete and
  readable at every moment. Meant for small logs such as metrics.jsonl.

  A last line without its newline (a writer killed while writing it) is never continued: it
  is ended with a newline, or, when `whole_line(line)` is false, cut off and kept in `torn`
  for the caller to report (None when nothing was cut).
  """

  def __init__(self, path: PathLike, whole_line: Optional[Callable[[str], bool]] = None):
    self.path = absolute(path)
    self._local = is_local(self.path)
    self.torn: Optional[str] = None
    if self._local:
      if os.path.exists(self.path):
        with open(self.path, 'rb') as f:
          data = f.read()
        ended, self.torn = _end_last_line(data, whole_line)
        if len(ended) < len(data):
          os.truncate(self.path, len(ended))
        elif len(ended) > len(data):
          with open(self.path, 'ab') as f:
            f.write(b'\n')
      self._file = open(self.path, 'a', encoding='utf-8')
      return
    self._buffer = io.StringIO()
    target = epath.Path(self.path)
    forget(self.path)
    if target.exists():
      ended, self.torn = _end_last_line(target.read_bytes(), whole_line)
      self._buffer.write(ended.decode('utf-8'))

  def write(self, text: str) -> None:
    if self._local:
      self._file.write(text)
      self._file.flush()
    else:
      self._buffer.write(text)
      write_atomic(self.path, self._buffer.getvalue().encode('utf-8'), overwrite=True)

  def close(self) -> None:
    if self._local:
      self._file.close()
