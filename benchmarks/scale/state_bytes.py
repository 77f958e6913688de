"""Bytes that a choice of issue 44 changes, from shapes alone (no training, seconds on a CPU):

optimizer_state: the optimizer state of 'adam' (the paper's), 'adamw' and 'adafactor'
  (`optim.make_optimizer`) for the parameters of the embedded default (configs/quickstart.py),
  base and big (configs/wmt_base.py, wmt_big.py), from `jax.eval_shape` of `tx.init`; the
  ratio of each against Adam's. Adam keeps two moments per parameter; Adafactor (factored, no
  momentum) a row and a column statistic per matrix and a full second moment per vector.
decode_cache: the decoder self-attention cache of `incremental.init_cache` for beam 4 and
  `max_decode_len` target positions, for the paper's model and for the same model with
  `decoder_window=16` (examples/variants.py:sliding_window): a ring of 16 slots per layer.

  python -m benchmarks.scale.state_bytes --out benchmarks/results/variants.jsonl
"""

import argparse
import importlib
import os
import sys
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.shared import harness  # noqa: E402
from t2t_jax.model import incremental, transformer as model  # noqa: E402
from t2t_jax.training import optim  # noqa: E402

CONFIGS = {'embedded_default': 'configs.quickstart', 'base': 'configs.wmt_base',
           'big': 'configs.wmt_big'}
OPTIMIZERS = ('adam', 'adamw', 'adafactor')
BEAM = 4
WINDOW = 16


def tree_bytes(tree) -> int:
  return int(sum(np.prod(x.shape, dtype=np.int64) * np.dtype(x.dtype).itemsize
                 for x in jax.tree_util.tree_leaves(tree)))


def _config(name: str):
  return importlib.import_module(CONFIGS[name]).get_config()


def optimizer_state(name: str) -> Dict[str, Any]:
  config = _config(name)
  cfg = model.TransformerConfig.from_config(config)
  params = jax.eval_shape(lambda: model.init_params(cfg, jax.random.PRNGKey(0)))
  out: Dict[str, Any] = {'config': name, 'param_bytes': tree_bytes(params), 'state_bytes': {}}
  for opt in OPTIMIZERS:
    config.optimizer = opt
    tx = optim.make_optimizer(config)
    out['state_bytes'][opt] = tree_bytes(jax.eval_shape(tx.init, params))
  adam = out['state_bytes']['adam']
  out['vs_adam'] = {k: v / adam for k, v in out['state_bytes'].items()}
  return out


def decode_cache(name: str) -> Dict[str, Any]:
  config = _config(name)
  cfg = model.TransformerConfig.from_config(config)
  length = cfg.max_len
  full = jax.eval_shape(lambda: incremental.init_cache(cfg, BEAM, length))
  ring = jax.eval_shape(lambda: incremental.init_cache(cfg.replace(decoder_window=WINDOW), BEAM,
                                                       length))
  return {'config': name, 'beam': BEAM, 'max_decode_len': length, 'window': WINDOW,
          'full_bytes': tree_bytes(full), 'window_bytes': tree_bytes(ring),
          'full_over_window': tree_bytes(full) / tree_bytes(ring)}


def main(argv: List[str] = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  harness.add_out_argument(parser)
  args = parser.parse_args(argv)
  emit = harness.Emitter(args.out)
  for name in CONFIGS:
    for part, measure in (('optimizer_state', optimizer_state), ('decode_cache', decode_cache)):
      emit(dict(measure(name), name='state_bytes', part=part))


if __name__ == '__main__':
  main()
