"""The device check (benchmarks/device/check.py): its smoke size on CPU, so that the prepared
commands a lent GPU gets never rot, and the promises a one-shot run needs: boxes that add up,
every record kept whatever stops the run, no child left behind, `--out` checked first."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import types

import pytest

from benchmarks.device import check as device_check
from conftest import ROOT

SCRIPT = os.path.join(ROOT, 'benchmarks', 'device', 'check.py')
STAGE_NAMES = [s.name for s in device_check.STAGES if s.part in (1, 2, 3, 4)]


def _records(path):
  with open(path, encoding='utf-8') as f:
    return [json.loads(line) for line in f]


def _final(records, stage):
  """The stage's last record (its status after the partial ones)."""
  return [r for r in records if r['stage'] == stage and r['status'] != 'partial'][-1]


@pytest.mark.slow
def test_smoke_runs_every_stage_with_exact_cpu_comparisons(tmp_path, capsys):
  out = tmp_path / 'check.jsonl'
  assert device_check.main(['--smoke', '--in-process', '--part', '1,2,3,4', '--out',
                            str(out)]) == 0
  records = _records(out)
  assert {r['stage'] for r in records} == set(STAGE_NAMES)
  for stage in STAGE_NAMES:
    final = _final(records, stage)
    assert final['status'] == 'ok', (stage, final.get('error'), final.get('traceback'))
    assert final['name'] == 'device_check' and final['seconds'] >= 0 and 'summary' in final
  # Records as they are measured: each precision, each form, each dev BLEU, ours, each program.
  parts = {(r['stage'], r.get('part')) for r in records if r['status'] == 'partial'}
  assert {('environment', 'versions'), ('environment', 'imports'),
          ('numerics', 'float32_highest'), ('numerics', 'float32_default'),
          ('attention_forms', 'heads_first'), ('train_base', 'packed'),
          ('train_big', 'packed'), ('compile', 'train')} <= parts, parts
  assert any(s == 'embedded_default' and p.startswith('dev_bleu@') for s, p in parts)
  environment = _final(records, 'environment')
  assert set(environment['imports'].values()) == {'ok'}
  assert environment['gemm']['n'] == 64 and environment['gemm']['flops_per_s'] > 0
  # One backend on both sides: the float32 device-vs-CPU errors are exactly zero, bfloat16
  # differs, and the decoded test sentences are identical.
  numerics = _final(records, 'numerics')
  assert numerics['float32']['highest'] == {'loss': 0.0, 'grads': 0.0, 'logits': 0.0}
  assert 0.0 < numerics['bfloat16']['grads'] < 0.1
  forms = _final(records, 'attention_forms')['errors']
  assert set(forms) == {'heads_first (1 query)', 'few_query (4 queries)', 'xla fused f32',
                        'xla fused bf16', 'dispatcher bf16'}
  assert all(forms[k] < 1e-5 for k in forms if 'bf16' not in k)
  e2e = _final(records, 'embedded_default')
  assert e2e['compiles']['count'] > 0 and e2e['dev_bleu']
  variants = _final(records, 'embedded_variants')['variants']
  assert {n: v['exit_code'] for n, v in variants.items()} == {
      'adam': 0, 'adafactor': 0, 'switch_moe': 0}
  assert set(variants['switch_moe']['aux_first_last']) == {'aux_load_balancing'}
  assert not variants['adam']['aux_first_last']  # the paper's model sows no loss
  # Its command is embedded_default's: the smoke run shares that run instead of a third one.
  assert variants['adam']['reused'] == 'embedded_default'
  assert variants['adam']['dev_bleu'] == e2e['dev_bleu']
  decode = _final(records, 'embedded_decode')
  assert decode['differing_lines'] == 0 and decode['sentences'] == 16
  assert decode['bleu']['device'] == decode['bleu']['cpu']
  for name in ('train_base', 'train_big'):
    packed = _final(records, name)['packed']
    assert packed['shapes'] == ['8x64'] and 0.0 <= packed['wait_fraction'] < 1.0
    # MFU against the measured GEMM of the environment stage (no datasheet peak for a CPU).
    assert set(packed['mfu']) == {'measured_gemm'}
  bucketed = _final(records, 'train_bucketed')
  assert len(bucketed['shapes']) > 1
  # Packing fills more of the same token budget with real tokens than buckets do.
  assert (_final(records, 'train_base')['packed']['real_target_tokens_per_batch']
          > bucketed['real_target_tokens_per_batch'])
  compiles = _final(records, 'compile')['compile_s']
  assert [k.split()[0] for k in compiles][0] == 'train' and 'decode' in ' '.join(compiles)
  table = capsys.readouterr().out
  for stage in STAGE_NAMES:
    assert stage in table
  assert 'goals:' in table and 'device decode identical to CPU' in table
  assert (tmp_path / 'device_check.txt').read_text().count('device check') == 1


