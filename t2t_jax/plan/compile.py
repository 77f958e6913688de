"""Ahead-of-time compilation of a run's steps for a slice's devices, and what XLA reports.

`Run` builds what `train.train` builds (model config, optimizer, mesh over every device,
train state with its shardings, donated) from a run config, but abstract: shapes and
shardings only, no parameters are initialised and nothing is read. The train, eval and
beam-search decode steps are then lowered and compiled for those devices; each compiled
program gives its memory (`memory_analysis`), its FLOPs and HBM traffic (`cost_analysis`,
per device) and its collectives (the optimized HLO). `train_shapes`, `eval_shapes` and
`decode_shapes` list every shape the run compiles each step at, as the pipeline and the
Translator make them. With a `cache.PlanCache`, what a compilation reported is kept on disk
and a later plan of the same program reads it back (`cache` says why JAX's own cache
cannot serve compile-only TPU devices).
"""

import dataclasses
import re
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

from t2t_jax.inference import translate
from t2t_jax.model import transformer as model, variant
from t2t_jax.runtime import meshes, parallel
from t2t_jax.training import optim
from t2t_jax.data import pipeline
from t2t_jax.plan import cache as cache_lib, hlo, progress


class DoesNotFit(RuntimeError):
  """The TPU compiler refused a program that needs more HBM than a chip has.

  Attributes:
    needed_bytes: what the compiler said the program needs (None if it did not say).
    available_bytes: what it said a chip offers (None if it did not say).
  """

  def __init__(self, message: str, needed_bytes: Optional[float],
               available_bytes: Optional[float]):
    super().__init__(message)
    self.needed_bytes, self.available_bytes = needed_bytes, available_bytes

  def __reduce__(self):  # across `interruptible.call`'s pipe, with its numbers
    return DoesNotFit, (str(self), self.needed_bytes, self.available_bytes)


_UNITS = {'': 1, 'K': 2 ** 10, 'M': 2 ** 20, 'G': 2 ** 30, 'T': 2 ** 40}
_SIZE = r'([\d.]+)([KMGT]?)i?B?'


def _parse_out_of_memory(message: str) -> DoesNotFit:
  """The compiler's RESOURCE_EXHAUSTED message -> DoesNotFit with its sizes, if it gives them.

  Seen with libtpu 0.0.42: 'Ran out of memory on HBM, the total memory required for HLO
  temporaries (27.71G) exceeds available HBM (15.75G).'; older ones say 'Used 20.5G of
  15.75G hbm'.
  """
  size = lambda m, i: float(m.group(i)) * _UNITS[m.group(i + 1)]  # noqa: E731
  line = message.strip().splitlines()[0]
  m = re.search(r'required.*?\(' + _SIZE + r'\).*?available HBM \(' + _SIZE + r'\)', line)
  if m is None:
    m = re.search(r'Used ' + _SIZE + ' of ' + _SIZE, line)
  if m is None:
    return DoesNotFit(line, None, None)
  return DoesNotFit(line, size(m, 1), size(m, 3))


@dataclasses.dataclass(frozen=True)
class StepStats:
  """One compiled program, per device (bytes, FLOPs).

  compile_s, compile_cpu_s: wall and CPU (all threads of this process) seconds of lowering
  and compiling it, as measured when it was compiled (a cached program's first compile);
  spent_s: the wall seconds this plan spent on it (lowering and reading the cache, when
  `cached`)."""
  name: str
  shapes: Dict[str, Tuple[int, ...]]
  compile_s: float
  argument_bytes: int
  output_bytes: int
  alias_bytes: int
  temp_bytes: int
  code_bytes: int
  flops: float
  bytes_accessed: float
  collectives: List[Dict[str, int]]
  compile_cpu_s: float = 0.0
  spent_s: float = 0.0
  cached: bool = False

  @property
  def hbm_bytes(self) -> int:
    """Peak HBM of the program: its arguments, the outputs not aliased to (donated)
    arguments, temporaries and the program itself."""
    return (self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes +
            self.code_bytes)


