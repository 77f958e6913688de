"""--mode=plan: the real TPU compiler (libtpu) compiles our steps for slices that are not here.

The tiny model compiles in seconds; the paper's configs are planned in benchmarks/scale/plan_tpu.py.
"""

import importlib.util
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import quickstart, wmt_base
from conftest import run_main
from t2t_jax.model import transformer as model
from t2t_jax.plan import analytic, chips, compile as compile_lib, hlo, report
from t2t_jax.plan import mode as plan_mode, roofline, topology


# The tests that compile need libtpu (requirements-tpu.txt, which .ci/run installs).
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec('libtpu') is None,
                                  reason='libtpu missing: pip install -r requirements-tpu.txt')

# The tests' shared compilation cache (conftest.py) also stores these TPU executables, and a
# compile-only TPU client cannot load one back: JAX warns and compiles again (no --mode=plan
# run turns the cache on).
pytestmark = pytest.mark.filterwarnings(
    'ignore:Error reading persistent compilation cache entry:UserWarning')
# What the TPU compiler reported of each program, kept between runs beside that cache as
# `--mode=plan` keeps it (`plan.cache`, keyed by the lowered module, devices, flags and the
# versions of jax, jaxlib and libtpu): a warm run compiles only the programs a change touched
# (test_plan_shapes.py checks that a second plan reads them back).
_PLAN_CACHE = plan_mode.cache_dir(None)


def _tiny(**overrides):
  c = quickstart.get_config()
  c.vocab_size, c.d_model, c.d_ff, c.num_heads, c.num_layers = 96, 32, 64, 4, 1
  c.max_len, c.max_length, c.bucket_lengths, c.tokens_per_batch = 64, 32, (16, 32), 1024
  c.decode_batch_sentences = 8
  for k, v in overrides.items():
    setattr(c, k, v)
  return c


@pytest.fixture(scope='module')
def tiny_plan():
  return report.make_plan(_tiny(), 'v5e:2x4', search_batch=False, cache_dir=_PLAN_CACHE)


@needs_libtpu
def test_tiny_train_step_compiles_for_a_v5e_slice(tiny_plan):
  p = tiny_plan
  assert (p['topology'], p['chip'], p['chips'], p['processes']) == ('v5e:2x4', 'TPU v5 lite',
                                                                     8, 2)
  # 1024 tokens at the 32-token bucket: 32 rows, 16 per host, 4 per chip.
  assert p['train_batch'] == [32, 32]
  assert 0 < p['hbm_bytes_per_chip'] < p['hbm_capacity_bytes_per_chip'] == 16 * 2 ** 30
  assert p['fits'] is True
  # Data parallelism: the gradients (and metric sums) all-reduced, nothing gathered.
  kinds = {c['kind']: c for c in p['collectives']}
  assert set(kinds) == {'all-reduce'}
  params = p['memory']['params']  # float32, replicated: every chip holds all of them
  n = model.count_params(model.param_shapes(model.TransformerConfig.from_config(_tiny())))
  assert params == 4 * n
  assert params <= kinds['all-reduce']['bytes'] < params + 1024
  assert p['memory']['optimizer_state'] >= 2 * params  # Adam's two moments
  # XLA counts every op, the analytic count only the matmuls: at d_model 32 the elementwise
  # work is as large as the matmuls (at base size XLA is 3% above; benchmarks/scale/plan_tpu.py).
  assert 1.0 <= p['flops_per_step'] / p['analytic_flops_per_step'] < 2.5
  assert p['step_time_s'] > 0 and p['tokens_per_s'] == pytest.approx(32 * 32 / p['step_time_s'])
  assert set(p['steps']) == {'train', 'eval', 'decode'}
  assert p['steps']['decode']['shapes'] == {'inputs': [8, 32], 'outputs': [8, 64]}
  # The state is donated: the train step's outputs alias its parameter and optimizer inputs.
  train = p['steps']['train']
  assert train['alias_bytes'] >= params + p['memory']['optimizer_state']
  # Packed rows (the embedded default's): one batch shape, one train-step compilation.
  assert [c['batch'] for c in p['train_compiles']] == [[32, 32]]
  assert p['train_shape_count'] == 1 and p['train_compile_s'] == train['compile_s']
  json.dumps(p)  # --output writes it as is


