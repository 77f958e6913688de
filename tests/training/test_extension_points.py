"""Issue 44's extension points through main.py: a sown auxiliary loss (the Switch MoE of
examples/variants.py) in metrics.jsonl, resume with another optimizer refused in one line,
and --mode=info naming the optimizer."""

import os

import pytest

from conftest import ROOT, TINY, read_metrics, run_main

MOE = f'--config.model={os.path.join(ROOT, "examples", "variants.py")}:switch_moe'


def test_switch_moe_logs_its_load_balancing_loss_and_resume_keeps_the_optimizer(corpus,
                                                                               tmp_path):
  workdir = str(tmp_path / 'moe')
  common = [f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY, MOE,
            '--config.eval_every_steps=20', '--config.eval_batches=2']
  result = run_main(*common, '--config.num_train_steps=20')
  assert result.returncode == 0, result.stderr[-3000:]
  records = read_metrics(workdir)
  train = [r for r in records if 'loss' in r]
  evals = [r for r in records if 'eval_dev/loss' in r]
  assert [r['step'] for r in train] == [10, 20]
  # Two FFNs (1 encoder + 1 decoder layer), each alpha * experts * sum(f * P): 0.01 (balanced)
  # to 0.04 (one expert takes every token).
  assert all(0.0199 < r['aux_load_balancing'] < 0.0801 for r in train), train
  assert evals and all(r['eval_dev/aux_load_balancing'] > 0 for r in evals), evals

  refused = run_main(*common, '--config.num_train_steps=30', '--config.optimizer=adafactor')
  assert refused.returncode == 1
  assert refused.stderr.splitlines()[-1] == (
      f'error: {workdir}/checkpoints holds checkpoints (latest step 20) of an incompatible '
      "config (optimizer: checkpoint has 'adam', config has 'adafactor'). Use another "
      '--workdir, or restore those values; nothing was changed.')


def test_info_names_the_optimizer():
  result = run_main('--mode=info', '--config=configs/wmt_base.py', '--config.optimizer=adamw',
                    '--config.weight_decay=0.1')
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.splitlines()[-1] == (
      'optimizer: adamw b1=0.9 b2=0.98 eps=1e-09 weight_decay=0.1 (2+-D parameters); learning '
      "rate: the paper's (d_model=512, warmup_steps=4000, learning_rate_scale=1: peak "
      '0.000699 at step 4000); aux_loss_weight=1')


@pytest.mark.slow
@pytest.mark.parametrize('optimizer', ['adamw', 'adafactor'])
def test_one_flag_trains_with_another_optimizer_and_the_checkpoint_records_it(corpus, tmp_path,
                                                                              optimizer):
  workdir = str(tmp_path / optimizer)
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY,
                    f'--config.optimizer={optimizer}', '--config.num_train_steps=20',
                    '--config.eval_every_steps=0')
  assert result.returncode == 0, result.stderr[-3000:]
  losses = [r['loss'] for r in read_metrics(workdir) if 'loss' in r]
  assert len(losses) == 2 and losses[1] < losses[0]
  from t2t_jax.inference import checkpoint_choice  # pylint: disable=import-outside-toplevel
  assert checkpoint_choice.latest_training_config(workdir)['optimizer'] == optimizer
  # TINY peaks at 0.22: no advice (tests/training/test_optim.py has the quickstart's 2.4e-3).
  assert 'at a peak learning rate' not in result.stderr
