"""TFDS's preparation with its console output in the log: stdout carries only what the user
asked for (the translations of `--mode=decode`, the JSON of `--mode=eval`)."""

import contextlib
import io
from typing import Any

from absl import logging


class _LogLines(io.TextIOBase):
  """A text stream that logs each line written to it at INFO (the console log, stderr)."""

  def __init__(self):
    super().__init__()
    self._pending = ''

  def write(self, text: str) -> int:
    *lines, self._pending = (self._pending + text).split('\n')
    for line in lines:
      if line.strip():
        logging.info('%s', line.strip())
    return len(text)

  def close(self) -> None:
    self.write('\n')
    super().close()


def download_and_prepare(builder: Any) -> None:
  """`builder.download_and_prepare` (array_record), with what TFDS prints on stdout
  ("Downloading and preparing dataset ...") sent to the log: stdout carries only what the
  user asked for, such as the translations of `--mode=decode`."""
  stream = _LogLines()
  try:
    with contextlib.redirect_stdout(stream):
      builder.download_and_prepare(file_format='array_record')
  finally:
    stream.close()
