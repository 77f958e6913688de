"""The argument checks of the training step's public building blocks (`runtime/parallel.py`:
`metric_sums`, `objective`, `make_grad_fn`, `apply_gradients`, the step makers): a wrong
argument is refused in one line naming the function and the argument, instead of a bare
`KeyError`, a jax shape error, or a wrong value computed from it (a broadcast gradient, a
vector objective, the sums of mismatched rows).

Every check reads structure, shapes, dtypes and Python values only, so under `jit` it runs
once, while tracing, and adds nothing to the compiled step (the paper model's numbers are
bitwise those without it). Token ids are checked against the vocabulary only where their
values are known (an eager call); inside `jit` they are not, and an id outside the vocabulary
gives a non-finite loss, which `apply_gradients` skips and reports as `nonfinite`.
"""

from typing import Mapping, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from t2t_jax import choices
from t2t_jax.model import id_arrays, losses
from t2t_jax.model.array_checks import check_array, check_tree_shapes

DATA = 'data'
MESH_AXES = choices.MESH_AXES  # runtime/meshes.py: what each one splits
# Batch keys of packed rows (pipeline with config.pack_examples), each shaped as its side's ids.
PACKING_KEYS = ('inputs_segmentation', 'targets_segmentation', 'inputs_position',
                'targets_position')
BATCH_FORM = ("a dict of 'inputs' and 'targets', [rows, length] int32 token ids (and for "
              'packed rows the PACKING_KEYS)')


def check_optimizer(where: str, optimizer) -> None:
  """TypeError unless `optimizer` is an optax GradientTransformation (has init and update)."""
  if not (callable(getattr(optimizer, 'init', None))
          and callable(getattr(optimizer, 'update', None))):
    raise TypeError(f'{where}: optimizer is a {type(optimizer).__name__}; expected an optax '
                    'GradientTransformation (make_optimizer(config), optax.adam(...))')


def check_mesh(where: str, mesh) -> None:
  """TypeError unless `mesh` is a jax.sharding.Mesh; ValueError for an axis no step knows how
  to honour (`MESH_AXES`: it would be replicated over silently)."""
  if not isinstance(mesh, Mesh):
    raise TypeError(f'{where}: mesh is a {type(mesh).__name__}; expected a '
                    'jax.sharding.Mesh (make_mesh(), meshes.make())')
  unknown = [a for a in mesh.axis_names if a not in MESH_AXES]
  if unknown:
    raise ValueError(f'{where}: mesh axis {unknown[0]!r} (of {tuple(mesh.axis_names)}) is not '
                     f"one a step splits anything over; expected axes among {MESH_AXES} "
                     "(meshes.make('data:2,fsdp:2,tensor:2'))")


def check_params(where: str, params) -> None:
  """TypeError unless `params` is a parameter tree (a dict, `init_params`')."""
  if not isinstance(params, Mapping):
    raise TypeError(f'{where}: params is a {type(params).__name__}; expected the model\'s '
                    "parameter tree (init_params' nested dict)")


def check_batch(where: str, batch, vocab_size: Optional[int] = None,
                row_multiple: int = 1, source_vocab_size: Optional[int] = None) -> None:
  """Refuses `batch` unless it is a dict with `inputs` and `targets`, integer `[rows, length]`
  arrays of as many rows (a multiple of `row_multiple`, the mesh's 'data' devices), and each
  packing key present shaped as its side's ids; with `vocab_size`, every id of `inputs` and
  `targets` in [0, vocab_size) when the values are known (not under `jit`, and held by this
  process); those of `inputs` in [0, source_vocab_size) when given (separate vocabularies).

  Raises:
    TypeError: not a dict, or ids that are not integers.
    ValueError: a key missing, the wrong rank, rows that differ or do not divide, an id
      outside the vocabulary.
  """
  if not isinstance(batch, Mapping):
    raise TypeError(f'{where}: batch is a {type(batch).__name__}; expected {BATCH_FORM}')
  missing = [k for k in ('inputs', 'targets') if k not in batch]
  if missing:
    raise ValueError(f'{where}: batch has no {missing[0]!r} (its keys: '
                     f'{", ".join(map(str, batch)) or "none"}); expected {BATCH_FORM}')
  shapes = {}
  for side in ('inputs', 'targets'):
    shapes[side] = check_array(where, f"batch['{side}']", batch[side], kind='int', rank=2,
                               layout='[rows, length]')
  if shapes['inputs'][0] != shapes['targets'][0]:
    raise ValueError(f"{where}: batch['inputs'] has {shapes['inputs'][0]} rows but "
                     f"batch['targets'] {shapes['targets'][0]}; expected one target row per "
                     'source row')
  if shapes['inputs'][0] % row_multiple:
    raise ValueError(f"{where}: batch has {shapes['inputs'][0]} rows; expected a multiple of "
                     f"the mesh's {row_multiple} {DATA!r} devices")
  for key in PACKING_KEYS:
    if key in batch:
      side = key.split('_')[0]
      got = check_array(where, f'batch[{key!r}]', batch[key], kind='int')
      if got != shapes[side]:
        raise ValueError(f'{where}: batch[{key!r}] has shape {got}; expected that of '
                         f"batch['{side}'], {shapes[side]}")
  if vocab_size is not None:
    sizes = {'inputs': source_vocab_size or vocab_size, 'targets': vocab_size}
    for side in ('inputs', 'targets'):
      id_arrays.check_id_values(where, f"batch['{side}']", batch[side], sizes[side])


