"""benchmarks/shared/harness.py: timing with a fake clock, the interleaving order, summaries, the
records, and that no other benchmark reads a clock of its own."""

import ast
import json
import os
import re

import pytest

from benchmarks.shared import harness
from conftest import ROOT

# Every Python file of benchmarks/ (all its folders) and of tours/, as paths from the root.
MEASURING = ('benchmarks', 'tours')
HARNESS = os.path.join('benchmarks', 'shared', 'harness.py')


class FakeClock:
  """A wall clock that moves only when told: each system call advances it by its duration."""

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now

  def advance(self, seconds):
    self.now += seconds


@pytest.fixture
def clock(monkeypatch):
  fake = FakeClock()
  monkeypatch.setattr(harness, '_wall_clock', fake)
  return fake


def _recording_systems(calls, clock, durations):
  """{name: call} that appends name to `calls` and takes durations[name] seconds."""
  def make(name):
    def call():
      calls.append(name)
      clock.advance(durations[name])
    return call
  return {name: make(name) for name in durations}


def test_interleave_rotates_the_order_each_round(clock):
  calls = []
  systems = _recording_systems(calls, clock, {'a': 1.0, 'b': 2.0, 'c': 4.0})
  times = harness.interleave(systems, rounds=4, warmup=1, repeats={'b': 2})
  assert calls == ['a', 'b', 'c',                # warmup, in the given order
                   'a', 'b', 'b', 'c',           # round 0
                   'b', 'b', 'c', 'a',           # round 1: rotated left by one
                   'c', 'a', 'b', 'b',           # round 2
                   'a', 'b', 'b', 'c']           # round 3: 3 mod 3 = 0
  assert list(times) == ['a', 'b', 'c']
  assert times == {'a': [1.0] * 4, 'b': [2.0] * 8, 'c': [4.0] * 4}


def test_interleave_repeats_for_all_and_no_warmup(clock):
  calls = []
  systems = _recording_systems(calls, clock, {'x': 0.5, 'y': 1.5})
  times = harness.interleave(systems, rounds=2, warmup=0, repeats=2)
  assert calls == ['x', 'x', 'y', 'y', 'y', 'y', 'x', 'x']
  assert harness.summaries(times) == {
      'x': {'median_s': 0.5, 'min_s': 0.5, 'max_s': 0.5, 'n': 4},
      'y': {'median_s': 1.5, 'min_s': 1.5, 'max_s': 1.5, 'n': 4}}
  assert harness.speedups(times, 'y') == {'x': 3.0, 'y': 1.0}


def test_interleave_records_the_seconds_a_system_measured_itself(clock):
  reported = iter([0.25, 0.75, 0.5])

  def child():  # e.g. a peer in another process: the round trip must not count
    clock.advance(10.0)
    return harness.Measured(next(reported))
  times = harness.interleave({'child': child}, rounds=3, warmup=0)
  assert times == {'child': [0.25, 0.75, 0.5]}


def test_median_time_skips_the_warmup(clock):
  durations = iter([9.0, 9.0, 3.0, 1.0, 2.0])  # two warmup calls, then three timed
  summary = harness.median_time(lambda: clock.advance(next(durations)), repeats=3, warmup=2)
  assert summary == {'median_s': 2.0, 'min_s': 1.0, 'max_s': 3.0, 'n': 3}


def test_summarize_by_hand():
  assert harness.summarize([3.0, 1.0, 10.0, 2.0]) == {
      'median_s': 2.5, 'min_s': 1.0, 'max_s': 10.0, 'n': 4}  # even: mean of 2 and 3
  assert harness.summarize([0.3]) == {'median_s': 0.3, 'min_s': 0.3, 'max_s': 0.3, 'n': 1}


def test_speedups_and_ratio():
  times = {'ref': [2.0, 2.0, 4.0], 'fast': [1.0, 1.0], 'slow': [4.0, 3.0, 5.0]}
  assert harness.speedups(times, 'ref') == {'ref': 1.0, 'fast': 2.0, 'slow': 0.5}
  assert harness.ratio(3.0, 2.0) == 1.5
  assert harness.ratio(None, 2.0) is None and harness.ratio(1.0, 0) is None


