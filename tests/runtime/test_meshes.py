"""Meshes beyond data parallelism (runtime/meshes.py, sharded_step.py): on the 8-device CPU
mesh, every layout trains as one device does (one step's loss and gradients, 20 steps' losses,
the decoded outputs), places its parameters and optimizer state where the rules say, moves
its checkpoints to any other layout bitwise, and refuses what it would not honour."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from t2t_jax import choices
from t2t_jax.model import beam_decode, logical_axes, transformer as model_lib
from t2t_jax.runtime import checkpoint, meshes, parallel
from checkpoint_helpers import tiny_config

CFG = model_lib.TransformerConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=4,
                                  num_layers=1, max_len=32, dropout_rate=0.1)
# data:8 (the shard_map step) has a test of its own, without dropout.
LAYOUTS = ('one', 'fsdp:8', 'data:2,tensor:4', 'data:2,fsdp:2,tensor:2')
STEPS = 20


def _mesh(layout):
  return meshes.make('', jax.devices()[:1]) if layout == 'one' else meshes.make(layout)


def _batches():
  rng = np.random.RandomState(0)
  return [{'inputs': rng.randint(2, 64, (16, 12)).astype(np.int32),
           'targets': rng.randint(2, 64, (16, 10)).astype(np.int32)} for _ in range(4)]


@pytest.fixture(scope='module')
def trained():
  """Per layout: 20 steps' losses, the first step's gradients, the final state."""
  out = {}
  optimizer = optax.adam(1e-3)
  for layout in LAYOUTS:
    mesh = _mesh(layout)
    # Dropout on: the sharded steps draw one device's masks (data:8 draws one per device).
    cfg = CFG
    state = parallel.create_train_state(cfg, optimizer, 0, mesh)
    step = parallel.make_train_step(cfg, optimizer, mesh, label_smoothing=0.1, seed=0)
    batches = [parallel.shard_batch(b, mesh) for b in _batches()]
    losses = []
    for i in range(STEPS):
      state, metrics = step(state, batches[i % len(batches)])
      losses.append(float(metrics['loss'] / metrics['weight']))
      if i == 0:  # the first step's gradient sums, as make_grad_fn returned them in the step
        grads = _first_gradient_sums(state, metrics)
    out[layout] = dict(mesh=mesh, losses=losses, grads=jax.device_get(grads), state=state)
  return out


def _first_gradient_sums(state, metrics):
  """The gradient sums of the step that made `state` from a fresh one: Adam's first moment
  after one update is (1 - b1) times the gradients the step applied, themselves the sums
  divided by the batch's token count (parallel.apply_gradients). One compiled step instead of
  a step and a separately jitted make_grad_fn (a third of this module's compile time)."""
  weight = float(metrics['weight'])
  return jax.tree_util.tree_map(lambda mu: np.asarray(mu) / 0.1 * weight,
                                jax.device_get(state.opt_state[0].mu))


def _trains_as_one_device(trained):
  one = trained['one']
  for layout in LAYOUTS[1:]:
    np.testing.assert_allclose(trained[layout]['losses'], one['losses'], rtol=1e-4,
                               err_msg=layout)
    for a, b in zip(jax.tree_util.tree_leaves(trained[layout]['grads']),
                    jax.tree_util.tree_leaves(one['grads'])):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=layout)  # sums of ~1s