@pytest.mark.slow  # a whole run (or several compiles): the slow tier
@needs_libtpu
def test_every_bucket_shape_is_compiled_and_timed():
  p = report.make_plan(_tiny(pack_examples=False), 'v5e:2x4', search_batch=False)
  # 1024 tokens at 16 tokens a row: 64 rows; the largest's compile is the train step's.
  compiles = p['train_compiles']
  assert [c['batch'] for c in compiles] == [[64, 16], [32, 32]] and p['all_shapes']
  assert p['train_shape_count'] == 2
  assert compiles[1]['compile_s'] == p['steps']['train']['compile_s']
  assert p['train_compile_s'] == pytest.approx(sum(c['compile_s'] for c in compiles), abs=0.1)
  assert all(0 < c['hbm_bytes'] <= p['hbm_bytes_per_chip'] for c in compiles)
  text = report.format_plan(p)
  assert 'train-step compiles (2 batch shape(s) the run uses):\n  64 x 16: ' in text
  assert f'\n  sum: {p["train_compile_s"]:.1f} s of compiling before every shape' in text
  quick = dict(p, all_shapes=False, train_compiles=compiles[-1:])  # all_shapes=False's plan
  assert "(the largest of the run's 2 batch shape(s) only):\n  32 x 32: " in (
      report.format_plan(quick))


def test_collectives_are_read_from_hlo_text():
  text = '\n'.join([
      '%all-reduce.1 = (f32[], f32[128,4]{1,0:T(8,128)}) all-reduce(%a, %b), channel_id=1',
      '  ROOT %ag = bf16[8,16]{1,0} all-gather(bf16[1,16]{1,0} %x), dimensions={0}',
      '%ars = f32[64]{0} all-reduce-start(f32[64]{0} %g), channel_id=3',
      '%ard = f32[64]{0} all-reduce-done(f32[64]{0} %ars)',
      '%ags = ((s32[2]{0}), s32[16]{0}) all-gather-start(s32[2]{0} %y), dimensions={0}',
      '%gte = f32[] get-tuple-element(%all-reduce.1), index=0',
  ])
  assert hlo.collectives(text) == [
      {'kind': 'all-reduce', 'count': 2, 'bytes': 4 + 128 * 4 * 4 + 64 * 4},
      {'kind': 'all-gather', 'count': 2, 'bytes': 8 * 16 * 2 + 16 * 4}]
  assert hlo.array_bytes('(pred[3], f64[2,2]{1,0})') == 3 + 32


def test_roofline_of_a_step():
  v5e = chips.CHIPS['v5e']
  collectives = [{'kind': 'all-reduce', 'count': 1, 'bytes': 400e6}]
  t = roofline.step_seconds(197e12, 819e9 / 2, collectives, 8, v5e)
  assert t['compute_s'] == pytest.approx(1.0) and t['hbm_s'] == pytest.approx(0.5)
  # A ring all-reduce moves 2 (n-1)/n of the bytes per chip.
  assert t['ici_s'] == pytest.approx(2 * 7 / 8 * 400e6 / 400e9)
  assert t['step_s'] == pytest.approx(1.0 + t['ici_s']) and t['bound'] == 'compute'
  assert roofline.collective_seconds(collectives, 1, v5e) == 0.0


def test_analytic_flops_of_the_base_model():
  cfg = model.TransformerConfig.from_config(wmt_base.get_config())
  rows, length, n, d, d_ff, vocab = 100, 256, 6, 512, 2048, 37000
  tokens = rows * length
  weights = n * (4 * d * d + 2 * d * d_ff) + n * (8 * d * d + 2 * d * d_ff) + vocab * d
  attention = rows * n * 3 * 4 * length * length * d  # QK^T and AV: 2 x 2 L^2 d per layer
  expected = 3 * (2 * tokens * weights + attention)  # forward + backward (2x forward)
  assert analytic.train_flops(cfg, rows, length, length) == expected
  # The usual shorthand, 6 x parameters x tokens, is within a few percent at base size.
  params = model.count_params(model.param_shapes(cfg))
  assert analytic.train_flops(cfg, rows, length, length) / (6 * params * tokens) == (
      pytest.approx(1.0, abs=0.25))
  # Multi-query: W^K and W^V project to one head of d_k, d_v (not h of them); scores unchanged.
  mqa = analytic.train_flops(cfg.replace(num_kv_heads=1), rows, length, length)
  kv_saved = 2 * tokens * (n + 2 * n) * 2 * d * (d - 64)  # enc self, dec self + cross
  assert expected - mqa == 3 * kv_saved


