"""The shapes a run compiles (train, dev eval, decode), their sum, and the plan cache.

A TPU run is steady once every shape it uses has compiled: the WMT configs train on one
packed shape and evaluate and decode at two, the embedded default keeps its own.
"""

import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from configs import quickstart, table3, wmt_base, wmt_big, wmt_enfr_big
from t2t_jax.plan import cache as cache_lib, compile as compile_lib, compiles, report, topology

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec('libtpu') is None,
                                  reason='libtpu missing: pip install -r requirements-tpu.txt')
pytestmark = pytest.mark.filterwarnings(
    'ignore:Error reading persistent compilation cache entry:UserWarning')


@pytest.fixture(scope='module')
def v5e():
  return topology.devices(topology.parse('v5e:2x4'))


@needs_libtpu
@pytest.mark.parametrize('config', [wmt_base, wmt_big, wmt_enfr_big, table3],
                         ids=lambda m: m.__name__.split('.')[-1])
def test_the_wmt_configs_compile_one_train_shape_and_two_eval_and_decode_shapes(config, v5e):
  c = config.get_config()
  c.dtype = 'bfloat16'
  run = compile_lib.Run(c, v5e)
  # 25,000 slots of 256 tokens over 8 chips on 2 hosts: 12 rows a host, rounded to 4 chips.
  assert run.train_shapes() == [(96, 256)]
  assert run.eval_shapes() == [(384, 64), (96, 256)]
  assert run.decode_shapes() == [(64, 64, 114), (64, 256, 306)]
  # A training run of the paper's recipes evaluates the dev loss and decodes nothing.
  assert compiles.run_parts(c) == ['train', 'eval']
  assert [label for label, _ in compiles.programs(run, compiles.run_parts(c))] == [
      'train 96x256', 'eval 384x64', 'eval 96x256']
  assert [label for label, _ in compiles.programs(run)][-2:] == [
      'decode 64x64->114', 'decode 64x256->306']


@needs_libtpu
def test_the_embedded_default_keeps_its_shapes(v5e):
  run = compile_lib.Run(quickstart.get_config(), v5e)
  assert run.train_shapes() == [(16, 64)]  # packed, as before
  assert run.eval_shapes() == [(64, 16), (32, 32), (16, 48), (16, 64)]  # bucketed, as before
  assert run.decode_shapes() == [(4, 16, 66), (4, 32, 82), (4, 48, 98), (4, 64, 114)]
  assert compiles.run_parts(quickstart.get_config()) == ['train', 'eval', 'decode']


@pytest.mark.parametrize('changes,parts', [
    (dict(eval_every_steps=0, final_eval_split=''), ['train']),
    (dict(eval_every_steps=0, final_eval_split='test'), ['train', 'eval', 'decode']),
    (dict(eval_every_steps=10, eval_bleu_sentences=5), ['train', 'eval', 'decode']),
    (dict(eval_every_steps=0, eval_bleu_sentences=5), ['train']),
])
def test_run_parts_follow_the_evaluation_keys(changes, parts):
  c = wmt_base.get_config()
  for key, value in changes.items():
    c[key] = value
  assert compiles.run_parts(c) == parts


def _plan(**changes):
  plan = {'all_shapes': True, 'run_compile_parts': ['train', 'eval'], 'train_shape_count': 1,
          'eval_shape_count': 2, 'decode_shape_count': 1, 'train_compile_s': 200.0,
          'eval_compile_s': 15.0, 'decode_compile_s': 30.0, 'run_compile_s': 215.0,
          'run_compile_cpu_s': 301.0, 'plan_cache_hits': 0, 'plan_compile_s': 245.0,
          'train_compiles': [{'batch': [96, 256], 'compile_s': 200.0, 'hbm_bytes': 2 ** 31}],
          'eval_compiles': [{'batch': [776, 32], 'compile_s': 7.0, 'hbm_bytes': 2 ** 29},
                            {'batch': [96, 256], 'compile_s': 8.0, 'hbm_bytes': 2 ** 29}],
          'decode_compiles': [{'inputs': [64, 256], 'outputs': [64, 306], 'compile_s': 30.0,
                               'hbm_bytes': 2 ** 30}]}
  plan.update(changes)
  return '\n'.join(compiles.lines(plan))


def test_the_text_lists_every_shape_and_the_run_total():
  assert _plan() == '\n'.join([
      'train-step compiles (1 batch shape(s) the run uses):',
      '  96 x 256: 200.0 s; HBM 2.00 GiB',
      '  sum: 200.0 s of compiling before every shape has run once',
      'eval-step compiles (2 dev-loss batch shape(s)):',
      '  776 x 32: 7.0 s; HBM 0.50 GiB',
      '  96 x 256: 8.0 s; HBM 0.50 GiB',
      '  sum: 15.0 s',
      'decode compiles (1 beam-search shape(s), sentences x source -> output):',
      '  64 x 256 -> 306: 30.0 s; HBM 1.00 GiB',
      '  sum: 30.0 s',
      'run compiles: 215.0 s (train + eval; 301 CPU s) before the first steady step; the run '
      'does not decode'])
  assert _plan(plan_cache_hits=4, plan_compile_s=3.2).endswith(
      '\n  (4 of 4 read from the plan cache: this plan spent 3.2 s on them; the seconds above '
      'are their first compiles)')


