"""Metrics sinks: `<workdir>/metrics.jsonl`, TensorBoard event files (via tensorboardX), and
the tracking services of `--config.writers` (`trackers`: W&B, MLflow, one's own).

Only one process writes (process 0 in multi-host runs); the others get a writer that drops
everything, so callers need no `if process_index == 0`.

The workdir may be remote (`paths`): object stores cannot append, so metrics.jsonl is then
rewritten whole at each write, and event files are kept in memory and written whole at each
tensorboardX flush (every 2 minutes and at the end) through epath, by a record writer
registered with tensorboardX for the workdir's scheme (its own gs:// writer needs
google-cloud-storage and uploads again, at interpreter exit, from `__del__`).
"""

import contextlib
import io
import json
import math
import sys
from typing import Dict, List, Optional

from absl import logging
from etils import epath

from t2t_jax import choices
from t2t_jax.storage import layout, paths
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.storage.workdir import WorkdirError
from t2t_jax.training import trackers


class _WholeObjectWriter:
  """A tensorboardX record writer for object stores: the event file in memory, written in
  one piece (`paths.write_atomic`) at each flush."""

  def __init__(self, path: str):
    self.path = path
    self._buffer = io.BytesIO()
    self._unwritten = True

  def write(self, data: bytes) -> None:
    self._buffer.write(data)
    self._unwritten = True

  def flush(self) -> None:
    if self._unwritten:
      paths.write_atomic(self.path, self._buffer.getvalue(), overwrite=True)
      self._unwritten = False

  def close(self) -> None:
    self.flush()


class _WholeObjectWriterFactory:
  """The factory interface of `tensorboardX.record_writer.register_writer_factory`."""

  def open(self, path: str) -> _WholeObjectWriter:
    return _WholeObjectWriter(path)

  def directory_check(self, path: str) -> None:
    del path  # object stores have no folders to create


def _import_tensorboardx():
  """(SummaryWriter, record_writer) of tensorboardX, imported without PyTorch.

  tensorboardX's writer tries `import torch` when it is imported, to accept torch tensors;
  we write Python floats only. With torch installed (transformers' tests, pretrained/) that
  import alone added 0.9 s to the start of every training run (jax 0.10.2, torch 2.13, on
  the 2-core AMD EPYC). Unless this process imported torch already, `import torch` fails
  for that moment, so tensorboardX takes its numpy-only path; torch imports normally
  afterwards.
  """
  hide = 'torch' not in sys.modules
  if hide:
    sys.modules['torch'] = None  # `import torch` raises ImportError while this is None
  try:
    from tensorboardX import SummaryWriter, record_writer  # pylint: disable=import-outside-toplevel
  finally:
    if hide and sys.modules.get('torch', 0) is None:
      del sys.modules['torch']
  return SummaryWriter, record_writer


def _tensorboard(logdir: str):
  """A tensorboardX SummaryWriter on `logdir` (local or remote), or None with a warning."""
  try:
    SummaryWriter, record_writer = _import_tensorboardx()
  except ImportError:  # optional for library users; requirements.txt installs it
    logging.warning('tensorboardX is not installed: no TensorBoard event files')
    return None
  if not paths.is_local(logdir):
    record_writer.register_writer_factory(logdir.split('://', 1)[0],
                                          _WholeObjectWriterFactory())
  return SummaryWriter(logdir)


def _is_record(line: str) -> bool:
  """Whether a line of metrics.jsonl is a whole record (a JSON object)."""
  try:
    return isinstance(json.loads(line), dict)
  except ValueError:
    return False


def _last_step(data: bytes) -> int:
  """The largest integer `step` of the whole records in metrics.jsonl's bytes (0: none)."""
  last = 0
  for line in data.decode('utf-8', 'replace').split('\n'):
    try:
      record = json.loads(line)
    except ValueError:
      continue  # a torn or garbled line: MetricsWriter and --mode=plot say so
    if isinstance(record, dict) and type(record.get('step')) is int:
      last = max(last, record['step'])
  return last