def test_each_part_boxes_add_up_to_its_budget():
  for part in device_check.PARTS:
    boxes = [s.box_s for s in device_check.STAGES if s.part == part]
    assert boxes and sum(boxes) <= device_check.PART_BUDGETS[part], (part, boxes)
    assert part not in (1, 2, 3, 4) or device_check.PART_BUDGETS[part] == 270
  # The headline comes first: environment, numerics and both trainings are part 1.
  assert [s.name for s in device_check.STAGES if s.part == 1] == [
      'environment', 'numerics', 'train_base', 'train_big']


def test_a_failing_stage_is_recorded_and_the_next_one_runs(tmp_path, monkeypatch):
  module = types.ModuleType('fake_device_stages')
  module.boom = lambda ctx: 1 / 0
  module.fine = lambda ctx: {'summary': {'answer': 42}, 'goals': [
      device_check.goal('the answer is 41', 42, False)]}
  monkeypatch.setitem(sys.modules, 'fake_device_stages', module)
  monkeypatch.setattr(device_check, 'STAGES', (
      device_check.Stage('boom', 'fake_device_stages:boom', 10, 10),
      device_check.Stage('fine', 'fake_device_stages:fine', 10, 10)))
  out = tmp_path / 'check.jsonl'
  device_check.main(['--in-process', '--out', str(out)])
  records = _records(out)
  assert [(r['stage'], r['status']) for r in records] == [('boom', 'error'), ('fine', 'ok')]
  assert records[0]['error'] == 'ZeroDivisionError: division by zero'
  table = device_check.table(records)
  assert 'MISSED fine: the answer is 41 (measured 42)' in table
  assert 'division by zero' in table.splitlines()[2]
  # The table on disk was rewritten after each record: it holds both.
  assert 'MISSED fine' in (tmp_path / 'device_check.txt').read_text()


def test_the_first_stage_runs_on_the_least_budget_and_nothing_measured_exits_1(
    tmp_path, monkeypatch, capsys):
  module = types.ModuleType('fake_device_stages')
  module.boom = lambda ctx: 1 / 0
  module.fine = lambda ctx: {'summary': {'answer': 42}}
  monkeypatch.setitem(sys.modules, 'fake_device_stages', module)
  monkeypatch.setattr(device_check, 'STAGES', (
      device_check.Stage('fine', 'fake_device_stages:fine', 10, 10),
      device_check.Stage('later', 'fake_device_stages:fine', 10, 10)))
  out = tmp_path / 'check.jsonl'
  # The least budget allowed: the first stage runs (with 5 s), the next has none left.
  assert device_check.main(['--in-process', '--budget', '5', '--out', str(out)]) == 0
  assert [(r['stage'], r['status']) for r in _records(out)] == [('fine', 'ok'),
                                                                ('later', 'skipped')]
  capsys.readouterr()
  # Every stage failed: the run says so in one line and exits 1, the table still written.
  monkeypatch.setattr(device_check, 'STAGES', (
      device_check.Stage('boom', 'fake_device_stages:boom', 10, 10),))
  out = tmp_path / 'boom.jsonl'
  assert device_check.main(['--in-process', '--out', str(out)]) == 1
  captured = capsys.readouterr()
  assert captured.err.strip().splitlines()[-1].startswith(
      'device_check: nothing was measured: every stage failed or was skipped')
  assert 'boom' in captured.out and 'division by zero' in captured.out


def test_a_stage_runs_in_a_child_process_of_its_own(tmp_path):
  out = tmp_path / 'check.jsonl'
  device_check.main(['--stages', 'environment', '--out', str(out)])
  record = _final(_records(out), 'environment')
  assert record['status'] == 'ok' and record['pid'] != os.getpid()
  assert record['backend'] == 'cpu' and record['versions']['jax']
  assert '===== environment' in (tmp_path / 'device_check.log').read_text()


@pytest.mark.parametrize('argv, says', [
    (['--stages', 'numerics,warp_drive'], "--stages: unknown stage(s) ['warp_drive']"),
    (['--stages', ','], "--stages=',' selects no stage"),
    (['--stages', ''], "--stages='' selects no stage"),
    (['--part', '5'], "--part='5': expected a comma list of 1, 2, 3, 4, sweep, compile_peer"),
    (['--part', 'x'], "--part='x': expected"),
    (['--budget', '-5', '--smoke'], '--budget=-5: expected at least 5 seconds'),
    (['--budget', '0'], '--budget=0: expected at least 5 seconds'),
    # Too little for any stage: refused, not a run whose every stage is "skipped", exit 0.
    (['--budget', '4.9', '--smoke'], '--budget=4.9: expected at least 5 seconds'),
    (['--budget', 'nan', '--smoke'], '--budget=nan: expected at least 5 seconds'),
    # --part is checked with --stages too, and the two are not given together.
    (['--part', '9', '--stages', 'numerics'], "--part='9': expected a comma list"),
    (['--part', '', '--stages', 'numerics'], "--part='': expected a comma list"),
    (['--part', '1', '--stages', 'numerics'], '--part=1 with --stages: give one'),
])
def test_bad_selection_is_refused_in_one_line(argv, says, capsys):
  with pytest.raises(SystemExit) as exit_:
    device_check.main(argv)
  assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_out_is_checked_before_any_stage(tmp_path, capsys):
  (tmp_path / 'a_file').write_text('x')
  folder = tmp_path / 'existing.jsonl'
  folder.mkdir()
  read_only = tmp_path / 'ro'
  read_only.mkdir()
  read_only.chmod(0o555)
  cases = [(folder, 'is a folder'), (tmp_path / 'a_file' / 'c.jsonl', 'is a file, not a folder')]
  if os.access(read_only, os.W_OK):  # root writes anywhere: the mode check cannot be seen
    read_only.chmod(0o755)
  else:
    cases.append((read_only / 'c.jsonl', 'is not writable'))
  for out, says in cases:
    with pytest.raises(SystemExit):
      device_check.main(['--stages', 'environment', '--out', str(out)])
    err = capsys.readouterr().err
    assert says in err and f'--out={out}' in err and 'Traceback' not in err
  assert not (tmp_path / 'device_check.log').exists()  # no stage ran


