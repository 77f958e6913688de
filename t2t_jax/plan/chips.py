"""The TPU chips a plan can target: capacity, peak rates and how libtpu names them.

Numbers are Google's published per-chip specifications (Cloud TPU system architecture pages,
read 2026-11): https://cloud.google.com/tpu/docs/v4, .../v5e, .../v5p, .../v6e. Where a page
gives a pod-level all-reduce bandwidth but no per-chip ICI figure (v4), the per-chip ICI
bandwidth is derived from it the way the v5e and v6e pages relate the two (pod all-reduce
bandwidth = chips x bidirectional ICI bandwidth / 2). A float32 matmul on a TPU runs on the
bf16 MXUs at the default precision, so one peak serves both dtypes of `configs/default.py`.
"""

import dataclasses
from typing import Dict

GIB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Chip:
  """One TPU generation, per chip.

  Attributes:
    name: the generation as topology names spell it ('v5e' in 'v5e:2x4').
    device_kind: what libtpu reports as `device.device_kind`.
    hbm_bytes: HBM capacity.
    peak_flops: dense bf16 matmul FLOP/s.
    hbm_bytes_per_s: HBM bandwidth.
    ici_bytes_per_s: bidirectional inter-chip interconnect bandwidth.
    dims: 2 (2-D torus, 'AxB') or 3 (3-D torus, 'AxBxC').
    chip_config: libtpu's chip configuration: 'megacore' presents a chip's two TensorCores
      as one device, as these slices run in production.
    source: where the numbers come from.
  """
  name: str
  device_kind: str
  hbm_bytes: int
  peak_flops: float
  hbm_bytes_per_s: float
  ici_bytes_per_s: float
  dims: int
  chip_config: str
  source: str


CHIPS: Dict[str, Chip] = {c.name: c for c in (
    Chip('v4', 'TPU v4', 32 * GIB, 275e12, 1200e9, 2 * 1.1e15 / 4096, 3, 'megacore',
         'cloud.google.com/tpu/docs/v4: 275 TFLOP/s, 32 GiB at 1200 GB/s; ICI from the '
         '1.1 PB/s all-reduce bandwidth of a 4096-chip pod'),
    Chip('v5e', 'TPU v5 lite', 16 * GIB, 197e12, 819e9, 400e9, 2, 'default',
         'cloud.google.com/tpu/docs/v5e: 197 TFLOP/s, 16 GB at 819 GB/s, ICI 400 GB/s'),
    Chip('v5p', 'TPU v5', 95 * GIB, 459e12, 2765e9, 1200e9, 3, 'megacore',
         'cloud.google.com/tpu/docs/v5p: 459 TFLOP/s, 95 GiB at 2765 GB/s, ICI 1200 GB/s'),
    Chip('v6e', 'TPU v6 lite', 32 * GIB, 918e12, 1638e9, 800e9, 2, 'default',
         'cloud.google.com/tpu/docs/v6e: 918 TFLOP/s, 32 GB at 1638 GB/s, ICI 800 GB/s'),
)}
