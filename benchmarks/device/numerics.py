"""Device check stages (benchmarks/device/check.py): the environment and the numerics.

numerics: the paper's base model (the smoke size with --smoke) in float32 on the default
device against the same jitted computation on the host's CPU backend in the same process:
loss (label smoothing 0.1), every gradient and the logits, under XLA's default matmul
precision (on NVIDIA GPUs float32 matmuls may then run as TF32) and under 'highest'; then
bfloat16 on the device against float32 on the device. attention_forms: every form of Eq. 1
against the einsum reference on the device, and the model with attention_impl='cudnn'.
"""

import importlib.metadata
import os
import subprocess
from typing import Any, Dict, Optional, Tuple

import numpy as np

from benchmarks.device.check import Context, goal
from benchmarks.shared import common, harness

SMOKE_SIZE = dict(vocab_size=256, d_model=32, d_ff=64, num_heads=2, num_layers=1,
                  dropout_rate=0.1)
PACKAGES = ('jax', 'jaxlib', 'jax-cuda13-plugin', 'jax-cuda13-pjrt', 'jax-cuda12-plugin',
            'jax-cuda12-pjrt', 'libtpu', 'flax', 'optax', 'orbax-checkpoint', 'numpy', 'torch',
            'protobuf', 'grain', 'tensorflow-datasets', 'tensorflow-metadata', 'array-record',
            'sentencepiece', 'sacrebleu', 'ml-collections', 'ctranslate2')
# The modules the later stages import (the carried wheels among them): one that fails here,
# e.g. tensorflow_metadata's generated protos against an older protobuf, is named at once.
IMPORTS = ('t2t_jax.data.pipeline', 't2t_jax.inference.translate', 'tensorflow_datasets',
           'tensorflow_metadata.proto.v0.schema_pb2', 'grain', 'array_record', 'ml_collections',
           'sentencepiece', 'sacrebleu', 'tensorboardX')
# numerics at reduced sizes: the base model's widths, 1 layer and 8k ids (its compile on the
# host's CPU backend took 100 s at full size on a 2-core CPU; this one a few seconds).
REDUCED_BASE = dict(vocab_size=8192, d_model=512, d_ff=2048, num_heads=8, num_layers=1,
                    dropout_rate=0.1)
GEMM = 8192  # the bf16 matrix product whose own rate the environment stage measures
# Relative error bounds (max |a - b| / max |b|; gradients: norm of the difference over the
# norm) of the device against the CPU backend, float32. 'highest': true float32 matmuls, only
# the order of the sums differs. 'default': NVIDIA GPUs may use TF32 (10-bit mantissa).
F32_BOUNDS = {'highest': 1e-4, 'default': 2e-2}
BF16_BOUND = 0.1  # bfloat16 against float32 on the device: an 8-bit mantissa


def size_of(ctx: Context, name: str) -> Dict[str, Any]:
  return SMOKE_SIZE if ctx.smoke else common.SIZES[name]


def reduced_size(ctx: Context) -> Dict[str, Any]:
  return SMOKE_SIZE if ctx.smoke else REDUCED_BASE


def run_config(size: Dict[str, Any], **changes):
  """configs/default.py with the model `size` and `changes` (a run config)."""
  from configs import default  # pylint: disable=import-outside-toplevel
  config = default.get_config()
  for key, value in dict(size, **changes).items():
    setattr(config, key, value)
  return config


def environment(ctx: Context) -> Dict[str, Any]:
  import jax  # pylint: disable=import-outside-toplevel
  devices = jax.devices()
  device = devices[0]
  stats = device.memory_stats() if hasattr(device, 'memory_stats') else None
  versions = {}
  for name in PACKAGES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      pass
  record = {
      'backend': jax.default_backend(), 'device_kind': device.device_kind,
      'device_count': len(devices), 'memory_bytes': (stats or {}).get('bytes_limit'),
      'versions': versions, 'nvidia_smi': _nvidia_smi(), 'torch_cuda': _torch_cuda(),
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
      'xla_env': {k: v for k, v in os.environ.items() if k.startswith(('XLA_', 'JAX_', 'TF_'))},
      'default_matmul_precision': str(jax.config.jax_default_matmul_precision),
      'peak_bf16_flops': common.known_peak(device.device_kind)}
  record['summary'] = {'device': f'{len(devices)} x {device.device_kind}',
                       'memory_GiB': round((record['memory_bytes'] or 0) / 2 ** 30, 1),
                       'jax': versions.get('jax'), 'protobuf': versions.get('protobuf'),
                       'driver': record['nvidia_smi'].get('driver')}
  ctx.emit(dict(record, part='versions', status='partial'))
  record['imports'] = _imports()
  failed = {k: v for k, v in record['imports'].items() if v != 'ok'}
  record['summary']['imports_failed'] = ', '.join(failed) or 'none'
  record['goals'] = [goal('every module the stages import imports', ', '.join(failed) or 'all',
                          not failed)]
  ctx.emit(dict(record, part='imports', status='partial'))
  # A CPU (a rehearsal) takes minutes over an 8192^3 product in bfloat16: a smaller one.
  record['gemm'] = gemm_rate(64 if ctx.smoke else GEMM if jax.default_backend() != 'cpu'
                             else 1024)
  record['summary']['gemm_bf16_TFLOPs'] = record['gemm']['flops_per_s'] / 1e12
  return record


