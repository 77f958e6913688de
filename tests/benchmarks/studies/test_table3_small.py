"""The miniature Table 3 runner (benchmarks/studies/table3_small.py): which runs count as
finished, the command of a (row, seed), and the record of a finished run."""

import json

from benchmarks.studies import table3_small
from configs import table3_small as small_config

STEPS = small_config.STEPS


def _write(path, records):
  path.mkdir(parents=True, exist_ok=True)
  (path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))


def _final(bleu):
  return {'step': STEPS, 'eval_dev/nll': 4.0, 'eval_dev/perplexity': 54.6,
          'eval_dev/accuracy': 0.3, 'eval_dev/bleu': bleu, 'eval_dev/tokenized_bleu': bleu + 0.1,
          'eval_dev/elapsed_s': 300.0}


def test_only_the_last_steps_dev_bleu_finishes_a_run(tmp_path):
  run = tmp_path / 'C3' / 'seed1'
  assert table3_small.workdir(str(tmp_path), 'C3', 1) == str(run)
  assert table3_small.final_eval(str(run), STEPS) is None  # no workdir yet
  train = {'step': STEPS, 'loss': 4.5, 'elapsed_s': 280.0}
  _write(run, [{'step': 0, 'eval_dev/nll': 8.8}, train,
               {'step': STEPS, 'eval_dev/nll': 4.0}])  # stopped before its BLEU
  assert table3_small.final_eval(str(run), STEPS) is None
  assert table3_small.collect(str(tmp_path), 'C3', 1) is None
  _write(run, [{'step': 0, 'eval_dev/nll': 8.8}, train, _final(7.5)])
  record = table3_small.collect(str(tmp_path), 'C3', 1)
  assert record['row'] == 'C3' and record['seed'] == 1 and record['steps'] == STEPS
  assert record['overrides'] == {'num_layers': 4}
  assert (record['dev_bleu'], record['dev_perplexity'], record['train_loss']) == (7.5, 54.6, 4.5)
  assert record['params'] == 2_357_248 and record['paper_params_m'] == 80


def test_command_selects_the_row_seed_and_workdir(tmp_path):
  argv = table3_small.command(str(tmp_path), 'A1', 3)
  assert argv[1].endswith('main.py')
  assert argv[2].endswith('configs/table3_small.py:A1')
  assert argv[3:] == [f'--workdir={tmp_path}/A1/seed3', '--config.seed=3',
                      '--config.shuffle_seed=3']
  assert table3_small.ROWS[0] == 'base' and len(table3_small.ROWS) == 19