def set_aside_lost_run(workdir: str) -> Optional[str]:
  """Called by a training run that starts at step 0 (no checkpoint), before it writes metrics.

  A metrics.jsonl that already holds steps beyond 0 was written by a run whose checkpoints are
  gone (deleted, or never written before it stopped): appended to, the file would run 0, 200,
  300, 0, 20 and its learning curves would mix two runs. It is moved to
  `metrics.old-<n>.jsonl` (the first free n; never deleted, it is the user's) with one warning
  line, so that metrics.jsonl, the plots and `--mode=plot` hold the new run only. Returns the
  new path, or None when nothing was moved (no file, or only the step-0 eval of a run stopped
  before its first step, which the new run's own replaces).
  """
  wd = layout.of(workdir)
  try:
    last = _last_step(paths.read_bytes(wd.metrics))
  except OSError:  # missing; or unreadable, which MetricsWriter reports in one line
    return None
  if last <= 0:
    return None
  n = 1
  while epath.Path(wd.metrics_set_aside(n)).exists():
    n += 1
  target = wd.metrics_set_aside(n)
  with workdir_lib.writing(target):
    paths.move(wd.metrics, target)
  logging.warning('%s holds steps up to %d, but training starts again at step 0 (no checkpoint '
                  'in %s: deleted, or that run stopped before its first one): moved it to %s '
                  'so that metrics.jsonl and the plots show this run only', wd.metrics, last,
                  wd.checkpoints, target)
  return target


class MetricsWriter:
  """Every metric of a run to each writer of `config.writers`: one JSON object per call to
  metrics.jsonl, scalars to TensorBoard, and to W&B, MLflow or one's own (`trackers`).

  `config`: the resolved run config (None: jsonl and tensorboard, nothing else), whose keys
  are each tracking run's parameters; `resuming`: the run goes on from a checkpoint (a
  tracking run id that does not read is then warned about).
  """

  def __init__(self, workdir: str, enabled: bool = True, config=None, resuming: bool = False):
    self.enabled = enabled
    self._tb = None
    self._jsonl = None
    self._failed = False
    self._others: List = []
    if not enabled:
      return
    entries = choices.parse_writers(config.writers) if config is not None else choices.WRITERS
    self._jsonl = paths.AppendFile(layout.of(workdir).metrics, _is_record)
    if self._jsonl.torn is not None:  # a killed run's partial record: new ones start clean
      logging.warning('%s: dropped a torn last line (a run killed while writing it): %s',
                      self._jsonl.path, self._jsonl.torn[:200])
    if 'tensorboard' in entries:
      with self._writing(layout.of(workdir).tensorboard):  # writes its first event now
        self._tb = _tensorboard(layout.of(workdir).tensorboard)
    if config is not None:
      with self._writing(layout.of(workdir).tracking):
        self._others = trackers.open_writers(workdir, config, resuming)
      self._to_others('write_hparams', {k: config[k] for k in config.keys()})

  @contextlib.contextmanager
  def _writing(self, path: str):
    """`workdir.writing` of `path`, remembering that it failed (`close` then stays quiet)."""
    try:
      with workdir_lib.writing(path, ' and rerun to resume from the last checkpoint'):
        yield
    except WorkdirError:
      self._failed = True
      raise

  def _to_others(self, method: str, *args) -> None:
    """`method(*args)` of each tracking writer; one that fails is warned about once and
    dropped: the run goes on, and metrics.jsonl has every metric."""
    for writer in list(self._others):
      call = getattr(writer, method, None)
      try:
        if call is not None:
          call(*args)
      except Exception as e:  # noqa: BLE001  a service's failure must not stop training
        self._others.remove(writer)
        logging.warning('metrics writer %s failed (%s: %s) and is dropped for the rest of the '
                        'run; metrics.jsonl keeps every metric', type(writer).__name__,
                        type(e).__name__, str(e).split('\n')[0][:300])

  def write(self, step: int, scalars: Dict[str, float], prefix: Optional[str] = None) -> None:
    if not self.enabled:
      return
    record, named = {'step': int(step)}, {}
    for key, value in scalars.items():
      name = f'{prefix}/{key}' if prefix else key
      named[name] = value = float(value)
      record[name] = value if math.isfinite(value) else str(value)
      if self._tb is not None:
        self._tb.add_scalar(name, value, int(step))
    with self._writing(self._jsonl.path):
      self._jsonl.write(json.dumps(record) + '\n')
    self._to_others('write_scalars', int(step), named)

  def close(self) -> None:
    """Closes every sink. A write failure closing the workdir's own is raised as one line,
    unless one was reported already (the run stops for it anyway: what was not written fails
    again)."""
    self._to_others('flush')
    self._to_others('close')
    reported = self._failed or workdir_lib.write_failures_reported()
    for sink in (self._jsonl, self._tb):
      try:
        if sink is not None:
          with self._writing(getattr(sink, 'path', None) or getattr(sink, 'logdir', '')):
            sink.close()
      except WorkdirError:
        if not reported:
          raise