def test_analytic_flops_match_xla_on_the_forward_pass():
  """XLA's own count (CPU) of a forward pass: the matmuls plus a few percent of elementwise.
  Of scanned layer stacks (`scan_layers`) XLA counts one layer each: `loop_scale` adds the
  others back."""
  cfg = model.TransformerConfig(vocab_size=512, d_model=128, d_ff=1024, num_heads=4, d_k=32,
                                d_v=32, num_layers=3, max_len=64, deterministic=True,
                                scan_layers=True)
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  ids = jnp.ones((4, 32), jnp.int32)

  def flops(c):
    forward = jax.jit(lambda p, x, y: model.Transformer(c).apply({'params': p}, x, y))
    cost = forward.lower(params, ids, ids).compile().cost_analysis()
    return (cost[0] if isinstance(cost, (list, tuple)) else cost)['flops']

  unrolled = flops(cfg.replace(scan_layers=False))
  ratio = unrolled / analytic.forward_flops(cfg, 4, 32, 32)
  assert 1.0 <= ratio < 1.1, ratio
  assert report.loop_scale(cfg.replace(scan_layers=False), 4, 32) == 1.0
  scanned = flops(cfg) * report.loop_scale(cfg, 4, 32)
  assert scanned == pytest.approx(unrolled, rel=0.02)


def test_out_of_memory_messages_are_parsed():
  e = compile_lib._parse_out_of_memory(
      'Ran out of memory on HBM, the total memory required for HLO temporaries (27.71G) '
      'exceeds available HBM (15.75G).\nmore')
  assert e.needed_bytes == pytest.approx(27.71 * 2 ** 30)
  assert e.available_bytes == pytest.approx(15.75 * 2 ** 30)
  e = compile_lib._parse_out_of_memory('Used 20.5G of 15.75G hbm. Exceeded by 4.75G')
  assert (e.needed_bytes, e.available_bytes) == (20.5 * 2 ** 30, 15.75 * 2 ** 30)
  assert compile_lib._parse_out_of_memory('something else').needed_bytes is None


@needs_libtpu
def test_a_batch_too_big_for_the_chip_is_refused_by_the_compiler():
  # The embedded default's model on 4M tokens: 28 GiB of temporaries per chip (the compiler
  # refuses it in seconds).
  config = quickstart.get_config()
  config.tokens_per_batch = 2 ** 22
  plan = report.make_plan(config, 'v5e:2x4', search_batch=False, cache_dir=_PLAN_CACHE)
  assert plan['fits'] is False and plan['hbm_bytes_per_chip'] > 16 * 2 ** 30
  assert 'HBM' in plan['compiler_message']
  with pytest.raises(report.PlanError, match=(
      r"^tokens_per_batch=4194304 on v5e:2x4 needs [\d.]+ GiB of HBM per chip, [\d.]+ GiB "
      r"more than TPU v5 lite's 16.00 GiB; drop --search_batch=false to find the largest "
      r'batch that fits$')):
    report.check_fits(plan)


def _unfit(**changes):
  plan = {'fits': False, 'hbm_capacity_bytes_per_chip': 16 * 2 ** 30, 'chip': 'TPU v5 lite',
          'hbm_bytes_per_chip': 20 * 2 ** 30, 'tokens_per_batch': 25000,
          'topology': 'v5e:2x4', 'batch_searched': True, 'largest_tokens_per_batch': 18432}
  plan.update(changes)
  with pytest.raises(report.PlanError) as e:
    report.check_fits(plan)
  return str(e.value)


def test_a_config_that_does_not_fit_says_by_how_much_and_what_fits():
  assert _unfit() == ("tokens_per_batch=25000 on v5e:2x4 needs 20.00 GiB of HBM per chip, "
                      "4.00 GiB more than TPU v5 lite's 16.00 GiB; the largest batch that fits "
                      'is --config.tokens_per_batch=18432')
  assert _unfit(largest_tokens_per_batch=None).endswith(
      'no batch of one row per chip fits: try --config.dtype=bfloat16, '
      '--config.remat_policy=full or --config.shard_optimizer_state=True')
  assert _unfit(hbm_bytes_per_chip=None).startswith(
      "tokens_per_batch=25000 on v5e:2x4 does not fit TPU v5 lite's 16.00 GiB of HBM;")
  report.check_fits({'fits': True})  # fits: nothing to say


