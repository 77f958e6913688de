"""`profile_steps` (runtime/profiling.py, issue 63, 2): a trace of exactly the asked steps, each
named, in TensorBoard's and Perfetto's formats; through main.py, of the asked train steps."""

import glob
import gzip
import json
import os

import jax
import jax.numpy as jnp
import pytest
from conftest import TINY, read_metrics, run_main

from t2t_jax import choices
from t2t_jax.choices import ConfigError
from t2t_jax.runtime import profiling


def _steps_in(folder):
  """{step number: count} of the 'train' step slices in the Perfetto trace under `folder`."""
  [trace] = glob.glob(os.path.join(folder, '**', '*.trace.json.gz'), recursive=True)
  with gzip.open(trace, 'rt') as f:
    events = json.load(f)
  events = events['traceEvents'] if isinstance(events, dict) else events
  steps = {}
  for e in events:
    if e.get('name') == 'train' and 'step_num' in e.get('args', {}):
      steps[int(e['args']['step_num'])] = steps.get(int(e['args']['step_num']), 0) + 1
  return steps


def test_only_the_asked_steps_are_traced_each_named(tmp_path):
  profiler = profiling.StepProfiler('2:3', str(tmp_path / 'profile'))
  f = jax.jit(lambda x: jnp.tanh(x) @ x.T)
  for number in range(1, 6):
    with profiler.step(number) as done:
      done(f(jnp.ones((16, 16)) * number))
    assert profiler.active == (number == 2)
  assert sorted(_steps_in(tmp_path / 'profile')) == [2, 3]
  assert glob.glob(str(tmp_path / 'profile' / '**' / '*.xplane.pb'), recursive=True)
  nothing = profiling.StepProfiler('', str(tmp_path / 'none'))
  with nothing.step(1) as done:
    done(f(jnp.ones((4, 4))))
  assert not os.path.exists(tmp_path / 'none')


@pytest.mark.parametrize('value', ['3', '0:2', '5:4', 'a:b', '1:2:3'])
def test_a_bad_span_is_refused_naming_the_key(value):
  with pytest.raises(ConfigError, match=r"^config key 'profile_steps': expected 'START:END'"):
    choices.parse_profile_steps(value)
  assert choices.parse_profile_steps(' 4 : 6 ') == (4, 6)


@pytest.mark.slow
def test_main_traces_the_asked_train_steps(corpus, tmp_path):
  run = tmp_path / 'run'
  result = run_main(f'--workdir={run}', f'--config.local_corpus_dir={corpus}', *TINY,
                    '--config.num_train_steps=6', '--config.eval_every_steps=0',
                    '--config.profile_steps=3:4')
  assert result.returncode == 0, result.stderr[-3000:]
  assert sorted(_steps_in(run / 'profile')) == [3, 4]
  # The log's model FLOP rate and MFU (against this CPU's measured matmul rate).
  logged = [m for m in read_metrics(run) if 'loss' in m][-1]
  assert logged['model_tflops_per_s'] > 0 and 0 < logged['mfu'] < 1
  assert 'MFU ' in result.stderr


@pytest.mark.slow
def test_decode_traces_its_batches_beside_its_output(tiny_workdir, tmp_path):
  source = tmp_path / 'in.en'
  source.write_text(''.join(f'line {i} of the input\n' for i in range(12)), encoding='utf-8')
  out = tmp_path / 'out.es'
  result = run_main('--mode=decode', f'--workdir={tiny_workdir}', f'--input={source}',
                    f'--output={out}', '--config.profile_steps=1:1',
                    '--config.decode_batch_sentences=4')
  assert result.returncode == 0, result.stderr[-3000:]
  assert len(out.read_text().splitlines()) == 12
  assert glob.glob(str(tmp_path / 'out.es.profile' / '**' / '*.trace.json.gz'), recursive=True)
  refused = run_main('--mode=decode', f'--workdir={tiny_workdir}', '--config.profile_steps=1:1',
                     input='a line\n')
  assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
      'error: --config.profile_steps with --mode=decode traces the batches of a file into '
      'OUTPUT.profile/: give --input=FILE and --output=OUTPUT')
