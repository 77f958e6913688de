"""The library loop (t2t_jax/library.py, issue 63, 4): the modes' own code paths from Python, so
`translate` is `--mode=decode` byte for byte, `score` `--mode=score`, `evaluate` `--mode=eval`;
`train` and `batches` run what `--mode=train` runs."""

import json
import os
import shutil

import numpy as np
import pytest
from conftest import ROOT, run_main

import t2t_jax

LINES = ['In the beginning God created the heaven and the earth.', 'And God said,',
         'Let there be light: and there was light.']


def _ok(result):
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def test_translate_and_score_are_the_modes_byte_for_byte(tiny_workdir, tmp_path):
  source = tmp_path / 'in.en'
  source.write_text(''.join(line + '\n' for line in LINES), encoding='utf-8')
  decoded = _ok(run_main('--mode=decode', f'--workdir={tiny_workdir}', f'--input={source}'))
  assert t2t_jax.translate(tiny_workdir, LINES) == decoded.stdout.splitlines()
  nbest = _ok(run_main('--mode=decode', f'--workdir={tiny_workdir}', f'--input={source}',
                       '--config.nbest=2', '--config.output_scores=True'))
  outputs = t2t_jax.translate(tiny_workdir, LINES, nbest=2, output_scores=True)
  assert len(outputs) == 3 and all(len(o.split('\n')) == 2 for o in outputs)  # 2 per input
  assert ''.join(o + '\n' for o in outputs) == nbest.stdout
  targets = tmp_path / 'in.es'
  targets.write_text('En el principio\nY dijo Dios\nSea la luz\n', encoding='utf-8')
  scored = _ok(run_main('--mode=score', f'--workdir={tiny_workdir}', f'--input={source}',
                        f'--targets={targets}'))
  log_probs = t2t_jax.score(tiny_workdir, LINES, targets.read_text().splitlines())
  assert [float(line.split('\t')[0]) for line in scored.stdout.splitlines()] == pytest.approx(
      log_probs, abs=5e-5)  # the mode prints 4 decimals... and the same numbers
  assert all(p < 0 for p in log_probs)


@pytest.mark.slow
def test_the_whole_loop_in_a_few_lines(corpus, tmp_path):
  # TINY's model and data (conftest.py), as keyword arguments.
  config = t2t_jax.load_config(
      os.path.join(ROOT, 'configs', 'quickstart.py'), local_corpus_dir=corpus, vocab_size=400,
      vocab_sample_sentences=1200, d_model=32, d_ff=64, num_heads=4, num_layers=1, max_len=64,
      max_length=32, bucket_lengths=[16, 32], tokens_per_batch=2048, warmup_steps=10,
      dropout_rate=0.0, num_train_steps=10, checkpoint_every_steps=10, eval_every_steps=0,
      final_eval_split='dev')
  run = str(tmp_path / 'run')
  result = t2t_jax.train(config, run)
  assert result['sentences'] == 64 and 'bleu' in result
  evaluated = t2t_jax.evaluate(run, split='dev')
  assert evaluated['bleu'] == result['bleu'] and evaluated['loss'] == result['loss']
  copy = str(tmp_path / 'copy')
  shutil.copytree(run, copy)
  printed = json.loads(_ok(run_main('--mode=eval', f'--workdir={copy}', '--split=dev')).stdout)
  assert printed['bleu'] == evaluated['bleu']
  batches = t2t_jax.batches(config, str(tmp_path / 'own'))
  first = next(batches)
  assert first['inputs'].dtype == np.int32 and first['inputs'].ndim == 2
  state = batches.get_state()
  again = t2t_jax.batches(config, str(tmp_path / 'own'))
  again.set_state(state)
  assert all(np.array_equal(a, b) for a, b in zip(next(batches).values(), next(again).values()))
