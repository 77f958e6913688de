"""The metrics window's rates (training/log_window.py): model FLOP/s and MFU from the step's
FLOP count (model/flop_count.py) over the devices' peak (runtime/peaks.py), counted by hand."""

import jax.numpy as jnp
import pytest

from t2t_jax.model import flop_count, transformer as model
from t2t_jax.runtime import peaks
from t2t_jax.training import log_window, steps as steps_lib


def test_mfu_is_the_windows_model_flops_over_its_seconds_and_the_peak(monkeypatch):
  monkeypatch.setattr(peaks, 'run_peak', lambda: (2e12, 'a test peak'))
  clock = iter([100.0, 104.0])
  monkeypatch.setattr(log_window.time, 'monotonic', lambda: next(clock, 104.0))
  window = log_window.LogWindow(10, lambda step: 1e-3, run_start=100.0)
  window.add({'loss': jnp.array(8.0), 'nll': jnp.array(8.0), 'correct': jnp.array(2.0),
              'weight': jnp.array(4.0), 'tokens': jnp.array(4.0), 'nonfinite': jnp.array(0)})
  m = window.close(1, padded_tokens=8, model_flops=6e12)
  assert m['model_tflops_per_s'] == pytest.approx(6e12 / 4.0 / 1e12)
  assert m['mfu'] == pytest.approx(6e12 / 4.0 / 2e12)
  assert ' MFU 75.0%' in log_window.format_line(1, 10, m)


def test_a_steps_flops_are_the_analytic_count_of_its_batch_shape():
  cfg = model.TransformerConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=4, num_layers=2)
  steps = steps_lib.Steps.__new__(steps_lib.Steps)
  steps._cfg, steps.model_flops, steps.padded_tokens, steps.shapes = cfg, 0, 0, set()  # pylint: disable=protected-access
  steps._note_shape({'inputs': jnp.zeros((8, 24)), 'targets': jnp.zeros((8, 16))})  # pylint: disable=protected-access
  # 3 x forward; forward by hand: the layers' projections, attention and FFNs, the softmax.
  d, h, dk, src, tgt, rows = 32, 4, 8, 24, 16, 8
  proj = lambda q, kv: 2 * d * (h * q * 2 * dk + h * kv * 2 * dk)  # noqa: E731
  att = lambda ql, kl: 2 * rows * h * ql * kl * 2 * dk  # noqa: E731
  ffn = lambda tokens: 4 * tokens * d * 64  # noqa: E731
  forward = 2 * (proj(rows * src, rows * src) + att(src, src) + ffn(rows * src)
                 + proj(rows * tgt, rows * tgt) + proj(rows * tgt, rows * src)
                 + att(tgt, tgt) + att(tgt, src) + ffn(rows * tgt)) + 2 * rows * tgt * d * 64
  assert steps.model_flops == 3 * forward == flop_count.train_flops(cfg, rows, src, tgt)