def _compiled_fields(compiled) -> Dict[str, Any]:
  """What the plan reads of a compiled program: memory, cost, collectives (JSON-able)."""
  memory = compiled.memory_analysis()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return dict(
      argument_bytes=memory.argument_size_in_bytes, output_bytes=memory.output_size_in_bytes,
      alias_bytes=memory.alias_size_in_bytes, temp_bytes=memory.temp_size_in_bytes,
      code_bytes=memory.generated_code_size_in_bytes, flops=float(cost.get('flops', 0.0)),
      bytes_accessed=float(cost.get('bytes accessed', 0.0)),
      collectives=hlo.collectives(compiled.as_text()))


def _compile(lowered) -> Dict[str, Any]:
  """The compiled program's fields with compile_s and compile_cpu_s (this compilation's wall
  and CPU seconds), or {'does_not_fit': message, needed_bytes, available_bytes, ...} when the
  compiler runs out of HBM (a refusal takes minutes too: it is cached like a program)."""
  start, cpu_start = time.monotonic(), time.process_time()
  try:
    compiled = lowered.compile()
  except Exception as e:  # pylint: disable=broad-except  (XLA raises JaxRuntimeError)
    if 'RESOURCE_EXHAUSTED' not in str(e):
      raise
    refused = _parse_out_of_memory(str(e).split('RESOURCE_EXHAUSTED:', 1)[-1])
    record = {'does_not_fit': str(refused), 'needed_bytes': refused.needed_bytes,
              'available_bytes': refused.available_bytes}
  else:
    record = {}
  record.update(compile_s=time.monotonic() - start,
                compile_cpu_s=time.process_time() - cpu_start)
  return record if 'does_not_fit' in record else {**record, **_compiled_fields(compiled)}


def compile_step(name: str, jitted, args: Sequence[Any], shapes: Dict[str, Tuple[int, ...]],
                 cache: Optional[cache_lib.PlanCache] = None) -> StepStats:
  """Lowers and compiles `jitted(*args)` (abstract args with shardings); DoesNotFit when the
  compiler runs out of HBM. `shapes` name the batch arguments for the report. compile_s and
  compile_cpu_s count the lowering and the compilation. With `cache`, a program compiled by
  an earlier plan (same lowered module, devices and compiler) is read back instead. Says
  what it compiles, while it does and for how long on stderr (`progress.compiling`)."""
  start, cpu_start = time.monotonic(), time.process_time()
  with progress.compiling(progress.describe(name, shapes)) as shown:
    lowered = jitted.lower(*args)
    lower_s, lower_cpu_s = time.monotonic() - start, time.process_time() - cpu_start
    key = cache.key(lowered.as_text(), args) if cache else None
    record = cache.get(key) if cache else None
    cached = record is not None
    if not cached:
      record = _compile(lowered)
      record['compile_s'] += lower_s
      record['compile_cpu_s'] += lower_cpu_s
      if cache:
        cache.put(key, record)
    shown.note = ', '.join(
        (['read from the plan cache'] if cached else [])
        + (['too big for a chip'] if 'does_not_fit' in record else [])) or None
  if 'does_not_fit' in record:
    raise DoesNotFit(record['does_not_fit'], record['needed_bytes'], record['available_bytes'])
  fields = {k: v for k, v in record.items() if k in _FIELDS}
  return StepStats(name=name, shapes=shapes, spent_s=time.monotonic() - start, cached=cached,
                   **fields)


def _abstract(tree, shardings):
  return jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def shard_bytes(tree) -> int:
  """Bytes one device holds of an abstract tree (each leaf's shard under its sharding)."""
  total = 0
  for leaf in jax.tree_util.tree_leaves(tree):
    shape = leaf.sharding.shard_shape(leaf.shape)
    n = 1
    for d in shape:
      n *= d
    total += n * jnp.dtype(leaf.dtype).itemsize
  return total


_FIELDS = {f.name for f in dataclasses.fields(StepStats)} - {'name', 'shapes', 'spent_s',
                                                             'cached'}


