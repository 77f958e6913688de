"""The GPU paths, lowered where there is no GPU: `jax.export` lowers for CUDA (and TPU) without
their compilers, so a train, eval or decode step that cannot be lowered for CUDA fails here
rather than on a user's first GPU run. Nothing is compiled for CUDA; what a GPU would compile
is read from the lowered StableHLO: the gradient all-reduce over the 8-device mesh, bfloat16
activations, float32 parameters, donated state.

The model is the embedded default's (configs/quickstart.py) shrunk to seconds, in bfloat16
as a GPU run would train it.
"""

import functools
import importlib.util
import re
import types

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from configs import quickstart
from t2t_jax.inference import translate
from t2t_jax.model import transformer as model
from t2t_jax.runtime import parallel
from t2t_jax.training import optim

ROWS, LENGTH = 16, 16  # global train/eval batch: 2 rows on each of the 8 devices
METRICS = 4            # summed per device, then all-reduced: loss, nll, correct, weight
# The first FFN matmul of one device's shard, in bfloat16: [2, 16, d_model] x [d_model, d_ff].
FFN_BF16 = ('tensor<2x16x32xbf16>', 'tensor<32x64xbf16>')


def _config():
  c = quickstart.get_config()
  c.vocab_size, c.d_model, c.d_ff, c.num_heads, c.num_layers = 96, 32, 64, 4, 2
  c.dtype = 'bfloat16'
  return c


@pytest.fixture(scope='module')
def run():
  """The model config, mesh, optimizer and the abstract train state and batch, placed as
  `train.py` places the real ones: state replicated, batch rows sharded over 'data'."""
  config = _config()
  cfg = model.TransformerConfig.from_config(config)
  mesh = parallel.make_mesh()
  optimizer = optim.make_optimizer(config)
  # eval_shape gives shapes and dtypes but drops the shardings of create_train_state's jit:
  # put them back, or the state would be lowered unplaced (sdy @empty_mesh) and not replicated.
  shapes = jax.eval_shape(functools.partial(parallel.create_train_state, cfg, optimizer, 0,
                                            mesh))
  state = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(
      x.shape, x.dtype, sharding=parallel.replicated(mesh)), shapes)
  batch = {k: jax.ShapeDtypeStruct((ROWS, LENGTH), jnp.int32,
                                   sharding=parallel.data_sharded(mesh))
           for k in ('inputs', 'targets')}
  return types.SimpleNamespace(cfg=cfg, mesh=mesh, optimizer=optimizer, state=state,
                               batch=batch)


def _train_step(run, cfg=None):
  return parallel.make_train_step(cfg or run.cfg, run.optimizer, run.mesh, label_smoothing=0.1,
                                  seed=0)


def _all_reduces(text):
  """[(values reduced, replica groups, element type)] of every `stablehlo.all_reduce`. The
  groups as jax 0.10 writes them (`dense<[[0, ..., 7]]>`); jax 0.11 names the mesh axes
  instead (`replica_group_mesh_axes<... axes = [data]>`), which over this 1-axis mesh of 8
  devices is the same one group of all eight."""
  found = re.findall(r'"stablehlo\.all_reduce"\(([^)]*)\).*?replica_groups = '
                     r'(?:dense<(.*?)> |#stablehlo\.replica_group_mesh_axes<(.*?)>, )'
                     r'.*?\^bb0\(%\w+: tensor<(\w+)>', text, re.S)
  every = str([list(range(len(jax.devices())))])
  return [(operands.count(',') + 1,
           dense or (every if re.findall(r'name = "(\w+)"', axes) == ['data'] else axes), dtype)
          for operands, dense, axes, dtype in found]


def _dot_operands(text):
  """[(lhs type, rhs type)] of every `stablehlo.dot_general` (matmuls and einsums)."""
  return re.findall(r'stablehlo\.dot_general [^\n]*: \((tensor<[^>]*>), (tensor<[^>]*>)\)',
                    text)


def _aliased_outputs(text):
  """The output index each donated argument of the lowered entry function is aliased to."""
  main = next(line for line in text.splitlines() if 'func.func public @main' in line)
  return [int(i) for i in re.findall(r'tf\.aliasing_output = (\d+)', main)]


def _float_dtypes(avals):
  return {str(a.dtype) for a in avals if jnp.issubdtype(a.dtype, jnp.floating)}


