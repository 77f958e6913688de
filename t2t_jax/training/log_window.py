"""The training loop's metrics window: sums and timing since the last metrics line, and the
line itself (`train._Run._log`)."""

import time
from typing import Dict

import jax

from t2t_jax.inference.evaluate import summarize
from t2t_jax.runtime import parallel, peaks


class LogWindow:
  """Metric sums and timing since the last metrics line."""

  def __init__(self, total: int, schedule, run_start: float):
    self.total, self.schedule, self.run_start = total, schedule, run_start
    self.sums, self.start, self.steps = None, time.monotonic(), 0
    self.peak, self.peak_source = peaks.run_peak()  # MFU's denominator (runtime/peaks.py)

  def add(self, step_sums) -> None:
    self.sums = parallel.add_metrics(self.sums, step_sums)
    self.steps += 1

  def close(self, step: int, padded_tokens: int, model_flops: int = 0) -> Dict[str, float]:
    """The window's metrics (reads the device sums: the loop's one regular sync); resets.
    `model_flops`: the window's updates' matmul FLOPs (`Steps.model_flops`): their rate is
    `model_tflops_per_s`, over the devices' peak `mfu` (model FLOPs utilisation)."""
    m = summarize(self.sums)
    elapsed = time.monotonic() - self.start
    if model_flops:
      m['model_tflops_per_s'] = model_flops / max(elapsed, 1e-9) / 1e12
      if self.peak:
        m['mfu'] = model_flops / max(elapsed, 1e-9) / self.peak
    m.update(learning_rate=float(self.schedule(step - 1)),
             tokens_per_s=m['tokens'] / max(elapsed, 1e-9),
             padding_efficiency=m['tokens'] / max(padded_tokens, 1),
             steps_per_s=self.steps / max(elapsed, 1e-9),
             eta_s=(self.total - step) * elapsed / self.steps,
             elapsed_s=time.monotonic() - self.run_start,
             nonfinite_steps=float(jax.device_get(self.sums['nonfinite'])))
    # The steps' mean gradient norm (before clipping); a skipped step's is zeroed.
    if 'grad_norm' in self.sums:
      m['grad_norm'] = float(jax.device_get(self.sums['grad_norm'])) / max(
          self.steps - m['nonfinite_steps'], 1.0)
    self.sums, self.start, self.steps = None, time.monotonic(), 0
    return m


def format_line(step: int, total: int, m: Dict[str, float]) -> str:
  """The console line of a window's metrics (`LogWindow.close`), sown losses included."""
  eta = m.get('eta_s', 0.0)
  gnorm = f' gnorm {m["grad_norm"]:.3f}' if 'grad_norm' in m else ''
  return (f'step {step}/{total} loss {m["loss"]:.4f} nll {m["nll"]:.4f} '
          f'acc {m["accuracy"]:.3f} lr {m["learning_rate"]:.3e} '
          f'{m["tokens_per_s"]:,.0f} tok/s ETA {int(eta // 3600)}h{int(eta % 3600 // 60):02d}m'
          f'{int(eta % 60):02d}s{gnorm}' + (f' MFU {m["mfu"]:.1%}' if 'mfu' in m else '')
          + (f' goodput {m["goodput"]:.0%}' if 'goodput' in m else '')
          + ''.join(f' {k} {m[k]:.4f}' for k in sorted(m)
                                                  if k.startswith('aux_')))