def _square_sum(v5e):
  mesh = jax.sharding.Mesh(v5e, ('data',))
  x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P('data')))
  return jax.jit(lambda a: (a @ a.T).sum()), (x,)


@needs_libtpu
def test_a_second_plan_reads_each_compilation_back_from_the_cache(v5e, tmp_path):
  jitted, args = _square_sum(v5e)
  cache = cache_lib.PlanCache(str(tmp_path / 'plan'))
  first = compile_lib.compile_step('f', jitted, args, {'x': (64, 128)}, cache)
  second = compile_lib.compile_step('f', jitted, args, {'x': (64, 128)}, cache)
  assert (first.cached, second.cached, cache.hits, cache.misses) == (False, True, 1, 1)
  same = ('compile_s', 'compile_cpu_s', 'temp_bytes', 'flops', 'collectives', 'hbm_bytes')
  assert {k: getattr(second, k) for k in same} == {k: getattr(first, k) for k in same}
  # Another program (here: another shape) is another key; a damaged record is a miss.
  (record,) = os.listdir(tmp_path / 'plan')
  (tmp_path / 'plan' / record).write_text('{"compile_s": ', encoding='utf-8')
  third = compile_lib.compile_step('f', jitted, args, {'x': (64, 128)}, cache)
  assert not third.cached and json.loads((tmp_path / 'plan' / record).read_text())['flops']
  y = jax.ShapeDtypeStruct((32, 128), jnp.float32, sharding=args[0].sharding)
  assert not compile_lib.compile_step('f', jitted, (y,), {'x': (32, 128)}, cache).cached


_RECORD = {'compile_s': 2.5, 'compile_cpu_s': 3.0, 'argument_bytes': 10, 'output_bytes': 4,
           'alias_bytes': 0, 'temp_bytes': 7, 'code_bytes': 1, 'flops': 1e9,
           'bytes_accessed': 2e6, 'collectives': [{'kind': 'all-reduce', 'count': 2,
                                                   'bytes': 64}]}


@pytest.mark.parametrize('record', [
    {'compile_s': 1.0},  # another format: the fields StepStats needs are missing
    dict(_RECORD, flops='n/a'), dict(_RECORD, temp_bytes=7.5), dict(_RECORD, code_bytes=True),
    dict(_RECORD, collectives=[{'kind': 'all-reduce'}]), dict(_RECORD, collectives='none'),
    {'does_not_fit': 'out of HBM', 'compile_s': 1.0, 'compile_cpu_s': 1.0},
    [1, 2], 'text'], ids=['other-format', 'flops-text', 'float-bytes', 'bool-bytes',
                          'collective-fields', 'collectives-text', 'refusal-fields', 'list',
                          'string'])
def test_a_cache_record_of_another_format_is_a_miss(tmp_path, record):
  """Issue 43 item 3.5: such records raised TypeError in StepStats and the report."""
  cache = cache_lib.PlanCache(str(tmp_path))
  (tmp_path / 'k.json').write_text(json.dumps(record), encoding='utf-8')
  assert cache.get('k') is None and (cache.hits, cache.misses) == (0, 1)
  refused = {'does_not_fit': 'out of HBM', 'needed_bytes': 2.0 ** 34, 'available_bytes': None,
             'compile_s': 1.0, 'compile_cpu_s': 1}
  for good in (_RECORD, refused):  # what compile._compile writes is read back
    (tmp_path / 'k.json').write_text(json.dumps(good), encoding='utf-8')
    assert cache.get('k') == good
  assert set(_RECORD) == compile_lib._FIELDS  # pylint: disable=protected-access


@pytest.mark.slow  # a whole run (or several compiles): the slow tier
@needs_libtpu
def test_a_plan_sums_the_runs_compiles_and_reruns_from_the_cache(tmp_path):
  config = quickstart.get_config()
  config.vocab_size, config.d_model, config.d_ff, config.num_layers = 96, 32, 64, 1
  config.max_len, config.max_length, config.bucket_lengths = 64, 32, (16, 32)
  config.tokens_per_batch, config.decode_batch_sentences = 1024, 8
  first = report.make_plan(config, 'v5e:2x4', search_batch=False, cache_dir=str(tmp_path))
  assert [c['batch'] for c in first['eval_compiles']] == [[64, 16], [32, 32]]
  assert [c['inputs'] + c['outputs'] for c in first['decode_compiles']] == [[8, 16, 8, 64],
                                                                           [8, 32, 8, 64]]
  assert first['run_compile_parts'] == ['train', 'eval', 'decode']
  assert first['run_compile_s'] == pytest.approx(
      first['train_compile_s'] + first['eval_compile_s'] + first['decode_compile_s'], abs=0.1)
  assert first['steps']['eval']['compile_s'] == first['eval_compiles'][-1]['compile_s']
  assert first['plan_cache_hits'] == 0
  again = report.make_plan(config, 'v5e:2x4', search_batch=False, cache_dir=str(tmp_path))
  assert again['plan_cache_hits'] == 5 and again['run_compile_s'] == first['run_compile_s']
  assert again['plan_compile_s'] < first['plan_compile_s']
  strip = lambda p: {k: v for k, v in p.items() if k not in (  # noqa: E731
      'plan_cache_hits', 'plan_compile_s', 'train_compiles', 'eval_compiles', 'decode_compiles')}
  assert strip(again) == strip(first)
