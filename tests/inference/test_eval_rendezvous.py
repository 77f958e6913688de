"""The eval loop on a CPU mesh: its batches' programs each all-reduce over the devices and are
independent of one another, so JAX would dispatch the next before the last has run. On
XLA:CPU two such programs in flight can deadlock in the collectives' rendezvous, and XLA then
aborts the whole process after 40 s (`Termination timeout for all reduce ...`): 2 of 6 stress
runs of 10 x 1000 batches on 8 simulated devices did before `evaluate_batches` waited on each
batch, 0 of 12 after (the remedy gradient accumulation already had, `training/train.py`)."""

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from t2t_jax.inference import evaluate
from t2t_jax.model import transformer as model
from t2t_jax.runtime import parallel

CFG = model.TransformerConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                              num_layers=1, max_len=32, dropout_rate=0.0, deterministic=True)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _batches(n, rows=16):
  rng = np.random.RandomState(0)
  out = []
  for i in range(n):
    x = rng.randint(2, CFG.vocab_size, (rows, (8, 16)[i % 2])).astype(np.int32)
    out.append({'inputs': x, 'targets': x[:, ::-1].copy()})
  return out


def test_each_eval_batch_has_run_before_the_next_is_dispatched_on_cpu_meshes():
  mesh = parallel.make_mesh()
  assert mesh.size == 8 and parallel.programs_one_at_a_time(mesh)
  assert not parallel.programs_one_at_a_time(parallel.make_mesh(jax.devices()[:1]))
  params = parallel.replicate(model.init_params(CFG, jax.random.PRNGKey(0)), mesh)
  step = parallel.make_eval_step(CFG, mesh, label_smoothing=0.1)
  outputs, in_flight = [], []

  def watched(params, batch):
    in_flight.append(sum(not x.is_ready() for out in outputs
                         for x in jax.tree_util.tree_leaves(out)))
    outputs.append(step(params, batch))
    return outputs[-1]

  batches = _batches(40)
  result = evaluate.evaluate_batches(watched, params, batches, mesh)
  assert in_flight == [0] * len(batches)
  # The same sums as the batches' metrics added on the host.
  sums = jax.device_get(outputs)
  expected = evaluate.summarize({k: sum(s[k] for s in sums) for k in sums[0]})
  assert result == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
def test_many_eval_batches_on_eight_cpu_devices_do_not_deadlock(tmp_path):
  # In a child process: XLA's rendezvous timeout aborts the process it happens in.
  script = textwrap.dedent(f'''
      import os, sys
      os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'
      os.environ['JAX_PLATFORMS'] = 'cpu'
      sys.path[:0] = [{ROOT!r}, {os.path.dirname(os.path.abspath(__file__))!r}]
      import jax
      from t2t_jax.inference import evaluate
      from t2t_jax.model import transformer as model
      from t2t_jax.runtime import parallel
      from test_eval_rendezvous import CFG, _batches
      mesh = parallel.make_mesh()
      params = parallel.replicate(model.init_params(CFG, jax.random.PRNGKey(0)), mesh)
      step = parallel.make_eval_step(CFG, mesh, label_smoothing=0.1)
      batches = _batches(1000)
      losses = {{evaluate.evaluate_batches(step, params, batches, mesh)['loss']
                for _ in range(4)}}
      print('rounds done', len(losses))
      ''')
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  done = subprocess.run([sys.executable, '-c', script], env=env, capture_output=True,
                        text=True, timeout=300, cwd=str(tmp_path), check=False)
  assert done.returncode == 0 and 'rounds done 1' in done.stdout, done.stderr[-3000:]
