"""Plain-text input and output shared by decode, eval and BLEU: strict UTF-8, atomic writes."""

import os
import tempfile
from typing import Iterable, List


class TextFileError(ValueError):
  """A text input that cannot be read (a folder, no permission) or is not valid UTF-8; the
  message names the file (and line)."""


def decode_lines(data: bytes, name: str) -> List[str]:
  """UTF-8 bytes -> lines without their endings; TextFileError naming `name` and the line.

  Lines are split on '\\n' only (a trailing '\\r' removed), so the count agrees with
  `wc -l` even when a sentence holds U+2028 or similar characters.
  """
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError as e:
    line_no = data.count(b'\n', 0, e.start) + 1
    raise TextFileError(
        f'{name} is not valid UTF-8: byte {e.start} (line {line_no}): {e.reason}') from None
  lines = text.split('\n')
  if lines and lines[-1] == '':
    lines.pop()  # the newline that ends the last line starts no new line
  return [line[:-1] if line.endswith('\r') else line for line in lines]


def read_lines(path: str) -> List[str]:
  """The lines of a UTF-8 text file (see `decode_lines`); errors name the file."""
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except FileNotFoundError:
    raise FileNotFoundError(f'no such file: {path}') from None
  except IsADirectoryError:
    raise TextFileError(f'{path} is a directory; expected a UTF-8 text file') from None
  except OSError as e:
    raise TextFileError(f'cannot read {path}: {e.strerror or e}') from None
  return decode_lines(data, path)


# The process umask, read once (reading it means setting it) before any thread starts.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def default_mode(fd: int) -> None:
  """Gives a `tempfile.mkstemp` file (created 0600) the mode a plain `open` would have made,
  so outputs renamed into place stay readable by others as usual."""
  os.fchmod(fd, 0o666 & ~_UMASK)


def write_bytes_atomic(path: str, data: bytes, *, overwrite: bool = False) -> None:
  """Writes `data` to `path` through a temporary file and a rename.

  A reader never sees a half-written file; with overwrite=False an existing file is refused
  (FileExistsError naming it) rather than replaced.
  """
  path = os.path.abspath(path)
  if not overwrite and os.path.exists(path):
    raise FileExistsError(f'{path} already exists; choose another output path or remove it')
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
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_text_atomic(path: str, text: str, *, overwrite: bool = False) -> None:
  """`text` as UTF-8 through `write_bytes_atomic` (same guarantees)."""
  write_bytes_atomic(path, text.encode('utf-8'), overwrite=overwrite)


def write_lines_atomic(path: str, lines: Iterable[str], *, overwrite: bool = False) -> None:
  """One line per item, each ending with '\\n'; see `write_text_atomic`."""
  write_text_atomic(path, ''.join(line + '\n' for line in lines), overwrite=overwrite)