def test_a_search_that_stopped_says_at_least():
  plan = {'batch_searched': True, 'largest_tokens_per_batch': 1453056,
          'batch_search_converged': False, 'smallest_unfit_tokens_per_batch': 2680320}
  assert report._largest_line(plan) == ('largest tokens_per_batch that fits: at least '
                                        '1,453,056 (search stopped; 2,680,320 does not fit)')
  assert report._largest_line({**plan, 'batch_search_converged': True}) == (
      'largest tokens_per_batch that fits: 1,453,056 (found by compiling)')
  assert report._largest_line({**plan, 'batch_searched': False}).endswith(': not searched')
  assert _unfit(largest_tokens_per_batch=18432, batch_search_converged=False).endswith(
      '; --config.tokens_per_batch=18432 fits (the search stopped before finding the largest)')
  assert _unfit(largest_tokens_per_batch=None, batch_search_converged=False,
                smallest_unfit_tokens_per_batch=32768).endswith(
      '; the search stopped before any batch fitted, at --config.tokens_per_batch=32768: try '
      'a smaller one')


@pytest.mark.parametrize('name,message', [
    ('v9:2x2', "unknown topology 'v9:2x2'; accepted: GENERATION:SHAPE with GENERATION one of "
               'v4, v5e, v5p, v6e'),
    ('v5e', "unknown topology 'v5e'"),
    ('v4:2x2', "topology 'v4:2x2': v4 slices have 3 positive dimensions"),
])
def test_unknown_topologies_list_the_accepted_names(name, message):
  with pytest.raises(topology.TopologyError, match='^' + message.replace('(', r'\(')):
    topology.parse(name)


def test_missing_libtpu_names_the_requirements_file(monkeypatch):
  monkeypatch.setattr(topology.importlib.util, 'find_spec', lambda name: None)
  with pytest.raises(topology.TopologyError,
                     match=r'needs|libtpu, which is not installed: pip install -r '
                           r'requirements-tpu.txt$'):
    topology.check_compiler()


@pytest.mark.slow
@needs_libtpu
def test_plan_mode_prints_writes_json_and_keeps_libtpu_quiet(tmp_path):
  out = tmp_path / 'plan.json'
  args = ['--mode=plan', '--topology=v5e:2x4', f'--output={out}', '--search_batch=false',
          '--config=configs/quickstart.py', '--config.vocab_size=96', '--config.d_model=32',
          '--config.d_ff=64', '--config.num_layers=1', '--config.tokens_per_batch=1024',
          '--config.bucket_lengths=(16,32)', '--config.max_length=32', '--config.max_len=64']
  result = run_main(*args)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.startswith('plan for configs/quickstart.py on v5e:2x4: 8 x TPU v5 lite')
  assert 'collectives per step: all-reduce x1' in result.stdout
  assert 'TPU_ACCELERATOR_TYPE' not in result.stderr + result.stdout
  assert 'TPU_WORKER_HOSTNAMES' not in result.stderr + result.stdout
  plan = json.loads(out.read_text())
  for key in ('topology', 'chips', 'processes', 'hbm_bytes_per_chip',
              'hbm_capacity_bytes_per_chip', 'flops_per_step', 'analytic_flops_per_step',
              'collectives', 'step_time_s', 'tokens_per_s', 'fits'):
    assert key in plan
  # Nothing is overwritten: the same --output again is refused before any compilation.
  again = run_main(*args)
  assert again.returncode == 1
  assert again.stderr.strip().splitlines()[-1] == (
      f'error: --output={out} already exists; choose another file or remove it')
  assert json.loads(out.read_text()) == plan


def test_plan_mode_needs_a_topology():
  result = run_main('--mode=plan')
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith(
      'error: --mode=plan needs --topology=NAME, e.g. v4:2x2x1')


