"""FLOPs of one step counted from the model's shapes (`model/flop_count.py`, where training's
MFU reads them too): the check on XLA's own count that `--mode=plan` makes."""

from t2t_jax.model.flop_count import (  # noqa: F401  (re-exported)
    forward_flops, forward_flops_by_part, train_flops)