def test_train_step_lowers_for_cuda_with_float32_gradient_all_reduce_and_bf16_math(run):
  exported = jax.export.export(_train_step(run), platforms=('cuda',))(run.state, run.batch)
  text = exported.mlir_module()
  assert exported.platforms == ('cuda',)
  assert exported.nr_devices == 8
  state_leaves = len(jax.tree_util.tree_leaves(run.state))
  specs = [s.spec for s in exported.in_shardings_jax(run.mesh)]
  assert specs == [P()] * state_leaves + [P(parallel.DATA)] * 2

  # Every gradient leaf and metric sum is summed over all 8 devices, in float32.
  params = len(jax.tree_util.tree_leaves(run.state.params))
  reduces = _all_reduces(text)
  assert sum(count for count, _, _ in reduces) == params + METRICS
  assert {(groups, dtype) for _, groups, dtype in reduces} == {
      ('[[0, 1, 2, 3, 4, 5, 6, 7]]', 'f32')}

  # Parameters and Adam moments go in and come out float32; the matmuls run in bfloat16 on
  # each device's 2 rows. The only all-float32 matmuls are the pre-softmax projection's
  # backward: its float32 logits send float32 cotangents, and jax upcasts the bfloat16
  # operand (the table, the decoder output) to match.
  assert _float_dtypes(exported.in_avals) == _float_dtypes(exported.out_avals) == {'float32'}
  dots = _dot_operands(text)
  assert FFN_BF16 in dots
  assert len([d for d in dots if 'bf16' not in ''.join(d)]) <= 2 < len(dots)

  # The state is donated: each state input is updated in place, as its new value (the
  # outputs are (state, metrics)), so a GPU holds one copy of parameters and Adam moments.
  assert _aliased_outputs(text) == list(range(state_leaves))


def test_train_step_lowers_for_cpu_cuda_and_tpu_at_once(run):
  exported = jax.export.export(_train_step(run), platforms=('cpu', 'cuda', 'tpu'))(
      run.state, run.batch)
  assert exported.platforms == ('cpu', 'cuda', 'tpu')
  assert exported.nr_devices == 8
  params = len(jax.tree_util.tree_leaves(run.state.params))
  assert sum(count for count, _, _ in _all_reduces(exported.mlir_module())) == params + METRICS


def test_eval_step_lowers_for_cuda(run):
  step = parallel.make_eval_step(run.cfg, run.mesh, label_smoothing=0.1)
  exported = jax.export.export(step, platforms=('cuda',))(run.state.params, run.batch)
  text = exported.mlir_module()
  assert exported.nr_devices == 8
  assert [(a.shape, a.dtype) for a in exported.out_avals] == [((), jnp.float32)] * METRICS
  # Only the metric sums cross devices: no gradients, so exactly 4 scalars.
  assert _all_reduces(text) == [(1, '[[0, 1, 2, 3, 4, 5, 6, 7]]', 'f32')] * METRICS
  assert _float_dtypes(exported.in_avals) == {'float32'}
  assert FFN_BF16 in _dot_operands(text)


def test_beam_search_decode_lowers_for_cuda(run):
  # As `translate.Translator` jits it: one device, cfg, beam size, alpha and length static.
  cfg = run.cfg.replace(deterministic=True, decode=False)
  rows, src_len, max_decode_len, beam = 4, 16, 24, 4
  decode = jax.jit(translate.decode_batch, static_argnums=(0, 1, 2, 6))
  params = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  run.state.params)
  exported = jax.export.export(decode, platforms=('cuda',))(
      cfg, beam, 0.6, params, jax.ShapeDtypeStruct((rows, src_len), jnp.int32),
      jax.ShapeDtypeStruct((rows,), jnp.int32), max_decode_len)
  text = exported.mlir_module()
  assert exported.nr_devices == 1
  assert [(a.shape, a.dtype) for a in exported.out_avals] == [((rows, max_decode_len),
                                                               jnp.int32)]
  assert _float_dtypes(exported.in_avals) == {'float32'}
  assert 'stablehlo.while' in text  # the search loop stays a loop, not unrolled
  # One decoder position of every beam, through the FFN in bfloat16.
  assert (f'tensor<{rows * beam}x1x32xbf16>', 'tensor<32x64xbf16>') in _dot_operands(text)


@pytest.mark.skipif(any(importlib.util.find_spec(p) for p in ('jax_cuda12_plugin',
                                                               'jax_cuda13_plugin')),
                    reason='documents lowering where no CUDA libraries are installed')
def test_cudnn_attention_cannot_be_lowered_without_cudnn(run):
  # attention_impl='cudnn' reaches jax.nn.dot_product_attention(implementation='cudnn'), which
  # asks the installed cuDNN for its version while tracing. Without one it cannot be lowered,
  # so CI cannot check it; the day this lowers, this test says so and it can be checked here.
  # Building the step already traces the model (the train state's abstract shapes for its
  # shardings), so the error can come from there as well as from the export.
  with pytest.raises(RuntimeError, match='cuDNN is not detected'):
    step = _train_step(run, run.cfg.replace(attention_impl='cudnn'))
    jax.export.export(step, platforms=('cuda',))(run.state, run.batch)