@needs_libtpu
@pytest.mark.parametrize('accum', [1, 2])
def test_zero_sharding_shows_in_the_plan(accum):
  """shard_optimizer_state: Adam's moments split 8 ways and the updated parameters
  all-gathered (with accumulation too). How the gradients are summed is the TPU compiler's
  choice: for this tiny model it turns the reduce-scatter into an all-reduce and keeps a
  slice (the CPU compiler keeps the reduce-scatter, tests/runtime/test_parallel.py)."""
  p = report.make_plan(_tiny(shard_optimizer_state=True, grad_accum_steps=accum), 'v5e:2x4',
                       search_batch=False, cache_dir=_PLAN_CACHE)
  params = p['memory']['params']
  assert p['memory']['optimizer_state'] < 2 * params / 4  # 1/8 of the two moments, or so
  kinds = {c['kind']: c for c in p['collectives']}
  assert 0.9 * params <= kinds['all-gather']['bytes'] <= params  # (the sharded leaves)
  assert {'all-reduce', 'reduce-scatter'} & set(kinds)
  assert set(p['steps']) == ({'train'} if accum == 1 else {'train_gradients', 'train_apply'}
                             ) | {'eval', 'decode'}
  assert p['fits'] and p['tokens_per_s'] == pytest.approx(accum * 32 * 32 / p['step_time_s'])


@needs_libtpu
def test_plan_meshes_compiles_each_layout_and_chooses_the_fastest_that_fits():
  from t2t_jax.plan import layouts  # pylint: disable=import-outside-toplevel
  result = layouts.plan_layouts(_tiny(), 'v5e:2x4', ['data:-1', 'fsdp:-1', 'tensor:3'],
                                _PLAN_CACHE)
  rows = {r['mesh']: r for r in result['layouts']}
  assert rows['data:-1']['fits'] and rows['fsdp:-1']['fits']
  assert rows['fsdp:-1']['memory']['params'] < rows['data:-1']['memory']['params'] / 7
  assert {c['kind'] for c in rows['data:-1']['collectives']} == {'all-reduce'}
  assert 'all-gather' in {c['kind'] for c in rows['fsdp:-1']['collectives']}
  assert rows['tensor:3']['error'].startswith("config key 'mesh': 'tensor:3' needs 3 devices")
  faster = min(('data:-1', 'fsdp:-1'), key=lambda m: rows[m]['step_time_s'])
  assert result['chosen'] == faster
  assert layouts.format_layouts(result).splitlines()[-1].startswith(f'chosen: {faster} (')


def test_the_layout_chosen_is_the_fastest_that_fits_and_the_others_are_named():
  # configs/wmt_1b.py on v5e:2x4, as planned (benchmarks/results/plan_meshes_wmt_1b_v5e_2x4.json)
  from t2t_jax.plan import layouts  # pylint: disable=import-outside-toplevel
  gib = 2 ** 30
  rows = [{'mesh': 'data:-1', 'fits': False, 'hbm_bytes_per_chip': 23.8 * gib},
          {'mesh': 'fsdp:-1', 'fits': False, 'hbm_bytes_per_chip': 24.3 * gib},
          {'mesh': 'data:-1,tensor:4', 'fits': True, 'hbm_bytes_per_chip': 13.5 * gib,
           'hbm_capacity_bytes_per_chip': 16 * gib, 'step_time_s': 0.309},
          {'mesh': 'data:-1,fsdp:2,tensor:2', 'fits': True, 'hbm_bytes_per_chip': 13.2 * gib,
           'hbm_capacity_bytes_per_chip': 16 * gib, 'step_time_s': 0.283}]
  assert layouts._choice(rows) == {  # pylint: disable=protected-access
      'chosen': 'data:-1,fsdp:2,tensor:2',
      'reason': 'data:-1,fsdp:2,tensor:2 fits (13.20 GiB of 16.00 GiB per chip) with the '
                'shortest roofline step of the 2 that fit (283.0 ms); data:-1, fsdp:-1 do not '
                'fit'}
  assert layouts._choice(rows[:2])['chosen'] is None  # pylint: disable=protected-access


def test_a_step_too_big_for_a_chip_crosses_the_plan_process_with_its_numbers():
  import pickle  # pylint: disable=import-outside-toplevel
  error = pickle.loads(pickle.dumps(compile_lib.DoesNotFit('12 GiB more', 28.0 * 2 ** 30,
                                                           16.0 * 2 ** 30)))
  assert str(error) == '12 GiB more' and error.needed_bytes == 28.0 * 2 ** 30
  assert error.available_bytes == 16.0 * 2 ** 30
