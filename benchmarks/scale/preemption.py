"""How long a SIGTERM takes to become a saved checkpoint: the rest of the current step plus
a synchronous orbax save of the full train state (params + Adam moments), for a config.

Usage: python benchmarks/scale/preemption.py --config=configs/wmt_base.py [--tokens=4096]
         [--out=FILE]
One JSON line (benchmarks/shared/harness.py's Emitter: stdout, and appended to --out).
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from benchmarks.shared import harness  # noqa: E402
from t2t_jax.model import transformer as model  # noqa: E402
from t2t_jax.runtime import checkpoint, parallel  # noqa: E402
from t2t_jax.training import optim  # noqa: E402

config_flags.DEFINE_config_file('config', 'configs/wmt_base.py', 'config')
flags.DEFINE_integer('tokens', 4096, 'target tokens per step (rows x 64)')
flags.DEFINE_string('out', None, 'append the JSON line to this file')
FLAGS = flags.FLAGS


def main(_):
  harness.start_jax()
  config = FLAGS.config
  cfg = model.TransformerConfig.from_config(config)
  mesh = parallel.make_mesh(jax.devices()[:1])
  opt = optim.make_optimizer(config)
  state = parallel.create_train_state(cfg, opt, 0, mesh)
  step = parallel.make_train_step(cfg, opt, mesh, label_smoothing=0.1, seed=0)
  rows, length = FLAGS.tokens // 64, 64
  rng = np.random.RandomState(0)
  batch = {k: rng.randint(2, cfg.vocab_size, (rows, length)).astype(np.int32)
           for k in ('inputs', 'targets')}
  batch = parallel.shard_batch(batch, mesh)
  state, m = step(state, batch)  # compile
  jax.block_until_ready(m)
  with harness.timed() as step_time:
    state, m = step(state, batch)
    jax.block_until_ready(m)
  with tempfile.TemporaryDirectory() as workdir:
    ckpt = checkpoint.Checkpointer(workdir, keep=2)
    with harness.timed() as save_time:
      ckpt.save(int(state.step), state, {'epoch': 0}, config)
      ckpt.wait()
    ckpt.close()
  step_s, save_s = step_time.seconds, save_time.seconds
  harness.Emitter(FLAGS.out)({
      'name': 'preemption', 'params': model.count_params(state.params),
      'tokens_per_step': rows * length, 'step_s': round(step_s, 2), 'save_s': round(save_s, 2),
      'worst_case_signal_to_checkpoint_s': round(step_s + save_s, 2)})


if __name__ == '__main__':
  app.run(main)