class Run:
  """A run config's model, optimizer, mesh and abstract train state on `devices`.

  Attributes:
    config: the run config; model: its model (`variant.from_config`); cfg: the model's
    config; mesh: 'data' over every device.
    processes: hosts of the slice; local_devices: devices per host.
    state: the abstract `parallel.TrainState`, each leaf with its sharding.
    cache: where compilations are kept between plans (None: nowhere).
  """

  def __init__(self, config: ml_collections.ConfigDict, devices: Sequence[Any],
               cache: Optional[cache_lib.PlanCache] = None):
    self.config, self.cache = config, cache
    self.model = variant.from_config(config)
    self.cfg = self.model.cfg
    self.optimizer = optim.make_optimizer(config)
    self.mesh = meshes.make(config.mesh, list(devices))  # the run's --config.mesh
    self.processes = len({d.process_index for d in devices})
    self.local_devices = len(devices) // self.processes
    self.shard_optimizer_state = bool(config.shard_optimizer_state)
    state = jax.eval_shape(lambda: parallel.create_train_state(
        self.model, self.optimizer, config.seed, self.mesh,
        shard_optimizer_state=self.shard_optimizer_state))
    # eval_shape drops the shardings of create_train_state's jit: put them back.
    self.param_shardings = meshes.step_param_shardings(self.model, self.mesh)
    self.state = _abstract(state, parallel.train_state_shardings(
        state, self.mesh, shard_optimizer_state=self.shard_optimizer_state,
        param_shardings=self.param_shardings))

  def train_shapes(self, tokens_per_batch: Optional[int] = None) -> List[Tuple[int, int]]:
    """[(global rows, length)] of every batch shape the run's train step sees, shortest
    first, as the pipeline makes them: one per bucket, or with `pack_examples` the one packed
    shape (the largest bucket's). Each is a compilation of its own.

    Raises pipeline.PipelineError when `tokens_per_batch` cannot give every device a row.
    """
    config = self.config
    if tokens_per_batch is not None:
      config = ml_collections.ConfigDict(config.to_dict())
      config.tokens_per_batch = int(tokens_per_batch)
    lengths, rows = pipeline.bucket_rows(config, self.local_devices, self.processes)
    shapes = [(r * self.processes, n) for r, n in zip(rows, lengths)]
    return shapes[-1:] if config.pack_examples else shapes

  def eval_shapes(self) -> List[Tuple[int, int]]:
    """[(global rows, length)] of the dev-loss batches (`pipeline.make_eval_batches`), shortest
    first: one per bucket, never packed. A dev pair longer than the largest bucket adds one
    more, of its length rounded up to 8 (the data decides; not listed)."""
    lengths, rows = pipeline.bucket_rows(self.config, self.local_devices, self.processes)
    return [(r * self.processes, n) for r, n in zip(rows, lengths)]

  def decode_shapes(self) -> List[Tuple[int, int, int]]:
    """[(sentences, source length, output length)] of the beam-search batches
    (`portable.batches`): one per bucket of `bucket_lengths` up to `max_len`, the output up
    to the source + `max_decode_extra` (§6.1: input length + 50). An input longer than the
    largest bucket adds a source length of a multiple of 32 (the data decides; not listed)."""
    config, max_len = self.config, self.cfg.max_len
    return [(config.decode_batch_sentences, n, min(n + config.max_decode_extra, max_len))
            for n in sorted(set(int(b) for b in config.bucket_lengths)) if n <= max_len]

  def train_shape(self, tokens_per_batch: Optional[int] = None) -> Tuple[int, int]:
    """(global rows, length) of the largest bucket's batches: the worst case for memory
    (attention grows with the square of the length)."""
    return self.train_shapes(tokens_per_batch)[-1]

  def _batch(self, rows: int, length: int, packed: bool) -> Dict[str, jax.ShapeDtypeStruct]:
    keys = ('inputs', 'targets') + (parallel.PACKING_KEYS if packed else ())
    spec = jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=parallel.data_sharded(
        self.mesh))
    return {k: spec for k in keys}

  def compile_train(self, rows: int, length: int, apply: bool = True) -> List[StepStats]:
    """The update step (with gradient accumulation: the micro-batch gradient step and, unless
    `apply` is False, the apply step, whose shapes do not depend on the batch: a run compiles
    it once) for a `[rows, length]` global batch."""
    config = self.config
    kwargs = dict(label_smoothing=config.label_smoothing, seed=config.seed,
                  debug_nonfinite_steps=tuple(config.debug_nonfinite_steps),
                  shard_optimizer_state=self.shard_optimizer_state,
                  aux_loss_weight=config.aux_loss_weight, trainable=config.trainable)
    batch = self._batch(rows, length, bool(config.pack_examples))
    shapes = {'batch': (rows, length)}
    if config.grad_accum_steps == 1:
      step = parallel.make_train_step(self.model, self.optimizer, self.mesh, **kwargs)
      return [compile_step('train', step, (self.state, batch), shapes, self.cache)]
    grad_step, apply_step = parallel.make_accumulating_steps(self.model, self.optimizer,
                                                             self.mesh, **kwargs)
    scalar = jax.ShapeDtypeStruct((), jnp.int32, sharding=parallel.replicated(self.mesh))
    grads = compile_step('train_gradients', grad_step,
                         (self.state.params, batch, scalar, scalar), shapes, self.cache)
    if not apply:
      return [grads]
    grad_sums, metric_sums = jax.eval_shape(grad_step, self.state.params, batch, scalar, scalar)
    mesh, shard = self.mesh, self.shard_optimizer_state
    grad_shardings = self.param_shardings or jax.tree_util.tree_map(
        lambda g: NamedSharding(mesh, parallel.zero_spec(g.shape, mesh.size) if shard else P()),
        grad_sums)
    metric_shardings = jax.tree_util.tree_map(lambda _: parallel.replicated(mesh), metric_sums)
    apply = compile_step('train_apply', apply_step,
                         (self.state, _abstract(grad_sums, grad_shardings),
                          _abstract(metric_sums, metric_shardings)), {}, self.cache)
    return [grads, apply]

  def compile_eval(self, rows: int, length: int) -> StepStats:
    step = parallel.make_eval_step(self.model, self.mesh,
                                   label_smoothing=self.config.label_smoothing)
    return compile_step('eval', step, (self.state.params, self._batch(rows, length, False)),
                        {'batch': (rows, length)}, self.cache)

  def decode_shape(self) -> Tuple[int, int, int]:
    """(sentences, source length, output length) of the largest decode batch."""
    config = self.config
    src_len = min(max(config.bucket_lengths), self.cfg.max_len)
    return (config.decode_batch_sentences, src_len,
            min(src_len + config.max_decode_extra, self.cfg.max_len))

  def compile_decode(self, shape: Optional[Tuple[int, int, int]] = None) -> StepStats:
    """Beam search (§6.1) of one decode batch of `shape` (default: the largest) on one chip:
    each process decodes its share of the sentences on its first device."""
    config = self.config
    rows, src_len, max_decode_len = shape or self.decode_shape()
    net = model.as_model(self.model, deterministic=True, decode=False)
    device = SingleDeviceSharding(self.mesh.devices.flat[0])
    params = _abstract(self.state.params,
                       jax.tree_util.tree_map(lambda _: device, self.state.params))
    decode = jax.jit(lambda p, inputs, max_lengths: translate.decode_batch(
        net, config.beam_size, config.length_penalty_alpha, p, inputs, max_lengths,
        max_decode_len, length_rule=config.length_penalty_rule))
    inputs = jax.ShapeDtypeStruct((rows, src_len), jnp.int32, sharding=device)
    max_lengths = jax.ShapeDtypeStruct((rows,), jnp.int32, sharding=device)
    return compile_step('decode', decode, (params, inputs, max_lengths),
                        {'inputs': (rows, src_len), 'outputs': (rows, max_decode_len)},
                        self.cache)

  def state_bytes(self) -> Dict[str, int]:
    """Per device: parameters and optimizer state as the run holds them."""
    return {'params': shard_bytes(self.state.params),
            'optimizer_state': shard_bytes(self.state.opt_state)}