def _imports() -> Dict[str, str]:
  import importlib  # pylint: disable=import-outside-toplevel
  out = {}
  for name in IMPORTS:
    try:
      importlib.import_module(name)
      out[name] = 'ok'
    except Exception as e:  # pylint: disable=broad-except  (each failure is the finding)
      out[name] = f'{type(e).__name__}: {e}'.splitlines()[0][:300]
  return out


def gemm_rate(n: int, runs: int = 10) -> Dict[str, Any]:
  """The rate of an [n, n] x [n, n] bfloat16 product on the default device (random data,
  the median of `runs` after a warm-up): the peak this chip reaches in practice, beside the
  datasheet's (an H100 SXM's 989 TFLOP/s; 798 was measured on this workplace's H100)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  keys = jax.random.split(jax.random.PRNGKey(0))
  a, b = (jax.random.normal(k, (n, n), jnp.bfloat16) for k in keys)
  product = jax.jit(jnp.matmul)
  jax.block_until_ready(product(a, b))
  times = [harness.time_call(lambda: jax.block_until_ready(product(a, b)))[1]
           for _ in range(runs)]
  median = float(np.median(times))
  return {'n': n, 'runs': runs, 'median_s': median, 'flops_per_s': 2 * n ** 3 / median}


def measured_peak(ctx: Context) -> Optional[float]:
  """The GEMM rate the environment stage of this run measured (None: it did not run)."""
  for record in reversed(ctx.records()):
    if record.get('stage') == 'environment' and record.get('gemm'):
      return record['gemm']['flops_per_s']
  return None


def _nvidia_smi() -> Dict[str, str]:
  try:
    out = subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,memory.total',
                          '--format=csv,noheader'], capture_output=True, text=True, timeout=20,
                         check=True).stdout.strip()
    header = subprocess.run(['nvidia-smi'], capture_output=True, text=True, timeout=20).stdout
  except (OSError, subprocess.SubprocessError):
    return {}
  name, driver, memory = [x.strip() for x in out.splitlines()[0].split(',')]
  cuda = header.split('CUDA Version:')[1].split()[0] if 'CUDA Version:' in header else ''
  return {'name': name, 'driver': driver, 'memory': memory, 'cuda_driver_api': cuda}


def _torch_cuda() -> Dict[str, Any]:
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    return {}
  return {'available': torch.cuda.is_available(), 'cuda': torch.version.cuda,
          'cudnn': torch.backends.cudnn.version() if torch.cuda.is_available() else None}


def rel_error(a, b) -> float:
  """max |a - b| / max |b| over the arrays (float64 on the host)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def tree_rel_error(a, b) -> float:
  """Norm of the difference of two pytrees over the norm of `b`."""
  import jax  # pylint: disable=import-outside-toplevel
  la = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(a)]
  lb = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(b)]
  diff = np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(la, lb)))
  return float(diff / max(np.sqrt(sum(np.sum(y ** 2) for y in lb)), 1e-30))


def _loss_grads_logits(cfg):
  """A jitted (params, inputs, targets) -> (loss, grads, logits) of `cfg` (label smoothing
  0.1, the mean over non-padding targets)."""
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import losses, transformer  # pylint: disable=import-outside-toplevel
  net = transformer.Transformer(cfg)

  def loss_fn(params, inputs, targets):
    logits = net.apply({'params': params}, inputs, targets)
    total, weight = losses.label_smoothed_cross_entropy(
        logits, targets, losses.padding_weights(targets), 0.1)
    return total / weight, logits

  def f(params, inputs, targets):
    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, inputs, targets)
    return loss, grads, logits

  return jax.jit(f)


