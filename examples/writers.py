"""A metrics writer of one's own, in a few lines (docs/tracking.md): every scalar of a run as
a row `step,name,value` of `<workdir>/metrics.csv`.

  python main.py --workdir=runs/a --config.writers=jsonl,tensorboard,examples.writers:CsvWriter

A writer is any object with CLU's `MetricWriter` method names that a run calls:
`write_scalars(step, scalars)`, and optionally `write_hparams(hparams)`, `flush()`, `close()`.
Its factory (here the class) gets those of the keywords `workdir` and `config` it takes.
"""

import csv
import os
from typing import Mapping


class CsvWriter:

  def __init__(self, workdir: str):
    self._file = open(os.path.join(workdir, 'metrics.csv'), 'a', newline='', encoding='utf-8')
    self._csv = csv.writer(self._file)

  def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
    self._csv.writerows((step, name, value) for name, value in scalars.items())

  def flush(self) -> None:
    self._file.flush()

  def close(self) -> None:
    self._file.close()