def test_data_parallel_is_the_shard_map_step_and_equals_one_device_without_dropout():
  mesh = meshes.make('data:8')
  assert mesh.axis_names == ('data',) and meshes.is_data_parallel(mesh)
  cfg = CFG.replace(dropout_rate=0.0)
  batch = _batches()[0]
  sums = []
  for m in (mesh, _mesh('one')):
    params = parallel.replicate(model_lib.init_params(cfg, jax.random.PRNGKey(0)), m)
    grads, metrics = jax.jit(parallel.make_grad_fn(cfg, m, 0.1))(
        params, parallel.shard_batch(batch, m), jax.random.PRNGKey(1))
    sums.append((float(metrics['loss']), jax.device_get(grads)))
  assert sums[0][0] == pytest.approx(sums[1][0], rel=1e-6)
  for a, b in zip(*(jax.tree_util.tree_leaves(g) for _, g in sums)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _placed_by_the_rules(trained):
  expected = {  # (ffn wi kernel [32, 64], query kernel [32, 4, 8], embedding [64, 32])
      'fsdp:8': (P('fsdp'), P('fsdp'), P(None, 'fsdp')),
      'data:2,tensor:4': (P(None, 'tensor'), P(None, 'tensor'), P('tensor')),
      'data:2,fsdp:2,tensor:2': (P('fsdp', 'tensor'), P('fsdp', 'tensor'), P('tensor', 'fsdp')),
  }
  for layout, specs in expected.items():
    params = trained[layout]['state'].params
    layer = params['encoder']['layer_0']
    got = (layer['ffn']['wi']['kernel'], layer['self_attention']['query']['kernel'],
           params['shared_embedding']['embedding'])
    assert tuple(x.sharding.spec for x in got) == specs, layout
    mu = trained[layout]['state'].opt_state[0].mu['encoder']['layer_0']['ffn']['wi']['kernel']
    assert mu.sharding.spec == specs[0], layout  # Adam's moments live with their parameter
  state = trained['data:2,fsdp:2,tensor:2']['state']
  total = meshes.bytes_per_device(state.params, jax.tree_util.tree_map(
      lambda x: x.sharding, state.params))
  assert total < model_lib.count_params(state.params) * 4 / 2  # split at least in halves


def _decodes_identically(trained):
  inputs = jnp.asarray(_batches()[0]['inputs'][:4])
  outputs = [np.asarray(beam_decode.beam_decode(
      CFG, 4, 0.6, jax.device_get(trained[layout]['state'].params), inputs,
      jnp.full((4,), 12, jnp.int32), 12)[0]) for layout in LAYOUTS]
  for out in outputs[1:]:
    np.testing.assert_array_equal(out, outputs[0])


def _checkpoint_moves_bitwise(trained, tmp_path):
  state = trained['data:2,fsdp:2,tensor:2']['state']
  saved = jax.device_get(state)
  optimizer = optax.adam(1e-3)
  cfg = CFG
  checkpointer = checkpoint.Checkpointer(str(tmp_path / 'a'))
  checkpointer.save(STEPS, state, {'position': 0}, tiny_config())
  checkpointer.wait()
  for i, layout in enumerate(('data:8', 'fsdp:8', 'data:2,tensor:4', 'one')):
    target = parallel.create_train_state(cfg, optimizer, 1, _mesh(layout))
    restored, _ = checkpointer.restore(checkpoint.abstract_like(target))
    for a, b in zip(jax.tree_util.tree_leaves(jax.device_get(restored)),
                    jax.tree_util.tree_leaves(saved)):
      np.testing.assert_array_equal(a, b)
    for x, y in zip(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(target)):
      assert x.sharding == y.sharding, layout
    checkpointer.close()
    checkpointer = checkpoint.Checkpointer(str(tmp_path / str(i)))
    checkpointer.save(STEPS, restored, {'position': 0}, tiny_config())
    checkpointer.wait()
  checkpointer.close()


def test_every_layout_trains_places_decodes_and_moves_as_one_device(trained, tmp_path):
  """One test over the trained layouts (computed once: under pytest-xdist each worker that
  needs a module fixture builds its own): one device's numbers, placements by the rules,
  identical beams, checkpoints moved bitwise."""
  _trains_as_one_device(trained)
  _placed_by_the_rules(trained)
  _decodes_identically(trained)
  _checkpoint_moves_bitwise(trained, tmp_path)


@pytest.mark.parametrize('spec, count, expected', [
    ('', 8, {'data': 8}),
    ('data:2,fsdp:-1', 8, {'data': 2, 'fsdp': 4}),
    ('tensor:2,data:2,fsdp:2', 8, {'data': 2, 'fsdp': 2, 'tensor': 2}),
    ('fsdp:8', 8, {'data': 1, 'fsdp': 8}),
])
def test_mesh_specs(spec, count, expected):
  assert choices.parse_mesh(spec, count) == expected


@pytest.mark.parametrize('spec, message', [
    ('tensor:4', r"'tensor:4' needs 4 devices; this run has 8"),
    ('data:2,data:4', r"axis 'data' given twice"),
    ('model:8', r"unknown axis 'model'; expected one of data, fsdp, tensor"),
    ('data:-1,fsdp:-1', r'-1 twice'),
    ('data 8', r"expected AXIS:SIZE pairs"),
    ('fsdp:0', r'expected a size of 1 or more'),
])
def test_bad_mesh_specs_are_refused_naming_the_key(spec, message):
  with pytest.raises(choices.ConfigError, match=r"config key 'mesh': .*" + message):
    choices.parse_mesh(spec, 8)


def test_an_axis_that_does_not_divide_a_dimension_is_refused_naming_both():
  with pytest.raises(meshes.MeshError, match=r"mesh axis 'tensor' \(8 devices\) does not "
                     r"divide dimension \d \('heads', 4\) of \S+_attention/(query|out)/kernel"):
    meshes.param_specs(CFG, meshes.make('tensor:8'))
  with pytest.raises(meshes.MeshError, match=r"shard_optimizer_state=True on the mesh"):
    parallel.make_train_step(CFG, optax.adam(1e-3), meshes.make('data:2,tensor:4'),
                             label_smoothing=0.1, seed=0, shard_optimizer_state=True)


def test_grouped_kv_heads_fewer_than_the_tensor_axis_are_replicated():
  cfg = CFG.replace(num_kv_heads=2)
  specs = meshes.param_specs(cfg, meshes.make('data:2,tensor:4'))
  attention = specs['encoder']['layer_0']['self_attention']
  assert attention['key']['kernel'] == P() and attention['query']['kernel'] == P(None, 'tensor')


def test_a_part_that_declares_no_axes_is_replicated_and_listed():
  names = logical_axes.param_logical_axes(CFG)
  assert names['encoder/layer_0/ffn/wi/kernel'] == ('embed', 'mlp')
  assert meshes.undeclared(CFG) == ()
  assert meshes.spec_for('x/kernel', (32, 64), None, meshes.make('fsdp:8')) == P()


def test_a_mesh_no_step_honours_is_refused_in_one_line():
  mesh = Mesh(np.asarray(jax.devices()).reshape(2, 4), ('data', 'model'))
  with pytest.raises(ValueError, match=r"make_train_step: mesh axis 'model' .* is not one a "
                     r"step splits anything over"):
    parallel.make_train_step(CFG, optax.adam(1e-3), mesh, label_smoothing=0.1, seed=0)
  with pytest.raises(ValueError, match=r"make_grad_fn: mesh axis 'model'"):
    parallel.make_grad_fn(CFG, mesh, 0.1)


def test_main_refuses_a_mesh_in_one_line_and_info_shows_the_bytes_per_device(corpus, tmp_path):
  from conftest import TINY, run_main  # pylint: disable=import-outside-toplevel
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY,
                    '--config.mesh=tensor:8', '--config.num_train_steps=2')
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
      "error: mesh axis 'tensor' (8 devices) does not divide dimension 0 ('heads', 4) of "
      "decoder/layer_0/cross_attention/out/kernel (4, 8, 32); expected a size that divides 4, "
      "or a mesh without 'tensor'")
  assert not any(n.startswith('checkpoints') for n in (os.listdir(workdir)
                                                      if os.path.isdir(workdir) else []))
  result = run_main('--mode=info', *TINY, '--config.mesh=data:2,fsdp:2,tensor:2')
  assert result.returncode == 0, result.stderr[-2000:]
  lines = result.stdout.splitlines()
  assert 'mesh: data:2, fsdp:2, tensor:2 (8 devices)' in lines
  assert any(line.split()[:2] == ['layer_*/ffn/wi/kernel', "('embed',"]
             and line.endswith("P('fsdp', 'tensor')") for line in lines)
  per_device = [line for line in lines if 'per device' in line]
  assert len(per_device) == 2 and per_device[0].strip().startswith(
      'training state per device: parameters ')
  # The train step compiled for that mesh on the 8 test devices, XLA's bytes per device.
  assert per_device[1].startswith("compiled train step, per device (XLA's memory analysis on "
                                  "this machine's 8 cpu devices, mesh data:2, fsdp:2, tensor:2")
  [step] = [line for line in lines if line.startswith('  train: temporaries')]
  temporaries, peak = (float(x) for x in re.findall(r'([\d.]+) MiB', step)[:2])
  assert 0 < temporaries < peak
  # ZeRO-2 beside fsdp: subsumed, said in one warning line, recorded as off; a part without
  # logical axes (SwiGLU's) is listed as replicated.
  result = run_main('--mode=info', *TINY, '--config.mesh=fsdp:-1',
                    '--config.shard_optimizer_state=True',
                    '--config.model=examples/variants.py:swiglu')
  assert result.returncode == 0, result.stderr[-2000:]
  assert "config key 'shard_optimizer_state'=True has no effect (a mesh with 'fsdp' splits the " \
      'optimizer state with the parameters already (ZeRO-3))' in result.stderr
  lines = [line.strip() for line in result.stdout.splitlines()]
  assert 'shard_optimizer_state     = False' in lines
  assert ('replicated, their part declares no logical axes: layer_*/ffn/down/kernel, '
          'layer_*/ffn/gate/kernel, layer_*/ffn/up/kernel') in lines


