"""t2t_jax: the original Transformer (Vaswani et al. 2017) in JAX/Flax.

The public API, re-exported from the packages that own it (docs/architecture.md has the map).
Nothing is imported until it is used (PEP 562): `from t2t_jax import Transformer, beam_search`
or `import t2t_jax.model` loads jax, flax and numpy only (tests/test_import.py), and a name of
the training or data side (`t2t_jax.Checkpointer`, `t2t_jax.corpus_bleu`) imports its module,
with orbax, grain, sacrebleu..., the first time it is read. The subpackages are attributes as
usual (`t2t_jax.config`, `t2t_jax.parsing`, `t2t_jax.configs`: the presets of configs/).
"""

import functools
import glob
import importlib
import importlib.util
import os
import pkgutil
import sys
from typing import Any, List, Tuple

__version__ = '0.1.0'


def _checkout_configs() -> None:
  """Makes the checkout's configs/ the package `t2t_jax.configs`.

  An installed copy has it as t2t_jax/configs/ (pyproject.toml's package-dir). A checkout, used
  through `pip install -e .` or only on sys.path, keeps configs/ next to t2t_jax/: registered
  here, before anything imports `t2t_jax.configs.<preset>`, it is the same package either way.
  """
  here = os.path.dirname(os.path.abspath(__file__))
  folder = os.path.join(os.path.dirname(here), 'configs')
  if (os.path.isdir(os.path.join(here, 'configs'))
      or not os.path.isfile(os.path.join(folder, 'default.py'))):
    return
  spec = importlib.util.spec_from_file_location(f'{__name__}.configs',
                                                os.path.join(folder, '__init__.py'),
                                                submodule_search_locations=[folder])
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)


_checkout_configs()


def _on_tpu_vm() -> bool:
  """True where TPU device files exist (/dev/accel* or /dev/vfio/N): a TPU VM, where libtpu is
  the runtime and its messages matter (the same test as `cli.start_backends`)."""
  return bool(glob.glob('/dev/accel*') or glob.glob('/dev/vfio/[0-9]*'))


def _skip_absent_tpu() -> bool:
  """Off a TPU VM with libtpu installed and no other accelerator plugin, jax runs on `cpu`.

  Why: libtpu (requirements-tpu.txt, in the README's install line, for `--mode=plan`) makes jax
  try a TPU backend first on any machine. Off a TPU VM that fails, as it should, but libtpu
  first prints 'Failed to find host bounds for accelerator type ...' and an 'E0000 ...
  unexpected worker hostname' error to stderr, at the first `jax.devices()` or `jit` of every
  program using the library. main.py sends them to the debug log (`cli.start_backends`); a
  notebook or script cannot. Here CPU is the only platform jax could start anyway, so naming
  it changes no result, it only skips the failing TPU attempt. `--mode=plan` is unaffected: it
  loads libtpu itself to build TPU topologies.

  Only then, and only when nobody chose: JAX_PLATFORMS unset (`JAX_PLATFORMS=` keeps jax's own
  choice), JAX_FORCE_TPU_INIT unset, jax's backends not started. Before jax is imported the
  environment variable is set (jax reads it on import, and `import t2t_jax.data` must not import
  jax); after, `jax.config`. Other accelerators are PJRT plugins (jax[cuda12], jax[cuda13],
  ROCm), found as jax finds them: with one installed, jax's default stays (noise included).
  Here, not in runtime/: every package imports this one, so it imports the standard library
  only (pyproject.toml's contracts). Returns whether it named cpu.
  """
  if ('JAX_PLATFORMS' in os.environ or 'JAX_FORCE_TPU_INIT' in os.environ or _on_tpu_vm()
      or importlib.util.find_spec('libtpu') is None
      or importlib.util.find_spec('jax_plugins') is not None):
    return False
  from importlib import metadata  # pylint: disable=import-outside-toplevel  (only with libtpu)
  if metadata.entry_points(group='jax_plugins'):
    return False
  jax = sys.modules.get('jax')
  if jax is None:
    os.environ['JAX_PLATFORMS'] = 'cpu'
    return True
  # jax was imported first: its config, if its backends have not started. Read from
  # sys.modules, not imported; a private API, so if it moves jax is left alone.
  started = getattr(sys.modules.get('jax._src.xla_bridge'), 'backends_are_initialized', None)
  if started is None or started() or jax.config.jax_platforms:
    return False
  jax.config.update('jax_platforms', 'cpu')
  return True


_skip_absent_tpu()

