"""Ahead-of-time plans for TPU slices: compile the run's steps with libtpu on any machine.

`make_plan(config, 'v5e:2x4')` answers, without the hardware, whether a config compiles on a
slice, whether it fits each chip's HBM, the largest batch that does, FLOPs, collectives and a
roofline step time; `--mode=plan` prints it (`mode.run`).
"""

from t2t_jax.plan.chips import CHIPS, Chip
from t2t_jax.plan.report import PlanError, check_fits, format_plan, make_plan
from t2t_jax.plan.topology import TopologyError
