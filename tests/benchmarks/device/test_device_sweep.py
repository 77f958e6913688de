"""The device check's parts of issue 55 (benchmarks/device/sweep.py, compile_peer.py) at their
smoke size on CPU, in-process: every candidate's record, the sweep's summary naming a winner,
and the torch.compile peer's stages; and the selection of named parts."""

import math

import pytest
from test_device_check import _final, _records  # the records of a smoke run, read alike

from benchmarks.device import check as device_check
from benchmarks.device import stages, sweep

CANDIDATES = {'baseline', 'cudnn', 'rows_512', 'rows_128', 'remat_dots', 'scan',
              'latency_hiding', 'no_triton_gemm', 'cublaslt', 'adam_mu_bf16'}


@pytest.mark.slow
def test_sweep_smoke_records_every_candidate_and_names_the_winner(tmp_path, capsys):
  out = tmp_path / 'sweep.jsonl'
  assert device_check.main(['--smoke', '--in-process', '--part', 'sweep', '--out',
                            str(out)]) == 0
  records = _records(out)
  for stage in stages.SWEEP_STAGES:
    final = _final(records, stage.name)
    assert final['status'] == 'ok', (stage.name, final.get('error'), final.get('traceback'))
  found = {r['candidate']: r for r in records if r.get('candidate')}
  assert set(found) == CANDIDATES
  steps = sweep.WARM + sweep.SMOKE_STEPS
  for name, r in found.items():
    assert r['status'] == 'partial' and r['part'] == name and r['step_time_s'] > 0, name
    assert r['real_target_tokens_per_s'] > 0 and r['compile_s'] > 0, name
    # No datasheet peak for a CPU: MFU against the GEMM rate the baseline measured.
    assert set(r['mfu']) == {'measured_gemm'} and r['mfu']['measured_gemm'] > 0, name
    assert len(r['losses']) == steps and all(math.isfinite(x) for x in r['losses']), name
    assert r['numerics']['ok'] and r['nonfinite_steps'] == 0, (name, r['numerics'])
    assert 'peak_device_memory_bytes' in r and r['xla_flags_in_effect'] is False, name
  # The same batches: each step's loss against the baseline's; other rows: the means.
  assert found['scan']['numerics']['same_batches']
  assert not found['rows_512']['numerics']['same_batches']
  assert found['baseline']['shape'] == '16x64'  # the tests' 8 CPU devices, 1024 tokens
  assert (found['rows_512']['shape'], found['rows_128']['shape']) == ('8x128', '32x32')
  assert found['rows_512']['settings'] == {'max_length': 128, 'bucket_lengths': [64, 128]}
  assert found['scan']['settings'] == {'scan_layers': True}
  assert found['cudnn']['settings'] == {'attention_impl': 'cudnn'}
  assert found['cudnn']['substituted'] == {'attention_impl': 'xla'}  # no cuDNN on a CPU
  assert found['cublaslt']['xla_flags'] == '--xla_gpu_enable_cublaslt=true'
  assert found['adam_mu_bf16']['settings'] == {
      'optimizer': 'benchmarks.device.sweep:adam_mu_bf16'}
  summary = _final(records, 'sweep_summary')
  assert summary['winner'] in CANDIDATES and set(summary['candidates']) == CANDIDATES
  assert summary['candidates']['baseline']['vs_baseline'] == 1.0
  assert summary['winner_settings']['settings'] == found[summary['winner']]['settings']
  assert set(summary['stage_status'].values()) == {'ok'}
  assert 'sweep_summary' in capsys.readouterr().out


@pytest.mark.slow
def test_compile_peer_smoke_records_ours_and_the_peer(tmp_path):
  out = tmp_path / 'compile_peer.jsonl'
  assert device_check.main(['--smoke', '--in-process', '--part', 'compile_peer', '--out',
                            str(out)]) == 0
  records = _records(out)
  for name in ('compile_peer_base', 'compile_peer_big'):
    final = _final(records, name)
    assert final['status'] == 'ok', (name, final.get('error'), final.get('traceback'))
    assert final['packed']['staged_step_time_s'] > 0
    assert 'ratio_ours_over_peer_compiled' in final and 'vs_compiled' in final['summary']
    # The peer ran both ways, or says why not (torch is not in every CPU environment).
    assert {'eager', 'compiled'} <= {k.split('_')[0] for k in final['peer']}, final['peer']


def test_summary_picks_the_fastest_candidate_whose_numerics_hold():
  def rec(name, rate, ok):
    return {'name': 'device_check', 'run': 'r', 'stage': f'sweep_{name}', 'status': 'partial',
            'candidate': name, 'step_time_s': 1 / rate, 'real_target_tokens_per_s': rate,
            'mfu': {'datasheet': rate / 1000}, 'numerics': {'ok': ok}, 'settings': {'k': name},
            'xla_flags': ''}
  records = [rec('baseline', 100.0, True), rec('fast_but_wrong', 300.0, False),
             rec('scan', 150.0, True),
             {'name': 'device_check', 'run': 'r', 'stage': 'sweep_cublaslt', 'status': 'timeout'}]
  ctx = device_check.Context(smoke=True, deadline=0, scratch='', out='', emit=lambda r: r)
  ctx.records = lambda: records
  result = sweep.summary(ctx)
  assert result['winner'] == 'scan' and result['summary']['vs_baseline'] == 1.5
  assert result['stage_status'] == {'sweep_cublaslt': 'timeout'}
  assert result['summary']['numerics_failed'] == 1
  assert [g['met'] for g in result['goals']] == [False]  # 15% of the datasheet < 40%


def test_numerics_bound():
  base = {'losses': [10.0, 10.0, 9.9]}
  assert sweep.numerics([10.05, 10.0, 9.9], base, True)['ok']
  assert not sweep.numerics([10.05, 10.5, 9.9], base, True)['ok']  # one step 5% off
  assert sweep.numerics([10.5, 9.5, 9.9], base, False)['ok']  # other rows: the means agree
  assert not sweep.numerics([float('nan'), 10.0, 9.9], base, True)['ok']
  assert sweep.numerics([10.0], None, True) == {
      'ok': True, 'finite': True, 'checked_against': 'itself (the reference)'}


@pytest.mark.parametrize('text, parts', [
    ('sweep', {'sweep'}), ('compile_peer', {'compile_peer'}), ('1, sweep', {1, 'sweep'}),
    ('5', set()), ('sweep,x', set()), ('', set()), (',', set())])
def test_named_parts(text, parts):
  assert device_check._parts(text) == parts  # pylint: disable=protected-access


def test_the_sweep_and_compile_peer_fit_one_device_call_each():
  for part in ('sweep', 'compile_peer'):
    boxes = [s.box_s for s in stages.STAGES if s.part == part]
    assert sum(boxes) <= stages.PART_BUDGETS[part] <= 540, (part, boxes)
  args, wanted = device_check._parse(['--part', 'sweep'])  # pylint: disable=protected-access
  assert args.budget == 540 and [s.name for s in wanted] == [
      s.name for s in stages.SWEEP_STAGES]
  assert wanted[-1].final  # the summary runs even when the candidates spent the budget
  # Each XLA flag candidate in a process of its own (a flag XLA does not know aborts it).
  assert all(s.xla_flags.count('--') <= 1 for s in stages.SWEEP_STAGES)