def _batch(vocab: int, rows: int, length: int) -> Tuple[np.ndarray, np.ndarray]:
  """Random ids in [2, vocab), each row padded after a random length (so masks matter)."""
  rng = np.random.default_rng(0)
  ids = rng.integers(2, vocab, (2, rows, length), dtype=np.int32)
  keep = np.arange(length)[None, :] < rng.integers(length // 2, length + 1, (rows, 1))
  return ids[0] * keep, ids[1] * keep


def numerics(ctx: Context) -> Dict[str, Any]:
  """Each comparison is recorded as soon as it is measured (float32 at 'highest', at the
  default precision, then bfloat16): a killed stage keeps the ones before."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import transformer  # pylint: disable=import-outside-toplevel
  size = reduced_size(ctx)
  cfg = transformer.TransformerConfig.from_config(run_config(size), deterministic=True)
  inputs, targets = _batch(size['vocab_size'], *((4, 12) if ctx.smoke else (8, 32)))
  params = jax.jit(lambda r: transformer.init_params(cfg, r))(jax.random.PRNGKey(0))
  cpu, device = jax.devices('cpu')[0], jax.devices()[0]
  on = lambda d, tree: jax.device_put(tree, d)  # noqa: E731
  f32 = _loss_grads_logits(cfg)
  with jax.default_matmul_precision('highest'):
    reference = jax.device_get(f32(*on(cpu, (params, inputs, targets))))
  record: Dict[str, Any] = {'size': size, 'float32': {}, 'goals': [],
                            'shapes': {'inputs': inputs.shape, 'targets': targets.shape}}
  errors_of = lambda got, want: {  # noqa: E731
      'loss': rel_error(got[0], want[0]), 'grads': tree_rel_error(got[1], want[1]),
      'logits': rel_error(got[2], want[2])}
  for precision, bound in F32_BOUNDS.items():
    with jax.default_matmul_precision(None if precision == 'default' else precision):
      got = jax.device_get(f32(*on(device, (params, inputs, targets))))
    errors = errors_of(got, reference)
    record['float32'][precision] = errors
    record['goals'].append(goal(f'float32 ({precision} precision) vs CPU, worst rel. error '
                                f'<= {bound:g}', max(errors.values()), max(errors.values()) <= bound))
    ctx.emit({'part': f'float32_{precision}', 'status': 'partial', 'errors': errors,
              'goals': record['goals'][-1:], 'summary': {'worst_rel_err': max(errors.values())}})
  bf16 = _loss_grads_logits(cfg.replace(dtype=jnp.bfloat16))
  got = jax.device_get(bf16(*on(device, (params, inputs, targets))))
  with jax.default_matmul_precision('highest'):
    f32_device = jax.device_get(f32(*on(device, (params, inputs, targets))))
  errors = errors_of(got, f32_device)
  record['bfloat16'] = dict(errors, loss=float(got[0]), loss_float32=float(f32_device[0]))
  record['goals'].append(goal(f'bfloat16 vs float32 differs and stays within {BF16_BOUND:g}',
                              max(errors.values()), 0 < max(errors.values()) <= BF16_BOUND))
  record['summary'] = {
      'f32_highest_err': max(record['float32']['highest'].values()),
      'f32_default_err': max(record['float32']['default'].values()),
      'bf16_err': max(errors.values()), 'loss': float(reference[0])}
  return record


def attention_forms(ctx: Context) -> Dict[str, Any]:
  """Each form of Eq. 1 at the shapes that pick it, against the einsum form in float32 at
  'highest' precision; bfloat16 forms against the float32 reference."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import attention  # pylint: disable=import-outside-toplevel
  b, kv, h, d = (2, 16, 2, 16) if ctx.smoke else (8, 128, 8, 64)
  rng = np.random.default_rng(1)
  gpu = jax.default_backend() == 'gpu'

  def qkv(q_len, dtype):
    q, k, v = (rng.standard_normal((b, n, h, d)).astype(np.float32) for n in (q_len, kv, kv))
    mask = (np.arange(kv)[None, None, None, :] < rng.integers(kv // 2, kv + 1, (b, 1, 1, 1)))
    return [jnp.asarray(x, dtype) for x in (q, k, v)], jnp.asarray(mask)

  def reference(q, k, v, mask):
    with jax.default_matmul_precision('highest'):
      return jax.jit(attention.dot_product_attention_reference)(
          *(x.astype(jnp.float32) for x in (q, k, v)), mask)

  heads_first = lambda f: lambda q, k, v, m: f(  # noqa: E731
      q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), m)
  forms = {
      'heads_first (1 query)': (1, jnp.float32, heads_first(attention.heads_first_attention)),
      'few_query (4 queries)': (4, jnp.float32, heads_first(attention.few_query_attention)),
      'xla fused f32': (kv, jnp.float32, lambda q, k, v, m: jax.nn.dot_product_attention(
          q, k, v, mask=jnp.broadcast_to(m, (b, 1, kv, kv)), implementation='xla')),
      'xla fused bf16': (kv, jnp.bfloat16, lambda q, k, v, m: jax.nn.dot_product_attention(
          q, k, v, mask=jnp.broadcast_to(m, (b, 1, kv, kv)), implementation='xla')),
      'dispatcher bf16': (kv, jnp.bfloat16, attention.dot_product_attention),
  }
  if gpu:
    forms['cudnn bf16'] = (kv, jnp.bfloat16, lambda q, k, v, m: jax.nn.dot_product_attention(
        q, k, v, mask=jnp.broadcast_to(m, (b, 1, kv, kv)), implementation='cudnn'))
  record: Dict[str, Any] = {'shapes': {'batch': b, 'kv_length': kv, 'heads': h, 'd': d},
                            'errors': {}, 'goals': []}
  for name, (q_len, dtype, fn) in forms.items():
    (q, k, v), mask = qkv(q_len, dtype)
    try:
      with jax.default_matmul_precision('highest'):
        got = jax.jit(fn)(q, k, v, mask)
      err = rel_error(jnp.asarray(got, jnp.float32), reference(q, k, v, mask))
    except Exception as e:  # pylint: disable=broad-except  (a form that fails is reported)
      record['errors'][name] = f'{type(e).__name__}: {e}'.splitlines()[0][:300]
      record['goals'].append(goal(f'{name} runs', 'failed', False))
      continue
    bound = 2e-2 if dtype == jnp.bfloat16 else 1e-5
    record['errors'][name] = err
    record['goals'].append(goal(f'{name} equals the einsum form within {bound:g}', err,
                                err <= bound))
    ctx.emit({'part': name.split(' ')[0] + ('_bf16' if 'bf16' in name else ''),
              'status': 'partial', 'error_vs_einsum': err, 'goals': record['goals'][-1:],
              'summary': {'rel_err': err}})
  impl = 'cudnn' if gpu else 'xla'
  try:
    record.update(_model_with_impl(ctx, impl))
    record['goals'].append(goal(f'model with attention_impl={impl!r} (bf16) equals the '
                                'default within 0.05', record['model_rel_error'],
                                record['model_rel_error'] <= 0.05))
  except Exception as e:  # pylint: disable=broad-except  (the forms above stay measured)
    record['errors'][f'model {impl}'] = f'{type(e).__name__}: {e}'.splitlines()[0][:300]
    record['goals'].append(goal(f'model with attention_impl={impl!r} runs', 'failed', False))
  record['summary'] = {k.split(' ')[0] + ('_bf16' if 'bf16' in k else ''): v
                       for k, v in record['errors'].items() if not k.startswith('model')}
  return record


def _model_with_impl(ctx: Context, impl: str) -> Dict[str, Any]:
  """Logits of the model in bfloat16 with `attention_impl=impl` against the default impl."""
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import transformer  # pylint: disable=import-outside-toplevel
  size = size_of(ctx, 'base')
  config = run_config(size, dtype='bfloat16')
  cfg = transformer.TransformerConfig.from_config(config, deterministic=True)
  inputs, targets = _batch(size['vocab_size'], *((4, 16) if ctx.smoke else (16, 64)))
  params = jax.jit(lambda r: transformer.init_params(cfg, r))(jax.random.PRNGKey(0))
  logits = {}
  for name in (None, impl):
    net = transformer.Transformer(cfg.replace(attention_impl=name))
    logits[name] = jax.jit(lambda p, x, y, n=net: n.apply({'params': p}, x, y))(
        params, inputs, targets)
  return {'model_impl': impl, 'model_rel_error': rel_error(logits[impl], logits[None])}