def check_metrics(where: str, metrics, required: Sequence[str]) -> None:
  """Refuses `metrics` unless it is a dict of metric sums holding the `required` keys, each
  of those and every `aux_<name>` a scalar (what `metric_sums` / `make_grad_fn` return).

  Raises:
    TypeError: not a dict.
    ValueError: a key missing, or a sum that is not a scalar.
  """
  if not isinstance(metrics, Mapping):
    raise TypeError(f'{where}: metrics is a {type(metrics).__name__}; expected a dict of '
                    "metric sums ('loss', 'weight', ...: metric_sums' or make_grad_fn's)")
  missing = [k for k in required if k not in metrics]
  if missing:
    raise ValueError(f'{where}: metrics has no {missing[0]!r} (its keys: '
                     f'{", ".join(map(str, metrics)) or "none"}); expected the metric sums '
                     "of metric_sums or make_grad_fn ('loss', 'nll', 'correct', 'weight')")
  for key in [*required, *sorted(k for k in metrics if str(k).startswith(losses.AUX_PREFIX))]:
    shape = check_array(where, f'metrics[{key!r}]', metrics[key], kind='number')
    if shape:
      raise ValueError(f'{where}: metrics[{key!r}] has shape {shape}; expected a scalar sum '
                       '(one per batch, summed over devices)')


def check_state(where: str, state, state_type: type) -> None:
  """TypeError unless `state` is a `state_type` (the TrainState)."""
  if not isinstance(state, state_type):
    raise TypeError(f'{where}: state is a {type(state).__name__}; expected a '
                    f'{state_type.__name__} (create_train_state)')


def check_update(where: str, state, optimizer, grad_sums) -> None:
  """Refuses gradients not shaped as `state.params`, and an optimizer state other than the one
  `optimizer.init(state.params)` makes (another optimizer's, or other parameters'); shapes
  alone, the optimizer's init traced abstractly (no work, no memory)."""
  check_tree_shapes(where, 'grad_sums', grad_sums, state.params, 'state.params',
                    "gradients of state.params (make_grad_fn's)")
  abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype),
                                    state.params)
  check_tree_shapes(where, 'state.opt_state', state.opt_state,
                    jax.eval_shape(optimizer.init, abstract), 'optimizer.init(params)',
                    'the state of this optimizer (create_train_state(model, optimizer, ...))')


def check_dropout_rng(where: str, rng, cfg) -> None:
  """TypeError for a missing dropout key (None) where the model (its config `cfg`) applies
  dropout."""
  if rng is None and not (cfg.deterministic or cfg.dropout_rate == cfg.attention_dropout_rate
                          == 0):
    raise TypeError(f'{where}: dropout_rng is None; expected a PRNG key '
                    '(jax.random.PRNGKey(seed)) for a model that applies dropout')


def check_shard_arguments(where: str, cfg, params, batch, dropout_rng) -> None:
  """`metric_sums`' checks: `params` a dict, `batch` (`check_batch`, ids against
  `cfg.vocab_size` when known), a dropout key where the model (config `cfg`) needs one."""
  check_params(where, params)
  check_batch(where, batch, cfg.vocab_size, source_vocab_size=cfg.input_vocab_size)
  check_dropout_rng(where, dropout_rng, cfg)


def check_update_arguments(where: str, state, state_type: type, optimizer, grad_sums,
                           metrics) -> None:
  """`apply_gradients`' checks: an optax `optimizer`, a `state_type` `state` of its state,
  `grad_sums` shaped as `state.params`, `metrics` scalar sums with 'loss' and 'weight'."""
  check_optimizer(where, optimizer)
  check_state(where, state, state_type)
  check_metrics(where, metrics, ('loss', 'weight'))
  check_update(where, state, optimizer, grad_sums)