def test_scratch_is_checked_before_any_stage(tmp_path, capsys):
  afile = tmp_path / 'a_file'
  afile.write_text('x')
  for scratch, says in ((afile, 'is a file; expected a folder'),
                        (afile / 'sub', f'{afile} is a file, not a folder')):
    with pytest.raises(SystemExit) as exit_:
      device_check.main(['--smoke', '--stages', 'environment', '--scratch', str(scratch),
                         '--out', str(tmp_path / 'check.jsonl')])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and 'Traceback' not in err
    assert err.strip().splitlines()[-1].endswith(f'--scratch={scratch}: {says}')
  assert sorted(os.listdir(tmp_path)) == ['a_file'] and afile.read_text() == 'x'


# A stage that records one measurement, starts a grandchild, then hangs: the run is stopped
# in the middle of it.
_HANGING = '''
import os, subprocess, time
from benchmarks.device import check as device_check
def hang(ctx):
  ctx.emit({{'part': 'first', 'status': 'partial', 'summary': {{'value': 1}}}})
  sleeper = subprocess.Popen(['sleep', '120'])
  with open({pids!r}, 'w') as f:
    f.write(f'{{os.getpid()}} {{sleeper.pid}}')
  time.sleep(120)
STAGES = (device_check.Stage('hang', 'hanging_stage:hang', 60, 60),)
'''


def _start_hanging(tmp_path):
  pids = tmp_path / 'pids'
  (tmp_path / 'hanging_stage.py').write_text(textwrap.dedent(_HANGING.format(pids=str(pids))))
  # TMPDIR: the scratch folder a SIGKILLed parent cannot remove stays in the test's folder.
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]), TMPDIR=str(tmp_path))
  parent = subprocess.Popen([sys.executable, SCRIPT, '--stage-table', 'hanging_stage:STAGES',
                             '--stages', 'hang', '--out', str(tmp_path / 'check.jsonl')],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 60
  while not (pids.exists() and pids.read_text().strip()) and time.time() < deadline:
    time.sleep(0.1)
  return parent, [int(p) for p in pids.read_text().split()]


def _gone(pid, within=10.0):
  deadline = time.time() + within
  while time.time() < deadline:
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return True
    with open(f'/proc/{pid}/stat', encoding='utf-8') as f:  # a zombie has ended too
      if f.read().split(') ')[1].startswith('Z'):
        return True
    time.sleep(0.1)
  return False


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_run_keeps_its_records_and_leaves_no_process(tmp_path, signum):
  parent, (child, grandchild) = _start_hanging(tmp_path)
  parent.send_signal(signum)
  stdout, stderr = parent.communicate(timeout=30)
  assert parent.returncode == 128 + signum
  assert _gone(child) and _gone(grandchild)
  records = _records(tmp_path / 'check.jsonl')
  assert [(r.get('part'), r['status']) for r in records] == [('first', 'partial'),
                                                             (None, 'stopped')]
  assert 'hang/first' in stdout and 'hang/first' in (tmp_path / 'device_check.txt').read_text()
  assert stderr.strip().splitlines()[-1].startswith(
      f'device_check: stopped by {signal.Signals(signum).name}; the 2 records')
  assert 'Traceback' not in stderr


def test_a_killed_parent_takes_its_stage_along_and_the_table_is_on_disk(tmp_path):
  parent, (child, grandchild) = _start_hanging(tmp_path)
  parent.kill()  # as the device tool does at its limit: no cleanup runs in the parent
  parent.communicate(timeout=30)
  assert _gone(child)
  os.kill(grandchild, signal.SIGKILL)  # a plain `sleep` asks for no parent-death signal
  assert 'hang/first' in (tmp_path / 'device_check.txt').read_text()


def test_a_smoke_rehearsal_never_writes_the_recorded_results():
  args, _ = device_check._parse(['--smoke'])
  assert args.out == os.path.join(tempfile.gettempdir(), 'device_check_smoke.jsonl')
  args, _ = device_check._parse([])
  assert args.out.endswith(os.path.join('benchmarks', 'results', 'device_check.jsonl'))
