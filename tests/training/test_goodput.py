"""Goodput (training/goodput.py, issue 63, 3): the run's wall time split into steps,
start-up, compile, input, evaluation and checkpointing, against sleeps of known length and a
compile JAX reports, and the split a tiny run writes into metrics.jsonl."""

import time

import jax
import jax.numpy as jnp
import pytest

from conftest import TINY, read_metrics, run_main
from t2t_jax.training import goodput


def test_each_phase_counts_its_own_wall_time_and_a_compile_counts_as_compile():
  account = goodput.Goodput(time.monotonic())
  try:
    time.sleep(0.10)  # start-up
    account.first_step()
    batches = account.timed(iter([1, 2]))
    with account.phase('eval'):
      time.sleep(0.05)
      before, began = account.seconds['compile'], time.monotonic()
      jax.jit(lambda x: jnp.sin(x) * 3.25 + 0.125)(jnp.ones(7)).block_until_ready()  # new
      call, compiled = time.monotonic() - began, account.seconds['compile'] - before
    with account.phase('checkpoint'):
      time.sleep(0.03)
    assert next(batches) == 1  # input: nothing to wait for
    time.sleep(0.06)  # a "step"
    split = account.split()
  finally:
    account.close()
  assert compiled > 0  # JAX's compile events reached the account
  assert account.seconds['startup'] == pytest.approx(0.10, abs=0.03)
  # The call's wall time less JAX's compile events (tracing, lowering, XLA) stays in the phase.
  assert account.seconds['eval'] == pytest.approx(0.05 + call - compiled, abs=0.02)
  assert account.seconds['checkpoint'] == pytest.approx(0.03, abs=0.02)
  assert account.seconds['input'] < 0.01
  assert sum(split.values()) == pytest.approx(1.0)
  assert set(split) == {'goodput'} | {f'badput/{p}' for p in goodput.PHASES}
  assert goodput.format_split(split, 0.3).startswith(f'goodput {split["goodput"]:.1%} of 0 s')


def test_a_closed_account_hears_no_more_compiles():
  account = goodput.Goodput(time.monotonic())
  account.close()
  jax.jit(lambda x: jnp.cos(x) - 0.375)(jnp.ones(5)).block_until_ready()
  assert account.seconds['compile'] == 0.0


def test_a_run_logs_its_split_and_ends_with_the_whole_runs(corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY,
                    '--config.num_train_steps=20', '--config.eval_every_steps=10')
  assert result.returncode == 0, result.stderr[-3000:]
  records = read_metrics(workdir)
  windows = [r for r in records if 'loss' in r]
  final = records[-1]
  assert [r['step'] for r in windows] == [10, 20] and final['step'] == 20 and 'loss' not in final
  for record in windows + [final]:
    parts = [record['goodput']] + [record[f'badput/{p}'] for p in goodput.PHASES]
    assert all(0 <= x <= 1 for x in parts) and sum(parts) == pytest.approx(1.0)
  # The tiny run compiles (train step, evaluation) and evaluates twice (steps 0, 10, 20).
  assert final['badput/compile'] > 0 and final['badput/eval'] > 0
  assert final['badput/startup'] > 0 and final['badput/checkpoint'] > 0
  [line] = [x for x in result.stderr.splitlines() if 'in train steps; startup' in x]
  assert f'goodput {final["goodput"]:.1%} of ' in line
