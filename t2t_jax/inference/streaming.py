"""Decoding as lines arrive (`--mode=decode --input=-`, or an `--input` that is a pipe):
`main.py` as an interactive filter, as `fairseq-interactive` is.

A reader thread takes lines from the input as they come. A batch is decoded when it holds
`batch_lines` lines, when the input has paused for `PAUSE_S` seconds after its last line, or
at the end of the input; each translation is written and flushed at once, in input order.
So one line typed into a pipe gives its translation within a pause and a decode, without the
input being closed. An interruption (Ctrl-C, SIGTERM) ends the loop between batches; what
was written stays written.
"""

import os
import queue
import threading
from typing import BinaryIO, Callable, List, Optional, Sequence

from t2t_jax.storage import textio

# How long the input may pause before the lines read so far are decoded.
PAUSE_S = 0.2
_END = object()


class StreamError(textio.TextFileError):
  """A streamed line that cannot be read; the message names its number, as a file's
  (`textio.decode_lines`) does, and says that the lines before it were translated."""


def is_stream(path: Optional[str]) -> bool:
  """Whether `--input=path` is read as a stream: '-' (standard input) or a named pipe."""
  import os  # pylint: disable=import-outside-toplevel
  import stat  # pylint: disable=import-outside-toplevel
  if path == '-':
    return True
  try:
    return bool(path) and stat.S_ISFIFO(os.stat(path).st_mode)
  except OSError:
    return False


def _read(source: BinaryIO, lines: 'queue.Queue') -> None:
  """Puts each line of `source` on `lines` as (its bytes without the newline, the offset of
  its first byte in the stream), then `_END`.

  It reads the file descriptor itself (`os.read`), not the buffered file: a daemon thread
  blocked inside a buffered read holds the buffer's lock, and an interpreter ending on Ctrl-C
  or SIGTERM while stdin's lock is held aborts (SIGABRT, 'could not acquire lock ... at
  interpreter shutdown'). A source without a descriptor is read line by line."""
  offset, pending = 0, b''
  try:
    try:
      fd = source.fileno()
      chunks = iter(lambda: os.read(fd, 1 << 16), b'')
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
      chunks = iter(source.readline, b'')
    for chunk in chunks:
      *complete, pending = (pending + chunk).split(b'\n')
      for raw in complete:
        lines.put((raw.rstrip(b'\r'), offset))
        offset += len(raw) + 1
    if pending:  # a last line without its newline
      lines.put((pending.rstrip(b'\r'), offset))
  except Exception as e:  # noqa: BLE001  reported by the consumer, in its thread
    lines.put(e)
  lines.put(_END)


def _text(item, number: int, name: str) -> str:
  """A streamed line (`_read`'s item) read as a file's (`textio.decode_lines`): strict UTF-8,
  a byte-order mark before the first line dropped; otherwise StreamError naming the byte and
  line in a file's words."""
  raw, offset = item
  try:
    text = raw.decode('utf-8')
  except UnicodeDecodeError as e:
    before = ('no line before it' if number == 1 else 'the line before it was translated'
              if number == 2 else f'the {number - 1} lines before it were translated')
    raise StreamError(f'{name} is not valid UTF-8: byte {offset + e.start} (line {number}): '
                      f'{e.reason}; {before}') from None
  return text[1:] if number == 1 and text.startswith('\ufeff') else text


def stream(source: BinaryIO, translate: Callable[[Sequence[str], List[int]], List[str]],
           write: Callable[[str], None], batch_lines: int, name: str = '<stdin>',
           pause_s: float = PAUSE_S) -> int:
  """Decodes `source`'s lines in batches as they arrive; returns the number of lines.

  `translate(lines, line_numbers)` gives one output string per line (1-based numbers in the
  whole stream); `write(text)` writes one output line (newline included) and flushes it.
  """
  lines: 'queue.Queue' = queue.Queue()
  threading.Thread(target=_read, args=(source, lines), daemon=True).start()
  done, ended, failed = 0, False, None
  while not ended and failed is None:
    batch: List[str] = []
    item = lines.get()  # the first line of a batch: wait as long as it takes
    while True:
      if item is _END:
        ended = True
        break
      if isinstance(item, Exception):
        failed = StreamError(f'{name}: reading failed after line {done + len(batch)}: {item}')
        break
      try:
        batch.append(_text(item, done + len(batch) + 1, name))
      except StreamError as e:  # the lines before it are translated first
        failed = e
        break
      if len(batch) >= batch_lines:
        break
      try:
        item = lines.get(timeout=pause_s)
      except queue.Empty:
        break  # the input paused: decode what came
    if batch:
      numbers = list(range(done + 1, done + len(batch) + 1))
      for text in translate(batch, numbers):
        write(text + '\n')
      done += len(batch)
  if failed is not None:
    raise failed
  return done
