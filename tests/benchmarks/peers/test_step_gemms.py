"""benchmarks/peers/step_gemms.py lists every matmul of a train step: its FLOPs are exactly the
analytic count the other benchmarks and --mode=plan use (3 x the forward matmuls)."""

import pytest

from benchmarks.peers import step_gemms
from benchmarks.shared import common


@pytest.mark.parametrize('size', ['quickstart', 'base'])
def test_the_listed_gemms_are_the_steps_matmul_flops(size):
  shapes = step_gemms.gemms(common.SIZES[size], 32, 64)
  total = sum(step_gemms.flops(g) * count for g, count in shapes.items())
  assert total == common.train_flops(common.SIZES[size], 32, 64, 64)


def test_quickstart_step_has_282_matmuls_in_18_kinds():
  shapes = step_gemms.gemms(common.SIZES['quickstart'], 32, 64)
  # 3 layers: per layer 12 projections, 4 FFN, 6 attention products; and the pre-softmax
  # projection; each forward matmul has two backward ones.
  assert sum(shapes.values()) == 3 * (3 * (12 + 4 + 6) + 1)
  assert len(shapes) == 18 and shapes[('fwd', 1, 2048, 128, 128)] == 36
