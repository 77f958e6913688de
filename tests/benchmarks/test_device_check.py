"""The device check (benchmarks/device_check.py) at its smoke size on CPU, so that the one
prepared command a lent GPU gets never rots: every stage runs, writes its record, and the
table names every stage and goal. On one backend the device-vs-CPU comparisons must come out
exact, which checks that both sides compute and compare what they say."""

import json
import os
import sys
import types

import pytest

from benchmarks import device_check

STAGE_NAMES = [s.name for s in device_check.STAGES]


def _records(path):
  with open(path, encoding='utf-8') as f:
    return [json.loads(line) for line in f]


def _final(records, stage):
  """The stage's last record (its status after the partial ones)."""
  return [r for r in records if r['stage'] == stage and r['status'] != 'partial'][-1]


@pytest.mark.slow
def test_smoke_runs_every_stage_with_exact_cpu_comparisons(tmp_path, capsys):
  out = tmp_path / 'check.jsonl'
  assert device_check.main(['--smoke', '--in-process', '--out', str(out)]) == 0
  records = _records(out)
  assert {r['stage'] for r in records} == set(STAGE_NAMES)
  for stage in STAGE_NAMES:
    final = _final(records, stage)
    assert final['status'] == 'ok', (stage, final.get('error'), final.get('traceback'))
    assert final['name'] == 'device_check' and final['seconds'] >= 0 and 'summary' in final
  # One backend on both sides: the float32 device-vs-CPU errors are exactly zero, bfloat16
  # differs, and the decoded test sentences are identical.
  numerics = _final(records, 'numerics')
  assert numerics['float32']['highest'] == {'loss': 0.0, 'grads': 0.0, 'logits': 0.0}
  assert 0.0 < numerics['bfloat16']['grads'] < 0.1
  forms = _final(records, 'attention_forms')['errors']
  assert set(forms) == {'heads_first (1 query)', 'few_query (4 queries)', 'xla fused f32',
                        'xla fused bf16', 'dispatcher bf16'}
  assert all(forms[k] < 1e-5 for k in forms if 'bf16' not in k)
  decode = _final(records, 'embedded_decode')
  assert decode['differing_lines'] == 0 and decode['sentences'] == 16
  assert decode['bleu']['device'] == decode['bleu']['cpu']
  for name in ('train_base', 'train_big'):
    train = _final(records, name)
    packed, bucketed = train['packed'], train['bucketed']
    assert packed['shapes'] == ['8x64'] and len(bucketed['shapes']) > 1
    # Packing fills more of the same token budget with real tokens than buckets do.
    assert packed['real_target_tokens_per_batch'] > bucketed['real_target_tokens_per_batch']
    assert 0.0 <= packed['wait_fraction'] < 1.0
  compiles = _final(records, 'compile')['compile_s']
  assert [k.split()[0] for k in compiles][0] == 'train' and 'decode' in ' '.join(compiles)
  table = capsys.readouterr().out
  for stage in STAGE_NAMES:
    assert stage in table
  assert 'goals:' in table and 'device decode identical to CPU' in table
  assert (tmp_path / 'device_check.txt').read_text().count('device check') == 1


def test_a_failing_stage_is_recorded_and_the_next_one_runs(tmp_path, monkeypatch):
  module = types.ModuleType('fake_device_stages')
  module.boom = lambda ctx: 1 / 0
  module.fine = lambda ctx: {'summary': {'answer': 42}, 'goals': [
      device_check.goal('the answer is 41', 42, False)]}
  monkeypatch.setitem(sys.modules, 'fake_device_stages', module)
  monkeypatch.setattr(device_check, 'STAGES', (
      device_check.Stage('boom', 'fake_device_stages:boom', 10, 10),
      device_check.Stage('after_boom', 'fake_device_stages:fine', 10, 10, needs='boom'),
      device_check.Stage('fine', 'fake_device_stages:fine', 10, 10)))
  out = tmp_path / 'check.jsonl'
  device_check.main(['--in-process', '--out', str(out)])
  records = _records(out)
  assert [(r['stage'], r['status']) for r in records] == [
      ('boom', 'error'), ('after_boom', 'skipped'), ('fine', 'ok')]
  assert records[0]['error'] == 'ZeroDivisionError: division by zero'
  assert records[1]['why'] == 'needs boom'
  table = device_check.table(records)
  assert 'MISSED fine: the answer is 41 (measured 42)' in table
  assert 'division by zero' in table.splitlines()[2]


def test_a_stage_runs_in_a_child_process_of_its_own(tmp_path):
  out = tmp_path / 'check.jsonl'
  device_check.main(['--stages', 'environment', '--out', str(out)])
  (record,) = _records(out)
  assert record['status'] == 'ok' and record['pid'] != os.getpid()
  assert record['backend'] == 'cpu' and record['versions']['jax']
  assert '===== environment' in (tmp_path / 'device_check.log').read_text()


def test_unknown_stage_is_refused(capsys):
  with pytest.raises(SystemExit):
    device_check.main(['--stages', 'numerics,warp_drive'])
  assert "unknown stage(s) ['warp_drive']" in capsys.readouterr().err
