"""`--config.ema_decay` (training/ema.py): the average against a numpy recurrence of the
parameters the optimizer produced; off, the optimizer state is the paper's."""

import json
import os

import jax
import numpy as np
import optax
import pytest
from conftest import TINY, read_metrics, run_main

from t2t_jax.inference import checkpoint_choice
from t2t_jax.training import ema


def test_the_average_follows_the_recurrence():
  params = {'w': np.array([1.0, -2.0, 0.5], np.float32)}
  tx = ema.with_ema(optax.sgd(0.1), 0.9)
  state = tx.init(params)
  expected = params['w'].astype(np.float64)
  rng = np.random.RandomState(0)
  for n in range(1, 30):
    grads = {'w': rng.randn(3).astype(np.float32)}
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    decay = min(0.9, (1 + n) / (10 + n))
    expected = decay * expected + (1 - decay) * np.asarray(params['w'], np.float64)
  assert int(state.count) == 29
  np.testing.assert_allclose(np.asarray(state.ema['w']), expected, rtol=1e-6)


def test_off_it_is_the_optimizer_itself():
  tx = optax.adam(1e-3)
  assert ema.with_ema(tx, 0.0) is tx
  state = jax.eval_shape(ema.with_ema(tx, 0.999).init, {'w': np.zeros(3, np.float32)})
  assert state.ema['w'].shape == (3,) and state.ema['w'].dtype == np.float32


@pytest.mark.slow  # a whole run (or several compiles): the slow tier
def test_a_fine_tune_of_the_decoder_with_an_average_through_main(tiny_workdir, corpus,
                                                                  tmp_path):
  """init_from + trainable + ema_decay through main.py: the encoder and the shared embedding
  are the source's bitwise, the average is read by --checkpoint=ema, info says all of it."""
  run = str(tmp_path / 'ft')
  given = [a for a in TINY if not a.startswith('--config.vocab_sample')]
  result = run_main(f'--workdir={run}', f'--config.local_corpus_dir={corpus}', *given,
                    f'--config.init_from={tiny_workdir}:10', "--config.trainable=decoder/.*",
                    '--config.ema_decay=0.9', '--config.num_train_steps=10',
                    '--config.eval_every_steps=10', '--config.keep_best=1',
                    '--config.best_weights=ema')
  assert result.returncode == 0, result.stderr[-3000:]
  source = checkpoint_choice.load_inference_params(tiny_workdir, '10').params
  tuned = checkpoint_choice.load_inference_params(run, '10').params
  average = checkpoint_choice.load_inference_params(run, 'ema')
  assert average.description == 'moving average (ema) of training checkpoint step 10'
  for name in ('encoder', 'shared_embedding'):
    jax.tree_util.tree_map(np.testing.assert_array_equal, source[name], tuned[name])
    jax.tree_util.tree_map(np.testing.assert_array_equal, source[name], average.params[name])
  moved = np.asarray(tuned['decoder']['layer_0']['ffn']['wi']['kernel'])
  start = np.asarray(source['decoder']['layer_0']['ffn']['wi']['kernel'])
  between = np.asarray(average.params['decoder']['layer_0']['ffn']['wi']['kernel'])
  assert not np.array_equal(moved, start) and not np.array_equal(between, moved)
  logged = [m['grad_norm'] for m in read_metrics(run) if 'grad_norm' in m]
  assert logged and all(g > 0 for g in logged)
  info = run_main('--mode=info', f'--workdir={run}').stdout
  assert "trainable='decoder/.*':" in info and 'frozen' in info
  assert 'moving average of the weights (decay 0.9)' in info
  assert "  best_weights              = 'ema'" in info
  evaluated = run_main('--mode=eval', f'--workdir={run}', '--checkpoint=ema')
  assert evaluated.returncode == 0 and 'moving average (ema)' in evaluated.stderr
  # Evaluated during training too, and kept as the best by best_weights='ema': the logged dev
  # loss is --mode=eval's of the same average, and best/ holds the average itself.
  logged = [m for m in read_metrics(run) if 'eval_dev_ema/loss' in m]
  assert [m['step'] for m in logged] == [10]
  with open(os.path.join(run, 'eval_dev_ema_10.json')) as f:
    np.testing.assert_allclose(logged[0]['eval_dev_ema/loss'], json.load(f)['loss'], rtol=1e-5)
  kept = checkpoint_choice.load_inference_params(run, 'best')
  assert kept.description.endswith('of the moving average of the weights)')
  jax.tree_util.tree_map(np.testing.assert_array_equal, kept.params, average.params)
  raw = run_main('--mode=eval', f'--workdir={run}', '--checkpoint=10')
  assert raw.returncode == 0, raw.stderr[-3000:]
  # Each named by what was evaluated: neither result is the other's `.1`.
  assert sorted(n for n in os.listdir(run) if n.endswith('.json')) == [
      'eval_dev_10.json', 'eval_dev_ema_10.json']
  none = run_main('--mode=eval', f'--workdir={tiny_workdir}', '--checkpoint=ema')
  assert none.returncode == 1 and none.stderr.splitlines()[-1].endswith(
      'holds no moving average of the weights (the run was trained without '
      '--config.ema_decay); choose another --checkpoint')
