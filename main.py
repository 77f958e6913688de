"""Train, evaluate and use a Transformer (Vaswani et al. 2017) from the command line.

  python main.py --config=configs/wmt_base.py --workdir=DIR --mode=train|eval|decode|...

--config is a Python file in configs/ (configs/table3.py:ROW selects a row of the paper's
Table 3, e.g. configs/table3.py:B1); without it the embedded default configs/quickstart.py
trains on the bundled EN->ES corpus. Override any config key after --config with
--config.KEY=VALUE, e.g. --config.num_train_steps=1000 --config.bucket_lengths=(16,32).
Every key is listed, with its default and a one-line description, in configs/default.py.
"""
# The command line lives in t2t_jax/dispatch.py (its flags, the table from mode to function);
# `t2t-jax`, the installed command, runs the same (t2t_jax/command.py).

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
  sys.path.insert(0, _HERE)

if __name__ == '__main__':
  from t2t_jax import command  # noqa: E402
  command.entry()
