"""Parsing through main.py: train on a generated treebank (dev F1 at its evaluation), then eval
(EVALB F1) and decode."""

import json
import os

import pytest
from tests.conftest import read_metrics, run_main
from t2t_jax.parsing import grammar, trees

TINY_PARSER = ['--config=configs/parsing_synthetic.py', '--config.vocab_size=200',
               '--config.d_model=32', '--config.d_ff=64', '--config.num_heads=4',
               '--config.num_layers=1', '--config.max_len=160', '--config.max_length=128',
               '--config.bucket_lengths=(128,)', '--config.tokens_per_batch=2048',
               '--config.warmup_steps=10', '--config.num_train_steps=12',
               '--config.checkpoint_every_steps=12', '--config.log_every_steps=6',
               '--config.eval_every_steps=12', '--config.eval_bleu_sentences=4',
               '--config.final_eval_split=',
               '--config.beam_size=2', '--config.max_decode_extra=24']


@pytest.mark.slow
def test_train_then_eval_reports_f1_and_decode_writes_trees(tmp_path):
  bank = str(tmp_path / 'treebank')
  grammar.write_treebank(bank, {'train': 300, 'dev': 8, 'test': 12}, seed=5)
  workdir = str(tmp_path / 'run')
  result = run_main(*TINY_PARSER, f'--workdir={workdir}', f'--config.treebank_dir={bank}')
  assert result.returncode == 0, result.stderr[-3000:]
  dev = [r for r in read_metrics(workdir) if 'eval_dev/f1' in r]  # dev F1 while training
  assert [r['step'] for r in dev] == [12] and 0.0 <= dev[0]['eval_dev/f1'] <= 100.0
  result = run_main('--mode=eval', '--split=test', f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr[-3000:]
  printed = json.loads(result.stdout)
  with open(os.path.join(workdir, 'eval_test_12.json'), encoding='utf-8') as f:
    assert json.load(f)['f1'] == printed['f1']
  assert 0.0 <= printed['f1'] <= 100.0 and printed['sentences'] == 12
  assert 'Bracketing FMeasure' in printed['evalb_summary'] and 'bleu' not in printed
  with open(os.path.join(bank, 'test.trees'), encoding='utf-8') as f:
    gold = [trees.clean(t) for _, _, t in trees.read_trees(f.read(), 'test.trees')]
  first = printed['examples'][0]
  assert (first['source'], first['reference']) == (' '.join(gold[0].words()), str(gold[0]))
  assert next(trees.read_trees(first['hypothesis'], 'x'))[2].words() == gold[0].words()

  sentences = tmp_path / 'sentences.txt'
  sentences.write_text(' '.join(gold[1].words()) + '\n\nA (bracketed) word\n')
  out = tmp_path / 'parsed.txt'
  result = run_main('--mode=decode', f'--workdir={workdir}', f'--input={sentences}',
                    f'--output={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  lines = out.read_text().split('\n')
  assert len(lines) == 4 and lines[1] == '' and lines[3] == ''
  assert next(trees.read_trees(lines[0], 'x'))[2].words() == gold[1].words()
  assert next(trees.read_trees(lines[2], 'x'))[2].words() == ['A', '-LRB-bracketed-RRB-',
                                                             'word']