def test_stopwatch_accumulates_its_intervals(clock):
  sw = harness.Stopwatch()
  with sw:
    clock.advance(2.0)
    assert sw.seconds == 2.0  # running: the current interval counts
  clock.advance(50.0)  # stopped: not counted
  with sw:
    clock.advance(0.5)
  assert sw.seconds == 2.5
  with pytest.raises(RuntimeError):
    sw.stop()
  with harness.timed() as t:
    clock.advance(1.25)
  assert t.seconds == 1.25 and t.cpu_seconds >= 0 and t.children_cpu_seconds >= 0
  assert harness.time_call(lambda x: clock.advance(x) or 'done', 4.0) == ('done', 4.0)


def test_timestamp_formats():
  assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d', harness.timestamp())
  assert re.fullmatch(r'\d{8}T\d{6}', harness.timestamp(compact=True))


def test_emitter_writes_one_json_line_with_the_machine(tmp_path, capsys):
  path = tmp_path / 'sub' / 'out.jsonl'
  emit = harness.Emitter(str(path))
  returned = emit({'name': 'unit', 'value': 1.5, 'odd': object()})
  lines = path.read_text().splitlines()
  assert len(lines) == 1
  assert capsys.readouterr().out == lines[0] + '\n'
  record = json.loads(lines[0])
  assert record['name'] == 'unit' and record['value'] == 1.5
  assert isinstance(record['odd'], str)  # not JSON: written as its str
  assert re.fullmatch(r'\d{4}-\d\d-\d\dT.*', record['date'])
  assert record['load_average'] is None or len(record['load_average']) == 3
  machine = record['machine']
  for key in ('cpu_model', 'cpu_count', 'cpu_usable', 'memory', 'platform', 'arch', 'versions',
              'jax_devices', 'env', 'load_average_at_start'):
    assert key in machine, key
  assert machine['cpu_count'] >= 1 and 'python' in machine['versions']
  assert set(machine['env']) <= set(harness.ENV_VARS)
  assert returned['machine'] == machine
  emit({'name': 'second', 'date': 'kept'})
  assert json.loads(path.read_text().splitlines()[1])['date'] == 'kept'


# Reading a clock: only benchmarks/shared/harness.py may (the names as attributes of `time`, `os`
# and `resource`, or imported from them).
CLOCKS = {'time': {'perf_counter', 'perf_counter_ns', 'time', 'time_ns', 'monotonic',
                   'monotonic_ns', 'process_time', 'process_time_ns', 'thread_time',
                   'thread_time_ns'},
          'os': {'times'}, 'resource': {'getrusage'}}


def _clock_uses(tree):
  for node in ast.walk(tree):
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.attr in CLOCKS.get(node.value.id, ())):
      yield f'line {node.lineno}: {node.value.id}.{node.attr}'
    elif isinstance(node, ast.ImportFrom) and node.module in CLOCKS:
      for alias in node.names:
        if alias.name in CLOCKS[node.module]:
          yield f'line {node.lineno}: from {node.module} import {alias.name}'


def test_no_benchmark_reads_a_clock_but_the_harness():
  offenders = []
  names = sorted(os.path.relpath(os.path.join(folder, n), ROOT) for top in MEASURING
                 for folder, _, files in os.walk(os.path.join(ROOT, top)) for n in files
                 if n.endswith('.py'))
  assert HARNESS in names and len(names) > 10
  for name in names:
    with open(os.path.join(ROOT, name), encoding='utf-8') as f:
      uses = list(_clock_uses(ast.parse(f.read(), name)))
    if name == HARNESS:
      assert uses, 'the check finds nothing: it would pass whatever the others do'
    else:
      offenders += [f'{name} {use}' for use in uses]
  assert offenders == []


def test_run_pinned_runs_every_job_at_most_one_per_slot(tmp_path):
  from benchmarks.shared import common
  # Each job appends its start and end to one file; with two slots no three overlap.
  trace = tmp_path / 'trace'
  script = f'echo start >> {trace}; sleep 0.2; echo end >> {trace}; echo out $0; exit $0'
  jobs = [(['sh', '-c', script, str(code)], str(tmp_path / f'{i}.log'))
          for i, code in enumerate([0, 3, 0])]
  codes = common.run_pinned(jobs, ['', ''], cwd=str(tmp_path), poll_s=0.01)
  assert codes == {str(tmp_path / '0.log'): 0, str(tmp_path / '1.log'): 3,
                   str(tmp_path / '2.log'): 0}
  assert (tmp_path / '1.log').read_text() == 'out 3\n'
  depth, deepest = 0, 0
  for event in trace.read_text().split():
    depth += 1 if event == 'start' else -1
    deepest = max(deepest, depth)
  assert deepest == 2