# The one table of the public API: each module and the names it exports here. `__all__`, the
# lazy attributes and `dir(t2t_jax)` all come from it. Subpackages are not in `__all__`:
# `from t2t_jax import *` must not bind `inspect` (the subpackage) over the standard library's.
_EXPORTS = {
    't2t_jax.model.attention': (
        'causal_mask', 'combine_masks', 'dot_product_attention',
        'dot_product_attention_reference', 'merge_heads', 'padding_mask', 'segment_mask',
        'split_heads'),
    't2t_jax.model.layers': (
        'AddPositions', 'FeedForward', 'MultiHeadAttention', 'Residual', 'SharedEmbedding',
        'sinusoidal_positions'),
    't2t_jax.model.losses': (
        'compute_metrics', 'label_smoothed_cross_entropy', 'negative_log_likelihood',
        'padding_weights', 'perplexity', 'sown_losses', 'token_accuracy'),
    't2t_jax.model.transformer': (
        'BOS_ID', 'EOS_ID', 'PAD_ID', 'ModelLike', 'Transformer', 'TransformerConfig',
        'as_model', 'count_params', 'init_params', 'param_shapes', 'shift_right'),
    't2t_jax.model.incremental': (
        'DecodeContext', 'check_incremental', 'decode_context', 'decode_step', 'grow_cache',
        'incremental_logits', 'init_cache'),
    't2t_jax.model.search': ('beam_search', 'greedy_search', 'length_penalty'),
    't2t_jax.model.beam_decode': ('beam_decode',),
    't2t_jax.model.scoring': ('token_log_probs',),
    't2t_jax.model.nnx_bridge': ('linen_params', 'to_nnx'),
    't2t_jax.model.variant': ('VariantError', 'load_factory'),
    't2t_jax.config': ('ConfigError', 'validate'),
    't2t_jax.training.optim': ('learning_rate_schedule', 'make_optimizer'),
    't2t_jax.training.plots': ('load_curves', 'write_learning_curves'),
    't2t_jax.inference.bleu': ('corpus_bleu', 'tokenized_bleu'),
    't2t_jax.inference.averaging': ('average_checkpoints',),
    't2t_jax.inference.checkpoint_choice': ('load_inference_params',),
    't2t_jax.inference.translate': ('Hypothesis', 'Translator'),
    't2t_jax.library': ('batches', 'evaluate', 'load_config', 'score', 'train', 'translate'),
    't2t_jax.inference.portable': ('ExportedTranslator',),
    't2t_jax.runtime.checkpoint': ('Checkpointer',),
    't2t_jax.runtime.meshes': ('LOGICAL_AXIS_RULES', 'MeshError', 'param_shardings'),
    't2t_jax.model.logical_axes': ('param_logical_axes',),
    't2t_jax.runtime.resolution': ('resolve',),
    't2t_jax.runtime.parallel': (
        'TrainState', 'apply_gradients', 'create_train_state', 'initialize_distributed',
        'make_accumulating_steps', 'make_eval_step', 'make_grad_fn', 'make_mesh',
        'make_train_step', 'metric_sums', 'objective', 'shard_batch',
        'train_state_shardings'),
    't2t_jax.inspect.attention_maps': ('AttentionWeights', 'attention_weights'),
    't2t_jax.inspect.attention_plots': ('attention_figure', 'attention_heatmaps',
                                        'attention_lines'),
    't2t_jax.export.common': ('ExportError',),
    't2t_jax.export.ctranslate2_export': ('export_ctranslate2',),
    't2t_jax.export.ctranslate2_decoding': ('gnmt_rerank',),
    't2t_jax.export.stablehlo_export': ('export_stablehlo', 'export_stablehlo_model'),
    't2t_jax.plan': ('PlanError', 'make_plan'),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


@functools.lru_cache(maxsize=None)
def _subpackages() -> Tuple[str, ...]:
  """The modules and packages of t2t_jax (listed once); `configs` is installed into it from
  configs/."""
  return tuple(sorted({info.name for info in pkgutil.iter_modules(__path__)} | {'configs'}))


def __getattr__(name: str) -> Any:
  """Imports the module that owns `name` the first time it is read, and keeps the value."""
  if name in _MODULE_OF:
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
  elif name in _subpackages():
    value = importlib.import_module(f'{__name__}.{name}')
  else:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  globals()[name] = value
  return value


def __dir__() -> List[str]:
  return sorted(set(globals()) | set(__all__) | set(_subpackages()))
