"""keep_best and early_stop_patience (training/best.py): the K best evaluations' parameters
kept beside the training checkpoints, `--checkpoint=best`, and the stop after N evaluations
without improvement, which a rerun respects."""

import os

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY, run_main

from t2t_jax import config as config_lib
from t2t_jax.configs import default
from t2t_jax.inference import best_average, checkpoint_choice
from t2t_jax.runtime import resolution
from t2t_jax.training import best


def _config(**values):
  config = default.get_config()
  config.update(dict(vocab_size=32, d_model=8, d_ff=16, num_heads=2, num_layers=1, max_len=16,
                     max_length=16, bucket_lengths=(8, 16), tokens_per_batch=64,
                     eval_every_steps=10, keep_best=2))
  config.update(values)
  return resolution.resolve(config)


def _params(value):
  return {'w': jnp.full((2, 3), value, jnp.float32), 'b': jnp.full((3,), value, jnp.float32)}


def _observe(keeper, config, losses):
  """Evaluations every 10 steps with these dev losses; the step each stop was decided at."""
  for i, loss in enumerate(losses):
    step = 10 * (i + 1)
    if keeper.observe(step, {'loss': loss, 'nll': loss}, _params(float(step)),
                      dict(config.to_dict(), bucket_lengths=list(config.bucket_lengths))):
      return step
  return None


def test_the_k_best_are_kept_and_the_rest_removed(tmp_path):
  config = _config()
  keeper = best.BestKeeper(str(tmp_path), config)
  os.makedirs(tmp_path / 'best' / 'notes')  # not ours: never deleted
  assert _observe(keeper, config, [5.0, 4.0, 4.5, 3.0, 3.5]) is None
  kept = checkpoint_choice.best_checkpoints(str(tmp_path))
  assert [(s, r['value']) for s, r, _ in kept] == [(40, 3.0), (50, 3.5)]
  assert sorted(os.listdir(tmp_path / 'best')) == ['notes', 'step_40', 'step_50']
  assert kept[0][1]['metrics'] == {'loss': 3.0, 'nll': 3.0}
  inference = checkpoint_choice.load_inference_params(str(tmp_path), 'best')
  assert inference.step == 40 and inference.description == 'best checkpoint step 40 (dev loss 3)'
  np.testing.assert_array_equal(inference.params['w'], np.full((2, 3), 40.0, np.float32))


def test_bleu_ranks_higher_first_and_ties_go_to_the_earlier_step(tmp_path):
  config = _config(best_metric='bleu', eval_bleu_sentences=8, keep_best=1)
  keeper = best.BestKeeper(str(tmp_path), config)
  for step, bleu in ((10, 1.0), (20, 7.0), (30, 7.0), (40, 2.0)):
    keeper.observe(step, {'loss': 1.0, 'bleu': bleu}, _params(float(step)), {})
  assert [s for s, _, _ in checkpoint_choice.best_checkpoints(str(tmp_path))] == [20]


def test_patience_counts_evaluations_since_the_best(tmp_path):
  config = _config(keep_best=0, early_stop_patience=2)
  keeper = best.BestKeeper(str(tmp_path), config)
  assert _observe(keeper, config, [5.0, 4.0, 4.1, 3.9, 4.0, 4.2, 3.0]) == 60
  record = keeper.write_stop(60)
  assert record == {'step': 60, 'best_step': 40, 'metric': 'loss', 'best_value': 3.9,
                    'weights': 'params', 'patience': 2}
  assert best.early_stop_record(str(tmp_path)) == record and best.stopped_before(str(tmp_path))
  assert not os.path.exists(tmp_path / 'best' / 'step_40')  # keep_best=0 keeps none