_VARIANTS = [('examples/variants.py:' + name, {}) for name in (
    'gqa', 'rotary', 't5_bias', 'pre_rmsnorm', 'swiglu', 'switch_moe', 'sliding_window')] + [
        ('', {'share_embeddings': False}), ('', {'num_encoder_layers': 2, 'num_decoder_layers': 1})]


@pytest.mark.parametrize('spec, changes', [
    pytest.param(s, c, marks=() if s.endswith('switch_moe') else pytest.mark.slow)
    for s, c in _VARIANTS], ids=[s.split(':')[-1] or next(iter(c)) for s, c in _VARIANTS])
def test_a_variant_trains_on_a_three_axis_mesh_as_on_one_device(spec, changes):
  """Its declared parameters split, the undeclared ones (a SwiGLU, the Switch router)
  replicated, its sown losses summed: one step's gradients as one device's."""
  from t2t_jax.model import variant  # pylint: disable=import-outside-toplevel
  cfg = CFG.replace(**changes)
  net = variant.build(spec, cfg) if spec else model_lib.Transformer(cfg)
  batch, results = _batches()[0], []
  for layout in ('one', 'data:2,fsdp:2,tensor:2'):
    mesh = _mesh(layout)
    params = meshes.place_params(model_lib.init_params(net, jax.random.PRNGKey(0)), net, mesh)
    grads, metrics = jax.jit(parallel.make_grad_fn(net, mesh, 0.1))(
        params, parallel.shard_batch(batch, mesh), jax.random.PRNGKey(1))
    results.append((jax.device_get(metrics), jax.device_get(grads)))
  (m1, g1), (m2, g2) = results
  assert set(m1) == set(m2)
  for key in m1:
    assert float(m2[key]) == pytest.approx(float(m1[key]), rel=1e-5), key
  for a, b in zip(jax.tree_util.tree_leaves(g2), jax.tree_util.tree_leaves(g1)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
