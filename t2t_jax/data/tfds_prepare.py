"""TFDS's preparation with its console output in the log (stdout carries only what the user
asked for: the translations of `--mode=decode`, the JSON of `--mode=eval`) and with TFDS's
`Shuffler` replaced by `bounded_shuffler.BoundedShuffler` (no TensorFlow, bounded memory)."""

import contextlib
import io
import threading
from typing import Any, Iterator

from absl import logging
from tensorflow_datasets.core import shuffle as tfds_shuffle

from t2t_jax.data.bounded_shuffler import BoundedShuffler


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


_patch_lock = threading.Lock()
_patch_users = 0  # preparations (threads) inside bounded_shuffler() now
_tfds_shuffler = tfds_shuffle.Shuffler


@contextlib.contextmanager
def bounded_shuffler() -> Iterator[None]:
  """Makes TFDS's `Writer` use `BoundedShuffler` while inside, and restores TFDS's own after.

  Why: past 1 GB TFDS's `Shuffler` spills through `tf.io.gfile` (no TensorFlow here: a
  ModuleNotFoundError after ~1.9M examples), and with `disable_shuffling` (local corpora)
  it would hold the whole split in memory anyway. `Writer` looks the class up as
  `shuffle.Shuffler` each time it is built, and nothing else in TFDS binds the name, so
  replacing the module attribute is enough. Only for the duration: importing t2t_jax must
  not change TFDS for other users of the process. Threads preparing at once share one
  installation, counted, so the last one out restores TFDS's class."""
  global _patch_users
  with _patch_lock:
    if _patch_users == 0:
      tfds_shuffle.Shuffler = BoundedShuffler
    _patch_users += 1
  try:
    yield
  finally:
    with _patch_lock:
      _patch_users -= 1
      if _patch_users == 0:
        tfds_shuffle.Shuffler = _tfds_shuffler


def download_and_prepare(builder: Any) -> None:
  """`builder.download_and_prepare` (array_record), with what TFDS prints on stdout
  ("Downloading and preparing dataset ...") sent to the log: stdout carries only what the
  user asked for, such as the translations of `--mode=decode`. Examples are shuffled and
  sorted in bounded memory without TensorFlow (`bounded_shuffler()`)."""
  stream = _LogLines()
  try:
    with contextlib.redirect_stdout(stream), bounded_shuffler():
      builder.download_and_prepare(file_format='array_record')
  finally:
    stream.close()
