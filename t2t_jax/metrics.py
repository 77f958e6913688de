"""Metrics sinks: `<workdir>/metrics.jsonl` and TensorBoard event files (via tensorboardX).

Only one process writes (process 0 in multi-host runs); the others get a writer that drops
everything, so callers need no `if process_index == 0`.

The workdir may be remote (`paths`): metrics.jsonl is then rewritten whole at each write
(object stores cannot append). tensorboardX writes gs:// event files itself through
google-cloud-storage (installed with gcsfs, `requirements-gcs.txt`), uploading the whole
file at each flush (every 2 minutes and at the end); where it cannot (other stores, or that
package missing) the run goes on without event files and says so once.
"""

import json
import math
import os
from typing import Dict, Optional

from absl import logging

from t2t_jax import paths


def _tensorboard(logdir: str):
  """A tensorboardX SummaryWriter on `logdir`, or None (with a warning) where none can be."""
  try:
    from tensorboardX import SummaryWriter
  except ImportError:  # optional for library users; requirements.txt installs it
    logging.warning('tensorboardX is not installed: no TensorBoard event files')
    return None
  if paths.is_local(logdir):
    return SummaryWriter(logdir)
  if not logdir.startswith('gs://'):
    logging.warning('no TensorBoard event files: tensorboardX cannot write to %s '
                    '(metrics.jsonl has every value)', logdir)
    return None
  try:
    return SummaryWriter(logdir)
  except Exception as e:  # noqa: BLE001 - missing package or credentials: metrics go on
    logging.warning('no TensorBoard event files in %s (%s: %s); metrics.jsonl has every '
                    'value. pip install -r requirements-gcs.txt for gs:// event files.',
                    logdir, type(e).__name__, e)
    return None


class MetricsWriter:
  """Appends one JSON object per call to metrics.jsonl and scalars to TensorBoard."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self._tb = None
    self._jsonl = None
    if not enabled:
      return
    self._jsonl = paths.AppendFile(os.path.join(workdir, 'metrics.jsonl'))
    self._tb = _tensorboard(os.path.join(workdir, 'tensorboard'))

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

  def close(self) -> None:
    if self._jsonl is not None:
      self._jsonl.close()
    if self._tb is not None:
      self._tb.close()
