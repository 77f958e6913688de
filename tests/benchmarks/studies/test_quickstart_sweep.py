"""quickstart_sweep: each variant's command line (its recipe, its seed) and its summary."""

import json

from benchmarks.studies import quickstart_sweep as sweep


def _overrides(command):
  return [a for a in command if a.startswith('--config.')]


def test_round_7_starts_from_the_second_tuning_and_older_rounds_from_the_first(tmp_path):
  old = _overrides(sweep._command('lr050', str(tmp_path)))
  assert old[:len(sweep.FIRST_TUNING)] == sweep.FIRST_TUNING
  assert old[-len(sweep.VARIANTS['lr050']):] == sweep.VARIANTS['lr050']
  new = _overrides(sweep._command('r7_cosine', str(tmp_path)))
  assert new == [*sweep.SECOND_TUNING, *sweep.SECOND_EVAL, '--config.lr_schedule=cosine']
  assert f'--workdir={tmp_path}/r7_cosine' in sweep._command('r7_cosine', str(tmp_path))


def test_a_seed_suffix_sets_both_seeds_and_its_own_workdir(tmp_path):
  command = sweep._command('r7_cosine@2', str(tmp_path))
  assert command[-2:] == ['--config.seed=2', '--config.shuffle_seed=2']
  assert f'--workdir={tmp_path}/r7_cosine@2' in command
  assert sweep._variant('r7_cosine@2') == 'r7_cosine' and sweep._seed('lr050') == []


def test_the_summary_holds_the_curve_and_the_final_evaluation_per_split(tmp_path):
  workdir = tmp_path / 'r7_cosine'
  workdir.mkdir()
  records = [{'step': 100, 'loss': 3.0, 'elapsed_s': 10.0, 'tokens': 1000},
             {'step': 100, 'eval_dev/nll': 2.5, 'eval_dev/bleu': 20.0, 'eval_dev/elapsed_s': 11.0}]
  (workdir / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
  (workdir / 'eval_dev_100.json').write_text(json.dumps(
      {'split': 'dev', 'bleu': 21.5, 'chrf': 45.0, 'step': 100, 'checkpoint': 'averaged'}))
  # An older step whose name sorts after the newest one's: the newest step counts.
  (workdir / 'eval_dev_90.json').write_text(json.dumps(
      {'split': 'dev', 'bleu': 1.0, 'chrf': 1.0, 'step': 90, 'checkpoint': 'step 90'}))
  summary = sweep.collect('r7_cosine', str(workdir), ['--config.lr_schedule=cosine'])
  assert summary['steps'] == 100 and summary['target_tokens_per_s'] == 100.0
  assert summary['best_dev_bleu'] == 20.0
  assert summary['final_eval'] == {'dev': {'bleu': 21.5, 'chrf': 45.0, 'step': 100,
                                           'checkpoint': 'averaged'}}
