"""Metrics sinks: `<workdir>/metrics.jsonl` and TensorBoard event files (via tensorboardX).

Only one process writes (process 0 in multi-host runs); the others get a writer that drops
everything, so callers need no `if process_index == 0`.
"""

import json
import math
import os
from typing import Dict, Optional

from absl import logging


class MetricsWriter:
  """Appends one JSON object per call to metrics.jsonl and scalars to TensorBoard."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self._tb = None
    self._jsonl = None
    if not enabled:
      return
    self._jsonl = open(os.path.join(workdir, 'metrics.jsonl'), 'a', encoding='utf-8')
    try:
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(os.path.join(workdir, 'tensorboard'))
    except ImportError:  # optional for library users; requirements.txt installs it
      logging.warning('tensorboardX is not installed: no TensorBoard event files')

  def write(self, step: int, scalars: Dict[str, float], prefix: Optional[str] = None) -> None:
    if not self.enabled:
      return
    record = {'step': int(step)}
    for key, value in scalars.items():
      name = f'{prefix}/{key}' if prefix else key
      value = float(value)
      record[name] = value if math.isfinite(value) else str(value)
      if self._tb is not None:
        self._tb.add_scalar(name, value, int(step))
    self._jsonl.write(json.dumps(record) + '\n')
    self._jsonl.flush()

  def close(self) -> None:
    if self._jsonl is not None:
      self._jsonl.close()
    if self._tb is not None:
      self._tb.close()
