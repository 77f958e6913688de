"""Multi-process training through jax.distributed on localhost (gloo collectives on CPU)."""

import os
import shutil
import socket
import subprocess
import time

import jax
import numpy as np

from conftest import ROOT, TINY, main_command, run_main
from t2t_jax import averaging


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _env(devices: int):
  env = dict(os.environ)
  env['XLA_FLAGS'] = f'--xla_force_host_platform_device_count={devices}'
  return env


def test_two_processes_equal_one_process_with_eight_devices(corpus, tmp_path):
  common = [f'--config.local_corpus_dir={corpus}', *TINY, '--config.eval_every_steps=0',
            '--config.num_train_steps=8', '--config.checkpoint_every_steps=0']
  single, multi = str(tmp_path / 'single'), str(tmp_path / 'multi')
  result = run_main(f'--workdir={single}', *common, env=_env(8))
  assert result.returncode == 0, result.stderr[-3000:]
  shutil.copytree(os.path.join(single, 'vocab'), os.path.join(multi, 'vocab'))
  address = f'127.0.0.1:{_free_port()}'
  processes = [subprocess.Popen(
      main_command(f'--workdir={multi}', *common, f'--coordinator_address={address}',
                   '--num_processes=2', f'--process_id={i}', '--distributed_timeout_s=120'),
      cwd=ROOT, env=_env(4), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      for i in range(2)]
  outputs = [p.communicate(timeout=600) for p in processes]
  for p, (_, err) in zip(processes, outputs):
    assert p.returncode == 0, err[-3000:]
  assert 'mesh: 8 devices over 2 processes' in outputs[0][1]
  assert 'step 8/8' in outputs[0][1] and 'step 8/8' not in outputs[1][1]  # one process logs
  a = jax.device_get(averaging.load_inference_params(single, '8').params)
  b = jax.device_get(averaging.load_inference_params(multi, '8').params)
  jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, atol=2e-5), a, b)


def test_unreachable_coordinator_fails_fast_with_a_clear_error(tmp_path):
  address = f'127.0.0.1:{_free_port()}'
  start = time.monotonic()
  result = run_main(f'--workdir={tmp_path}/run', *TINY, f'--coordinator_address={address}',
                    '--num_processes=2', '--process_id=1', '--distributed_timeout_s=3',
                    timeout=120)
  assert result.returncode != 0
  assert f'could not reach the coordinator at {address} within 3 s' in result.stderr
  assert time.monotonic() - start < 60
