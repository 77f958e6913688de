"""Work split across processes, and multi-process runs through jax.distributed on localhost
(gloo collectives on CPU)."""

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import jax
import numpy as np
import pytest

from conftest import ROOT, TINY, main_command, main_command_with, read_metrics, run_main
from t2t_jax.inference import averaging, checkpoint_choice
from t2t_jax.runtime import checkpoint, multihost


class FakeProcesses:
  """An all-gather over `count` threads standing in for processes."""

  def __init__(self, count):
    self.count = count
    self.barrier = threading.Barrier(count)
    self.slots = [None] * count
    self.local = threading.local()

  def allgather(self, array):
    self.barrier.wait()
    self.slots[self.local.index] = array
    self.barrier.wait()
    result = np.stack(self.slots)
    self.barrier.wait()
    return result

  def run(self, fn):
    results = [None] * self.count

    def body(index):
      self.local.index = index
      results[index] = fn(index)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(self.count)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(30)
    return results


def test_shares_are_interleaved_and_cover_every_index_once():
  shares = [list(multihost.share(10, p, 3)) for p in range(3)]
  assert shares == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
  assert list(multihost.share(2, 2, 3)) == []  # more processes than items


def test_gather_strings_returns_every_string_in_input_order_on_every_process():
  sentences = ['uno', '', 'tres años', 'ß' * 40, 'cinco', '六', 'siete']
  fake = FakeProcesses(3)
  results = fake.run(lambda p: multihost.gather_strings(
      [sentences[i].upper() for i in multihost.share(len(sentences), p, 3)], len(sentences),
      allgather=fake.allgather, count=3))
  assert results == [[s.upper() for s in sentences]] * 3


def test_gather_strings_with_fewer_items_than_processes():
  fake = FakeProcesses(3)
  results = fake.run(lambda p: multihost.gather_strings(
      ['x'] if p == 0 else [], 1, allgather=fake.allgather, count=3))
  assert results == [['x']] * 3


def test_local_replicas_reuse_training_replicas_and_gather_sharded_arrays():
  from jax.sharding import NamedSharding, PartitionSpec as P
  from t2t_jax.runtime import parallel
  mesh = parallel.make_mesh()
  params = {'w': np.arange(16, dtype=np.float32).reshape(8, 2), 'b': np.ones(3, np.float32)}
  trained = parallel.replicate(params, mesh)  # as during training
  assert len(trained['w'].devices()) == 8
  local = multihost.local_replicas(trained, multihost.local_mesh())
  pointers = lambda x: {s.device: s.data.unsafe_buffer_pointer()  # noqa: E731
                        for s in x.addressable_shards}
  assert pointers(local['w']) == pointers(trained['w'])  # no copy
  one = multihost.local_replicas(trained, multihost.local_mesh(jax.local_devices()[:1]))
  assert all(len(x.devices()) == 1 for x in jax.tree_util.tree_leaves(one))
  np.testing.assert_array_equal(np.asarray(one['w']), params['w'])
  sharded = jax.device_put(params['w'], NamedSharding(mesh, P(parallel.DATA)))
  gathered = multihost.local_replicas(sharded, multihost.local_mesh())
  assert gathered.is_fully_replicated and len(gathered.devices()) == 8
  np.testing.assert_array_equal(np.asarray(gathered.addressable_data(7)), params['w'])


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _env(devices: int):
  env = dict(os.environ)
  env['XLA_FLAGS'] = f'--xla_force_host_platform_device_count={devices}'
  return env


@pytest.mark.slow
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
  assert 'mesh: 8 devices over 2 processes (data:8)' in outputs[0][1]
  assert 'step 8/8' in outputs[0][1] and 'step 8/8' not in outputs[1][1]  # one process logs
  a = jax.device_get(checkpoint_choice.load_inference_params(single, '8').params)
  b = jax.device_get(checkpoint_choice.load_inference_params(multi, '8').params)
  jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, atol=2e-5), a, b)