def test_best_keys_are_checked_by_the_resolution():
  assert _config(eval_every_steps=0, keep_best=2).keep_best == 0  # a config file's: reset
  raw = default.get_config()
  raw.update(dict(eval_every_steps=0, keep_best=2))
  with pytest.raises(config_lib.ConfigError, match=r"'keep_best'=2 has no effect"):
    resolution.resolve(raw, explicit=['keep_best'])
  raw = default.get_config()
  raw.update(dict(keep_best=2, best_metric='bleu', eval_bleu_sentences=0))
  with pytest.raises(config_lib.ConfigError, match=r"'best_metric': expected 'loss', or 'bleu' "
                     r'with eval_bleu_sentences > 0'):
    resolution.resolve(raw)

  raw = default.get_config()
  raw.update(dict(keep_best=2, best_weights='ema'))
  with pytest.raises(config_lib.ConfigError, match=r"'best_weights': expected 'params', or "
                     r"'ema' with ema_decay > 0 .*, got 'ema'$"):
    resolution.resolve(raw)


def test_the_moving_average_s_best_is_kept_and_named_so(tmp_path):
  config = _config(keep_best=1, ema_decay=0.9, best_weights='ema')
  keeper = best.BestKeeper(str(tmp_path), config)
  assert _observe(keeper, config, [5.0, 4.0]) is None
  (step, record, _), = checkpoint_choice.best_checkpoints(str(tmp_path))
  assert (step, record['weights'], record['value']) == (20, 'ema', 4.0)
  inference = checkpoint_choice.load_inference_params(str(tmp_path), 'best')
  assert inference.description == ('best checkpoint step 20 (dev loss 4 of the moving average '
                                   'of the weights)')


def test_no_best_checkpoint_is_one_line(tmp_path):
  with pytest.raises(checkpoint_choice.CheckpointError, match=r'--checkpoint=best: no best '
                     r'checkpoint in .*best \(train with --config.keep_best=K'):
    checkpoint_choice.load_inference_params(str(tmp_path), 'best')


@pytest.mark.slow
def test_a_run_stops_early_and_its_rerun_does_not_train_further(tmp_path, corpus):
  args = [f'--workdir={tmp_path / "run"}', f'--config.local_corpus_dir={corpus}', *TINY,
          '--config.eval_every_steps=10', '--config.keep_best=1',
          '--config.early_stop_patience=1', '--config.learning_rate_scale=30.0',
          '--config.num_train_steps=200', '--config.checkpoint_every_steps=100']
  first = run_main(*args)
  assert first.returncode == 0, first.stderr[-3000:]
  record = best.early_stop_record(str(tmp_path / 'run'))
  assert record['step'] < 200 and record['step'] - record['best_step'] == 10
  assert os.path.isdir(tmp_path / 'run' / 'checkpoints' / str(record['step']))  # saved at stop
  again = run_main(*args)
  assert again.returncode == 0 and 'stopped early at step' in again.stderr
  assert f'training done at step {record["step"]}' in again.stderr


def test_the_best_n_are_averaged_into_their_own_checkpoint(tmp_path):
  """--config.average_best (inference/best_average.py): the mean of the N best kept."""
  config = _config(keep_best=3)
  keeper = best.BestKeeper(str(tmp_path), config)
  _observe(keeper, config, [5.0, 4.0, 4.5, 3.0, 3.5])  # kept: 40, 50, 20
  result = best_average.average_best(str(tmp_path), 2)
  assert result.steps == (40, 50)
  assert result.path == str(tmp_path / 'averaged' / 'step_50_best_2')
  inference = checkpoint_choice.load_inference_params(str(tmp_path), 'averaged/step_50_best_2')
  np.testing.assert_array_equal(inference.params['w'], np.full((2, 3), 45.0, np.float32))
  assert inference.description == 'averaged steps 40,50'
  # Not a default candidate: the paper's average of the last N stays what runs report.
  assert checkpoint_choice.averaged_checkpoints(str(tmp_path)) == []
  assert best_average.average_best(str(tmp_path), 2).steps == (40, 50)  # exists: kept as is
  with pytest.raises(checkpoint_choice.CheckpointError,
                     match=r'average_best=4: expected 1 to 3, the best checkpoints kept'):
    best_average.average_best(str(tmp_path), 4)
  with pytest.raises(checkpoint_choice.CheckpointError, match=(
      r'average_best=2: the run kept no best checkpoints \(.*/nothing_kept/best has none\); '
      r'train with --config.keep_best >= 2 to keep them, or average the last ones with '
      r'--config.average_last=2$')):
    best_average.average_best(str(tmp_path / 'nothing_kept'), 2)
