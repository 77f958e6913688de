"""`backends.with_autotune_level`: XLA_FLAGS for a small model skip XLA's GPU autotuner, unless
the user chose a level."""

import pytest

from t2t_jax.runtime import backends


@pytest.mark.parametrize('flags, d_model, expected', [
    ('', 128, '--xla_gpu_autotune_level=0'),                       # the embedded default
    ('--xla_dump_to=/tmp/d', 256, '--xla_dump_to=/tmp/d --xla_gpu_autotune_level=0'),
    ('', 257, ''),                                                 # larger: XLA's default
    ('', 512, ''),                                                 # base
    ('', None, ''),                                                # size unknown
    ('--xla_gpu_autotune_level=4', 128, '--xla_gpu_autotune_level=4'),  # the user's choice
])
def test_a_small_model_skips_the_gpu_autotuner(flags, d_model, expected):
  assert backends.with_autotune_level(flags, d_model) == expected
