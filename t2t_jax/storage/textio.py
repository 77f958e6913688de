"""Plain-text input and output shared by decode, eval and BLEU: strict UTF-8, atomic writes,
local or remote paths (`paths`)."""

import sys
from typing import Iterable, List, Optional

from etils import epath

from t2t_jax.storage import paths


class TextFileError(ValueError):
  """A text input that cannot be read (a folder, no permission) or is not valid UTF-8; the
  message names the file (and line)."""


def one_line(error: BaseException, limit: int = 200) -> str:
  """The message of `error` on one line (library messages span lines), at most `limit`
  characters: for a one-line error or warning that quotes it."""
  return ' '.join(str(error).split())[:limit]


def decode_lines(data: bytes, name: str) -> List[str]:
  """UTF-8 bytes -> lines without their endings; TextFileError naming `name` and the line.

  Lines are split on '\\n' only (a trailing '\\r' removed), so the count agrees with
  `wc -l` even when a sentence holds U+2028 or similar characters. One leading byte-order
  mark (U+FEFF, which Windows editors write) is dropped: it marks the encoding, it is not
  text, and a model would read it as an unknown token (the corpus reader drops it too).
  """
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError as e:
    line_no = data.count(b'\n', 0, e.start) + 1
    raise TextFileError(
        f'{name} is not valid UTF-8: byte {e.start} (line {line_no}): {e.reason}') from None
  if text.startswith('\ufeff'):
    text = text[1:]
  lines = text.split('\n')
  if lines and lines[-1] == '':
    lines.pop()  # the newline that ends the last line starts no new line
  return [line[:-1] if line.endswith('\r') else line for line in lines]


def read_lines(path: str) -> List[str]:
  """The lines of a UTF-8 text file (see `decode_lines`); errors name the file."""
  try:
    data = epath.Path(path).read_bytes()
  except FileNotFoundError:
    raise FileNotFoundError(f'no such file: {path}') from None
  except IsADirectoryError:
    raise TextFileError(f'{path} is a directory; expected a UTF-8 text file') from None
  except OSError as e:
    raise TextFileError(f'cannot read {path}: {e.strerror or e}') from None
  return decode_lines(data, path)


def read_input(path: Optional[str]) -> List[str]:
  """The lines of a command's input: standard input for None or '-' (read to its end, named
  '<stdin>'), else `read_lines(path)`; one reader and one set of checks for both."""
  if path in (None, '-'):
    return decode_lines(sys.stdin.buffer.read(), '<stdin>')
  return read_lines(path)


def write_bytes_atomic(path: str, data: bytes, *, overwrite: bool = False) -> None:
  """Writes `data` to `path` (local or remote) so that a reader never sees half of it; with
  overwrite=False an existing file is refused (FileExistsError naming it) rather than
  replaced. See `paths.write_atomic`."""
  paths.write_atomic(path, data, overwrite=overwrite)


def write_text_atomic(path: str, text: str, *, overwrite: bool = False) -> None:
  """`text` as UTF-8 through `write_bytes_atomic` (same guarantees)."""
  write_bytes_atomic(path, text.encode('utf-8'), overwrite=overwrite)


def write_lines_atomic(path: str, lines: Iterable[str], *, overwrite: bool = False) -> None:
  """One line per item, each ending with '\\n'; see `write_text_atomic`."""
  write_text_atomic(path, ''.join(line + '\n' for line in lines), overwrite=overwrite)
