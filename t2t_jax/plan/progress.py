"""What `--mode=plan` is compiling, while it compiles (issue 51 D29: the paper's big model on
v5e:2x4 printed nothing for 300 s).

Each program the plan lowers and compiles (`compile.compile_step`) says so on stderr before it
starts ('plan: compiling the train step, batch 96 x 256 ...'), every `EVERY_S` seconds while it
runs ('plan: still compiling the train step, batch 96 x 256: 30 s so far'), and when it is done
('plan: compiled the train step, batch 96 x 256 in 41 s', with a note when it was read from
the plan cache or is too big for a chip). The periodic line comes from a thread: XLA lets the GIL go while it compiles.
The plan runs in a child process (`interruptible.call`), whose stderr is the command's;
stdout keeps the plan itself.
"""

import contextlib
import sys
import threading
import time
from typing import Dict, Iterator, Optional, TextIO, Tuple

EVERY_S = 30.0  # seconds between the lines of a compile still under way


def describe(name: str, shapes: Dict[str, Tuple[int, ...]]) -> str:
  """'the train step, batch 96 x 256'; 'the decode step, inputs 64 x 64, outputs 64 x 114';
  'the train_apply step' (a program without batch arguments)."""
  parts = [f'{key} {" x ".join(str(n) for n in shape)}' for key, shape in shapes.items()]
  return ', '.join([f'the {name} step'] + parts)


class Compiling:
  """What `compiling` yields: set `note` to say more of how the compile ended, e.g.
  'read from the plan cache' (the end line's parenthesis)."""

  def __init__(self, what: str):
    self.what = what
    self.note: Optional[str] = None


def seconds_text(seconds: float) -> str:
  """'0.4 s', '41 s', '5 min 12 s'."""
  if round(seconds, 1) < 10:
    return f'{seconds:.1f} s'
  if round(seconds) < 60:
    return f'{seconds:.0f} s'
  minutes, rest = divmod(int(round(seconds)), 60)
  return f'{minutes} min {rest} s'


def _write(stream: Optional[TextIO], line: str) -> None:
  stream = stream or sys.stderr
  try:
    stream.write(line + '\n')
    stream.flush()
  except (OSError, ValueError):  # a closed or full stream: progress is not worth an error
    pass


@contextlib.contextmanager
def compiling(what: str, *, every_s: Optional[float] = None,
              stream: Optional[TextIO] = None) -> Iterator[Compiling]:
  """Lines on `stream` (default: stderr) about the compile of `what` inside the block: one
  before it, one every `every_s` (default `EVERY_S`) seconds while it runs, saying for how
  long so far, and one after it with its seconds (on an exception: that it stopped)."""
  every_s = EVERY_S if every_s is None else every_s
  state = Compiling(what)
  start = time.monotonic()
  done = threading.Event()
  _write(stream, f'plan: compiling {what} ...')

  def tick() -> None:
    while not done.wait(every_s):
      _write(stream, f'plan: still compiling {what}: '
             f'{seconds_text(time.monotonic() - start)} so far')

  ticker = threading.Thread(target=tick, name='plan progress', daemon=True)
  ticker.start()
  try:
    yield state
  except BaseException as e:
    done.set()
    _write(stream, f'plan: stopped compiling {what} after '
           f'{seconds_text(time.monotonic() - start)} ({type(e).__name__})')
    raise
  finally:
    done.set()
    ticker.join()
  note = f' ({state.note})' if state.note else ''
  _write(stream, f'plan: compiled {what} in {seconds_text(time.monotonic() - start)}{note}')