@pytest.mark.slow
def test_a_sharded_mesh_on_two_processes_equals_one_process(corpus, tmp_path):
  """data:2,fsdp:2,tensor:2 over 2 processes x 4 devices (parameters split across the
  processes): the dev losses and BLEU and the checkpoints are one 8-device process's."""
  common = [f'--config.local_corpus_dir={corpus}', *TINY, '--config.eval_every_steps=4',
            '--config.eval_bleu_sentences=6', '--config.num_train_steps=8',
            '--config.checkpoint_every_steps=4', '--config.mesh=data:2,fsdp:2,tensor:2']
  single, multi = str(tmp_path / 'single'), str(tmp_path / 'multi')
  result = run_main(f'--workdir={single}', *common, env=_env(8))
  assert result.returncode == 0, result.stderr[-3000:]
  shutil.copytree(os.path.join(single, 'vocab'), os.path.join(multi, 'vocab'))
  outputs = _run_two(multi, *common)
  assert 'mesh: 8 devices over 2 processes (data:2, fsdp:2, tensor:2)' in outputs[0][2]
  evals = [[(r['step'], r['eval_dev/loss'], r.get('eval_dev/bleu')) for r in read_metrics(w)
            if 'eval_dev/loss' in r] for w in (single, multi)]
  assert [e[0] for e in evals[0]] == [e[0] for e in evals[1]] == [0, 4, 8]
  for (_, loss_a, bleu_a), (_, loss_b, bleu_b) in zip(*evals):
    assert loss_a == pytest.approx(loss_b, rel=1e-5) and bleu_a == bleu_b
  a = jax.device_get(checkpoint_choice.load_inference_params(single, '8').params)
  b = jax.device_get(checkpoint_choice.load_inference_params(multi, '8').params)
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


