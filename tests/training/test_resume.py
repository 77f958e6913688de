"""Surviving interruption: SIGTERM, SIGKILL + exact resume, corrupted checkpoints, NaN steps,
and the workdir lock."""

import hashlib
import os
import shutil
import signal
import subprocess
import time

import pytest
import jax
import numpy as np

from conftest import ROOT, TINY, main_command, read_metrics, run_main
from t2t_jax.inference import checkpoint_choice
from t2t_jax.storage import workdir as workdir_lib

NO_EVAL = '--config.eval_every_steps=0'


def _wait_for(predicate, process, timeout=300):
  deadline = time.monotonic() + timeout
  while not predicate():
    assert process.poll() is None, process.communicate()[1][-3000:]
    assert time.monotonic() < deadline, 'timed out'
    time.sleep(0.2)


def _start(*args):
  return subprocess.Popen(main_command(*args), cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def _steps(workdir):
  folder = os.path.join(workdir, 'checkpoints')
  return sorted(int(n) for n in os.listdir(folder) if n.isdigit()) if os.path.isdir(folder) else []


def test_sigterm_writes_a_checkpoint_and_exits_zero(corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  process = _start(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY,
                   NO_EVAL, '--config.num_train_steps=100000',
                   '--config.checkpoint_every_steps=0', '--config.log_every_steps=5')
  _wait_for(lambda: os.path.exists(os.path.join(workdir, 'metrics.jsonl')) and
            read_metrics(workdir), process)
  process.send_signal(signal.SIGTERM)
  _, stderr = process.communicate(timeout=300)
  assert process.returncode == 0, stderr[-3000:]
  steps = _steps(workdir)
  assert len(steps) == 1 and steps[0] >= 5
  assert f'stopped by SIGTERM at step {steps[0]}' in stderr


@pytest.mark.slow
def test_sigkill_then_resume_is_bitwise_exact(corpus, tmp_path):
  common = [f'--config.local_corpus_dir={corpus}', *TINY, NO_EVAL,
            '--config.dropout_rate=0.1', '--config.num_train_steps=40',
            '--config.checkpoint_every_steps=10']
  straight, interrupted = str(tmp_path / 'straight'), str(tmp_path / 'interrupted')
  result = run_main(f'--workdir={straight}', *common)
  assert result.returncode == 0, result.stderr[-3000:]
  # Same vocabulary in both runs, so only the interruption differs.
  shutil.copytree(os.path.join(straight, 'vocab'), os.path.join(interrupted, 'vocab'))
  process = _start(f'--workdir={interrupted}', *common)
  _wait_for(lambda: 20 in _steps(interrupted), process)
  process.kill()
  process.wait()
  assert max(_steps(interrupted)) < 40
  result = run_main(f'--workdir={interrupted}', *common)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'resumed from step' in result.stderr
  a = checkpoint_choice.load_inference_params(straight, '40').params
  b = checkpoint_choice.load_inference_params(interrupted, '40').params
  jax.tree_util.tree_map(np.testing.assert_array_equal, jax.device_get(a), jax.device_get(b))


@pytest.mark.slow
def test_truncated_latest_checkpoint_is_skipped(corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  common = [f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY, NO_EVAL]
  result = run_main(*common, '--config.num_train_steps=20')
  assert result.returncode == 0, result.stderr[-3000:]
  state_dir = os.path.join(workdir, 'checkpoints', '20', 'state')
  for root, _, files in os.walk(state_dir):  # truncate every data file of the latest one
    for name in files:
      with open(os.path.join(root, name), 'r+b') as f:
        f.truncate(0)
  result = run_main(*common, '--config.num_train_steps=30')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'checkpoints/20' in result.stderr and 'skipping it' in result.stderr
  assert 'resumed from step 10' in result.stderr
  assert _steps(workdir) == [10, 20, 30]
  moved = os.listdir(os.path.join(workdir, 'checkpoints_unreadable'))
  assert len(moved) == 1 and moved[0].startswith('20-')  # kept for inspection, not deleted


@pytest.mark.slow
def test_nonfinite_steps_are_skipped_counted_and_stop_training(corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  common = [f'--config.local_corpus_dir={corpus}', *TINY, NO_EVAL,
            '--config.debug_nonfinite_steps=(3,4)']
  result = run_main(f'--workdir={workdir}', *common, '--config.num_train_steps=10')
  assert result.returncode == 0, result.stderr[-3000:]
  record = [r for r in read_metrics(workdir) if r['step'] == 10][0]
  assert record['nonfinite_steps'] == 2.0 and np.isfinite(record['loss'])
  assert 'step 3: non-finite loss or gradients; update skipped' in result.stderr
  stopped = run_main(f'--workdir={tmp_path}/run2', *common, '--config.num_train_steps=10',
                     '--config.max_consecutive_nonfinite=2')
  assert stopped.returncode != 0
  assert '2 consecutive steps (3-4) had a non-finite loss or gradients' in stopped.stderr


def test_workdir_locked_by_a_live_run_is_refused(corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  os.makedirs(workdir)
  with workdir_lib.WorkdirLock(workdir):
    result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY)
  assert result.returncode != 0
  assert f'{workdir} is in use by another live run (pid {os.getpid()}' in result.stderr
  assert not os.path.exists(os.path.join(workdir, 'checkpoints'))


def _sha(path):
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()[:12]


@pytest.mark.slow
def test_decode_skips_a_damaged_checkpoint_and_resume_refuses_edited_data(corpus, tmp_path):
  own_corpus = str(tmp_path / 'corpus')
  shutil.copytree(corpus, own_corpus)
  workdir = str(tmp_path / 'run')
  common = [f'--workdir={workdir}', f'--config.local_corpus_dir={own_corpus}', *TINY, NO_EVAL,
            '--config.checkpoint_every_steps=2', '--config.log_every_steps=2']
  result = run_main(*common, '--config.num_train_steps=4')
  assert result.returncode == 0, result.stderr[-3000:]
  for root, _, files in os.walk(os.path.join(workdir, 'checkpoints', '4', 'state')):
    for name in files:
      if os.path.basename(root) == 'd':
        with open(os.path.join(root, name), 'wb') as f:
          f.write(b'damaged')
  decoded = run_main(f'--workdir={workdir}', '--mode=decode', input='In the beginning\n')
  assert decoded.returncode == 0, decoded.stderr[-3000:]
  assert len(decoded.stdout.splitlines()) == 1
  warnings = [line for line in decoded.stderr.splitlines() if line.startswith(('W', 'E'))]
  assert len(warnings) == 1 and f'{workdir}/checkpoints/4 is damaged (' in warnings[0]
  assert 'Traceback' not in decoded.stderr and 'training checkpoint step 2' in decoded.stderr
  assert _steps(workdir) == [2, 4]  # decode moves nothing

  train = {lang: os.path.join(own_corpus, f'train.{lang}') for lang in ('en', 'es')}
  before = {lang: _sha(path) for lang, path in train.items()}
  for lang, line in (('en', 'One more line.'), ('es', 'Una línea más.')):
    with open(train[lang], 'a', encoding='utf-8') as f:
      f.write(line + '\n')
  refused = run_main(*common, '--config.num_train_steps=6')
  assert refused.returncode == 1
  assert refused.stderr.splitlines()[-1] == (
      f'error: {workdir}/checkpoints holds checkpoints (latest step 4) trained on other data: '
      f'the train split changed since they were written: {train["en"]} (sha256 '
      f'{before["en"]}... now {_sha(train["en"])}...), {train["es"]} (sha256 {before["es"]}... '
      f'now {_sha(train["es"])}...). Restore those files, or train in another --workdir; '
      'nothing was changed.')
  assert _steps(workdir) == [2, 4]
