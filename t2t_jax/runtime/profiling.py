"""`--config.profile_steps=START:END`: a `jax.profiler` trace of train steps START..END (1-based,
both included) into `<workdir>/profile/`, each step an annotated `StepTraceAnnotation('train',
step_num=N)`, so TensorBoard's profile plugin shows them as steps and Perfetto
(`*.trace.json.gz`, ui.perfetto.dev) as named slices. `--mode=decode --output=OUT` traces its
batches START..END into `OUT.profile/` (`batches`: counted as they finish, not annotated).

The trace starts as step START is dispatched and stops once step END's result exists (the
trace then holds all of its device work); a run that ends before END stops it at exit. Each
process of a multi-process run writes its own trace into the folder (file names carry the
host).
"""

import atexit
import contextlib
from typing import Any, Callable, Iterator, Optional

from absl import logging
import jax

from t2t_jax import choices
from t2t_jax.storage import paths


class StepProfiler:
  """Traces the steps `spec` ('START:END', or '' for none) names into `folder`."""

  def __init__(self, spec: str, folder: Optional[str], what: str = 'train'):
    self.span = choices.parse_profile_steps(spec) if folder else None
    self.folder, self.what, self.active = folder, what, False

  @contextlib.contextmanager
  def step(self, number: int) -> Iterator[Callable[[Any], None]]:
    """Around step `number`'s dispatch; yields `done(outputs)`, which the caller calls with the
    step's outputs: after the last traced step it waits for them, then ends the trace."""
    if self.span is not None and number == self.span[0] and not self.active:
      self._start()
    last = self.active and number >= self.span[1]

    def done(outputs: Any) -> None:
      if last:  # its device work inside the trace
        jax.block_until_ready(outputs)

    if not self.active:
      yield done
      return
    with jax.profiler.StepTraceAnnotation(self.what, step_num=number):
      yield done
    if last:  # after the step's annotation has closed, so the trace holds it
      self.stop()

  def batches(self, progress: Optional[Callable[[int, int, float], None]]
              ) -> Optional[Callable[[int, int, float], None]]:
    """A `Translator` progress callback (`progress(done, total, elapsed)`, called once a batch
    is done) that also traces batches START..END, then calls `progress`; `progress` itself
    when nothing is to be traced."""
    if self.span is None:
      return progress
    if self.span[0] == 1:
      self._start()
    finished = [0]

    def each(done: int, total: int, elapsed: float) -> None:
      finished[0] += 1
      if finished[0] == self.span[0] - 1:
        self._start()
      if finished[0] >= self.span[1] or done >= total:
        self.stop()
      if progress is not None:
        progress(done, total, elapsed)
    return each

  def _start(self) -> None:
    if self.active:
      return
    paths.makedirs(self.folder)
    jax.profiler.start_trace(self.folder, create_perfetto_trace=True)
    self.active = True
    atexit.register(self.stop)  # a run that ends before END
    logging.info('profiling %s steps %d to %d into %s', self.what, *self.span, self.folder)

  def stop(self) -> None:
    """Ends the trace (nothing when none is running)."""
    if not self.active:
      return
    self.active = False
    jax.profiler.stop_trace()
    logging.info('profile of %s steps %d to %d written to %s: tensorboard --logdir %s (the '
                 'profile tab), or its *.trace.json.gz in ui.perfetto.dev', self.what,
                 *self.span, self.folder, self.folder)