def _launch(workdir, args, envs=(None, None), devices=4, prelude=''):
  """Starts `main.py` as 2 processes of one jax.distributed run (each running `prelude`
  first); returns the Popens."""
  address = f'127.0.0.1:{_free_port()}'
  processes = []
  for i in range(2):
    env = _env(devices)
    env.update(envs[i] or {})
    command = functools.partial(main_command_with, prelude) if prelude else main_command
    processes.append(subprocess.Popen(
        command(f'--workdir={workdir}', *args, f'--coordinator_address={address}',
                '--num_processes=2', f'--process_id={i}', '--distributed_timeout_s=120'),
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
  return processes


def _finish(processes, timeout=300):
  """[(returncode, stdout, stderr)]; a run that does not end in time (a deadlock) fails."""
  try:
    outputs = [p.communicate(timeout=timeout) for p in processes]
  except subprocess.TimeoutExpired:
    for p in processes:
      p.kill()
    raise AssertionError('the 2-process run did not finish: deadlock?') from None
  return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]


def _run_two(workdir, *args, envs=(None, None), timeout=300, prelude=''):
  results = _finish(_launch(workdir, args, envs, prelude=prelude), timeout)
  for rc, _, err in results:
    assert rc == 0, err[-3000:]
  return results


# The save policy's clock in each process, faked: T2T_TEST_CLOCK_TICK_S seconds pass at every
# reading, so which steps save does not depend on how fast the machine runs them.
_FAKE_CLOCK = """
import itertools, os
from t2t_jax.training import save_policy
_readings, _tick = itertools.count(), float(os.environ['T2T_TEST_CLOCK_TICK_S'])
class _FakeClockPolicy(save_policy.SavePolicy):
  def __init__(self, *args, **kwargs):
    super().__init__(*args, clock=lambda: _tick * next(_readings), **kwargs)
save_policy.SavePolicy = _FakeClockPolicy
"""


@pytest.fixture(scope='module')
def pod_run(corpus, tmp_path_factory):
  """A 2-process run with checkpoints every minute of process 0's fake clock (45 s a
  reading) while process 1 is slowed (T2T_TEST_STEP_DELAY_S) and its own fake clock would
  call every decision step due (1000 s a reading), with dev loss and dev BLEU at steps 8
  and 16."""
  workdir = str(tmp_path_factory.mktemp('pod') / 'run')
  args = [f'--config.local_corpus_dir={corpus}', *TINY, '--config.num_train_steps=16',
          '--config.checkpoint_every_steps=0', '--config.checkpoint_every_minutes=1.0',
          '--config.log_every_steps=2', '--config.eval_every_steps=8',
          '--config.eval_bleu_sentences=6', '--config.keep_checkpoints=20']
  results = _run_two(workdir, *args, prelude=_FAKE_CLOCK, envs=(
      {'T2T_TEST_CLOCK_TICK_S': '45'},
      {'T2T_TEST_CLOCK_TICK_S': '1000', 'T2T_TEST_STEP_DELAY_S': '0.25'}))
  return workdir, results


@pytest.mark.slow
def test_time_based_checkpoints_agree_when_one_process_is_slowed(pod_run):
  workdir, results = pod_run
  # Process 0's clock reads 0 at the start, then 45 s more at every decision step (every
  # 2 steps) and after every save: due at steps 4 (90 s since the start), 8 and 12 (90 s
  # since the last save), and the last step. Process 1 saves with it (a disagreement would
  # deadlock the collective save), whatever its own clock says.
  assert averaging.training_steps(workdir) == [4, 8, 12, 16]
  records = [r for r in read_metrics(workdir) if 'eval_dev/bleu' in r]
  assert [r['step'] for r in records] == [8, 16]  # dev BLEU decoded on 2 processes
  assert all(0.0 <= r['eval_dev/bleu'] <= 100.0 for r in records)
  assert 'eval at step 16: BLEU' in results[0][2]


@pytest.mark.slow
def test_eval_decode_and_average_on_two_processes_write_what_one_process_writes(
    pod_run, corpus, tmp_path):
  trained, _ = pod_run
  one, two = str(tmp_path / 'one'), str(tmp_path / 'two')
  for workdir in (one, two):
    shutil.copytree(trained, workdir)
  source = tmp_path / 'input.en'
  with open(os.path.join(corpus, 'dev.en'), encoding='utf-8') as f:
    source.write_text(''.join(f.readlines()[:7]), encoding='utf-8')
  modes = [('--mode=average',), ('--mode=eval', '--split=dev'),
           ('--mode=decode', f'--input={source}')]
  for mode in modes:
    extra = (f'--output={one}/out.txt',) if mode[0] == '--mode=decode' else ()
    result = run_main(f'--workdir={one}', *mode, *extra, env=_env(8))
    assert result.returncode == 0, result.stderr[-3000:]
    extra = (f'--output={two}/out.txt',) if mode[0] == '--mode=decode' else ()
    outputs = _run_two(two, *mode, *extra)
    if mode[0] == '--mode=average':
      assert 'averaged steps' in outputs[0][1]
    assert outputs[1][1] == '', outputs[1][1]  # process 1 prints no report
  assert sorted(os.listdir(os.path.join(two, 'averaged'))) == sorted(
      os.listdir(os.path.join(one, 'averaged')))
  a = jax.device_get(checkpoint_choice.load_inference_params(one).params)
  b = jax.device_get(checkpoint_choice.load_inference_params(two).params)
  jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)
  evals = [sorted(n for n in os.listdir(w) if n.startswith('eval_dev')) for w in (one, two)]
  # one JSON and one texts folder, each written once (no second writer's leftovers)
  assert evals[0] == evals[1] and [n.rsplit('.', 1)[1] for n in evals[1]] == ['json', 'texts'], evals
  texts = [sorted(os.listdir(os.path.join(w, evals[0][1]))) for w in (one, two)]
  assert texts[0] == texts[1], texts
  for name in texts[0]:
    with open(os.path.join(one, evals[0][1], name), 'rb') as f1, open(
        os.path.join(two, evals[0][1], name), 'rb') as f2:
      assert f1.read() == f2.read(), name
  results = []
  for w in (one, two):
    with open(os.path.join(w, evals[0][0]), encoding='utf-8') as f:
      results.append(json.load(f))
  assert results[0]['bleu'] == results[1]['bleu']
  assert results[0]['examples'] == results[1]['examples']
  assert results[0]['loss'] == pytest.approx(results[1]['loss'], rel=1e-5)
  assert results[0]['sentences'] == results[1]['sentences'] == 64
  with open(f'{one}/out.txt', 'rb') as f1, open(f'{two}/out.txt', 'rb') as f2:
    assert f1.read() == f2.read()


