"""Tests for t2t_jax.inference.evaluate.write_result: a result never replaces another one."""

import json
import os

from t2t_jax.inference import evaluate


def test_an_existing_result_is_kept_and_copies_are_numbered_from_one(tmp_path):
  workdir = str(tmp_path)
  results = [{'checkpoint': f'step {n}', 'bleu': float(n)} for n in range(4)]
  written = [evaluate.write_result(workdir, 'dev', 7, r) for r in results]
  assert written == [os.path.join(workdir, name) for name in (
      'eval_dev_7.json', 'eval_dev_7.1.json', 'eval_dev_7.2.json', 'eval_dev_7.3.json')]
  assert [json.load(open(p)) for p in written] == results  # each copy holds its own result
  assert sorted(os.listdir(workdir)) == sorted(os.path.basename(p) for p in written)
  # Another split or step starts again without a number.
  assert evaluate.write_result(workdir, 'test', 7, results[0]) == os.path.join(
      workdir, 'eval_test_7.json')
