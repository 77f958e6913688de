"""The progress line of a decode: sentences done and sentences/s, redrawn in place on stderr
(`print_progress`), and its end when a stopped command leaves it open (`end_progress_line`)."""

import sys
from typing import Any, List

_OPEN_PROGRESS: List[Any] = []  # the stream whose progress line still awaits its newline


def print_progress(done: int, total: int, elapsed: float, stream: Any = None) -> None:
  """A one-line progress bar with sentences/s, redrawn in place (`end_progress_line` ends
  it early), on `stream` (None: the `sys.stderr` of the moment, which a notebook replaces)."""
  stream = sys.stderr if stream is None else stream
  width = 30
  filled = int(width * done / max(total, 1))
  rate = done / max(elapsed, 1e-9)
  stream.write(f'\r[{"#" * filled}{"." * (width - filled)}] {done}/{total} sentences '
               f'{rate:.1f} sent/s')
  _OPEN_PROGRESS[:] = [] if done >= total else [stream]
  if done >= total:
    stream.write('\n')
  stream.flush()


def end_progress_line() -> None:
  """Ends a progress line that a stopped command left open, so that the one line written
  next (its `error: ...`) starts a line of its own instead of trailing the bar."""
  while _OPEN_PROGRESS:
    stream = _OPEN_PROGRESS.pop()
    try:
      stream.write('\n')
      stream.flush()
    except (OSError, ValueError):  # a closed or full stream: nothing more to end
      pass