@pytest.mark.slow
def test_decode_on_two_processes_prints_only_the_translations_on_stdout(
    tiny_workdir, corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  shutil.copytree(tiny_workdir, workdir)
  source = tmp_path / 'input.en'
  with open(os.path.join(corpus, 'dev.en'), encoding='utf-8') as f:
    source.write_text(''.join(f.readlines()[:5]), encoding='utf-8')
  single = run_main(f'--workdir={workdir}', '--mode=decode', f'--input={source}', env=_env(8))
  assert single.returncode == 0, single.stderr[-3000:]
  assert single.stdout.count('\n') == 5
  (_, out0, err0), (_, out1, err1) = _run_two(workdir, '--mode=decode', f'--input={source}')
  assert out0 == single.stdout and out1 == ''  # gloo's connection lines go to stderr
  assert '[Gloo] Rank 0' in err0 and '[Gloo] Rank 1' in err1


# Each process decodes its share with the rows of every batch split over its 4 devices.
_SHARDED_DECODE = """
import json, sys
from t2t_jax.runtime import multihost, parallel
parallel.initialize_distributed(sys.argv[1], 2, int(sys.argv[2]), timeout_s=120)
sys.path[:0] = ['tests', 'tests/inference']
from test_sharded_decode import SENTENCES, _translator
from translate_helpers import sharp_params as _params
translator = _translator('sharded', _params(1))
print(json.dumps([translator.mesh.size, multihost.translate_all(translator, SENTENCES)]))
"""


@pytest.mark.slow
def test_sharded_decoding_on_two_processes_translates_as_one_device():
  import sys
  sys.path.insert(0, os.path.join(ROOT, 'tests', 'inference'))
  from test_sharded_decode import SENTENCES, _translator
  from translate_helpers import sharp_params as _params
  address = f'127.0.0.1:{_free_port()}'
  processes = [subprocess.Popen([sys.executable, '-c', _SHARDED_DECODE, address, str(i)],
                                cwd=ROOT, env=_env(4), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in range(2)]
  expected = _translator('threads', _params(1)).translate(SENTENCES)
  for rc, out, err in _finish(processes):
    assert rc == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1]) == [4, expected]


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_at_the_same_step_with_one_checkpoint(
    corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  args = [f'--config.local_corpus_dir={corpus}', *TINY, '--config.num_train_steps=100000',
          '--config.checkpoint_every_steps=0', '--config.checkpoint_every_minutes=0',
          '--config.eval_every_steps=0', '--config.log_every_steps=2']
  processes = _launch(workdir, args)
  deadline = time.monotonic() + 240
  while not (os.path.exists(os.path.join(workdir, 'metrics.jsonl'))
             and read_metrics(workdir)):
    assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
    time.sleep(0.5)
  processes[1].send_signal(signal.SIGTERM)  # one process only, as a preemption notice does
  results = _finish(processes, timeout=240)
  assert [rc for rc, _, _ in results] == [0, 0], results[1][2][-3000:]
  steps = averaging.training_steps(workdir)
  assert len(steps) == 1, steps
  for _, _, err in results:
    assert f'at step {steps[0]}: checkpoint written' in err, err[-2000:]


@pytest.mark.slow
def test_resume_on_another_topology_continues_at_the_same_fraction_of_the_epoch(
    corpus, tmp_path):
  """1 process of 8 devices trains 10 steps, 2 processes of 3 devices go on to step 14, 1
  process to 18. One length bucket, no packing: an epoch is 20 batches of 40 rows on 8 devices
  and 23 of 36 (2 x 18) on 6, so batch b of the one resumes at floor(b * 23 / 20) of the other
  (pipeline.TrainIterator.set_state), not at the epoch's start."""
  workdir = str(tmp_path / 'run')
  args = [f'--config.local_corpus_dir={corpus}', *TINY, '--config.pack_examples=False',
          '--config.max_length=64', '--config.bucket_lengths=(64,)',
          '--config.tokens_per_batch=2560', '--config.eval_every_steps=0',
          '--config.checkpoint_every_steps=10']

  def data_state(step):
    return checkpoint.read_json_item(os.path.join(workdir, 'checkpoints', str(step), 'data'))

  result = run_main(f'--workdir={workdir}', *args, '--config.num_train_steps=10', env=_env(8))
  assert result.returncode == 0, result.stderr[-3000:]
  state = data_state(10)
  assert (state['epoch'], state['batch_in_epoch'], state['batches_per_epoch'],
          state['process_count']) == (0, 10, 20, 1)

  results = _finish(_launch(workdir, [*args, '--config.num_train_steps=14'], devices=3))
  assert [rc for rc, _, _ in results] == [0, 0], results[0][2][-3000:]
  err = results[0][2]
  assert 'mesh: 6 devices over 2 processes' in err and 'resumed from step 10' in err
  state = data_state(14)  # resumed at 10 * 23 / 20 = 11.5 -> 11, then 4 steps
  assert (state['epoch'], state['batch_in_epoch'], state['batches_per_epoch'],
          state['process_count']) == (0, 15, 23, 2)
  assert 'resuming at batch 11 of epoch 0' in err

  result = run_main(f'--workdir={workdir}', *args, '--config.num_train_steps=18', env=_env(8))
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'resumed from step 14' in result.stderr
  state = data_state(18)  # resumed at 15 * 20 / 23 = 13.04 -> 13, then 4 steps
  assert (state['epoch'], state['batch_in_epoch'], state['process_count']) == (0, 17, 1)
  assert 'resuming at batch 13 of epoch 0' in result.stderr
  assert [r['step'] for r in read_metrics(workdir) if 'loss' in r] == [10, 14, 18]
