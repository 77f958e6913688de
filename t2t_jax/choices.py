"""The values of the model's enumerated options, written once, and the error for a wrong one.

Both `TransformerConfig` (its fields are annotated with these `Literal`s and checked against
them) and the run config's `config.validate` read them: at the bottom of the package, with no
imports beyond the standard library, so that the host-side config needs no jax and the model
needs no ml_collections.
"""

import math
import re
from typing import Dict, Literal, Optional

# §3.5: the fixed sinusoids, learned (Table 3 E), the same sinusoids with the sines in the
# first half of the columns and the cosines in the second (Marian's layout), or fairseq's
# (tensor2tensor's timescales, sines then cosines, positions counted from 2: M2M100, NLLB).
Positional = Literal['sinusoidal', 'learned', 'sinusoidal_halves', 'sinusoidal_fairseq']
# The feed-forward network's nonlinearity (§3.3, Eq. 2: ReLU); 'swish' (SiLU, OPUS-MT's) and
# 'gelu' (erf, exact) for models made elsewhere.
Activation = Literal['relu', 'swish', 'gelu']
NormPosition = Literal['post', 'pre']  # §3.1: LayerNorm(x + Sublayer(x)), or x + Sublayer(LN(x))
# The keys of `t2t_jax.model.stack.REMAT_POLICIES` (jax checkpoint policies), and 'none'.
RematPolicy = Literal['none', 'full', 'dots_saveable', 'dots_with_no_batch_dims_saveable']
# `jax.nn.dot_product_attention(implementation=...)`; None (a run config's '') lets jax choose.
AttentionImpl = Literal['xla', 'cudnn']
# §6.1's length penalty and early stop ('gnmt'), or transformers' (`model/length_rules.py`).
LengthRule = Literal['gnmt', 'transformers']
DTypeName = Literal['float32', 'bfloat16']  # activations; parameters are always float32


class ConfigError(ValueError):
  """A configuration key is unknown or has an invalid value (main.py: one line `error: ...`)."""


def compile_pattern(pattern: str) -> 're.Pattern':
  """The compiled `trainable` expression, or a one-line ConfigError naming the key."""
  try:
    return re.compile(pattern)
  except re.error as e:
    raise ConfigError(f"config key 'trainable': {pattern!r} is not a regular expression "
                      f'({e}); expected one over parameter paths, e.g. \'decoder/.*\'') from None


# The mesh axes a step splits something over (runtime/meshes.py says what), outermost first.
MESH_AXES = ('data', 'fsdp', 'tensor')


def parse_mesh(spec: str, device_count: Optional[int] = None,
               where: str = "config key 'mesh'") -> Dict[str, int]:
  """`--config.mesh`: 'data:2,fsdp:-1' -> {'data': 2, 'fsdp': 4} for 8 devices, in
  `MESH_AXES` order, 'data' always there ('': every device on 'data'). One size may be -1
  (the devices left); with `device_count` the sizes' product must be it (without, only the
  syntax is checked and -1 stays). One-line ConfigError starting with `where` otherwise."""
  spec = str(spec).strip()
  if not spec:
    return {'data': -1 if device_count is None else device_count}
  sizes: Dict[str, int] = {}
  for part in spec.split(','):
    m = re.fullmatch(r'\s*([a-z]+)\s*:\s*(-?\d+)\s*', part)
    if not m:
      raise ConfigError(f"{where}: {part.strip()!r} in {spec!r}; expected AXIS:SIZE "
                        f"pairs such as 'data:2,fsdp:2,tensor:2' (axes {', '.join(MESH_AXES)})")
    axis, size = m.group(1), int(m.group(2))
    if axis not in MESH_AXES:
      raise ConfigError(f"{where}: unknown axis {axis!r}; expected one of "
                        f"{', '.join(MESH_AXES)}")
    if axis in sizes:
      raise ConfigError(f"{where}: axis {axis!r} given twice in {spec!r}")
    if size == 0 or size < -1:
      raise ConfigError(f"{where}: {axis}:{size}; expected a size of 1 or more, "
                        'or -1 for the devices left')
    sizes[axis] = size
  if sum(n == -1 for n in sizes.values()) > 1:
    raise ConfigError(f"{where}: {spec!r} has -1 twice; at most one axis fills in")
  out = {a: sizes.get(a, 1) for a in MESH_AXES if a in sizes or a == 'data'}
  if device_count is None:
    return out
  known = math.prod(n for n in out.values() if n != -1)
  fill = [a for a, n in out.items() if n == -1]
  if fill and device_count % known == 0:
    out[fill[0]] = device_count // known
  if math.prod(out.values()) != device_count:
    raise ConfigError(f"{where}: {spec!r} needs {'a multiple of ' if fill else ''}"
                      f'{known} devices; this run has {device_count} (one axis of -1 takes the devices left, '
                      "e.g. 'data:-1,tensor:2')")
  return out


def parse_profile_steps(value: str) -> Optional[tuple]:
  """`profile_steps` 'START:END' -> (START, END), the first and last train step traced,
  1 <= START <= END; '' -> None. ConfigError naming the key otherwise."""
  if not value:
    return None
  match = re.fullmatch(r'\s*(\d+)\s*:\s*(\d+)\s*', value)
  if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
    raise ConfigError(f"config key 'profile_steps': expected 'START:END' with 1 <= START <= END "
                      f"(the steps traced, e.g. '10:12'), got {value!r}")
  return int(match.group(1)), int(match.group(2))


# `writers`: where the training metrics go (`training/metrics.py`, `training/trackers.py`).
WRITERS = ('jsonl', 'tensorboard', 'wandb', 'mlflow')
_CUSTOM_WRITER = re.compile(r'[A-Za-z_][\w.]*:[A-Za-z_]\w*')


def parse_writers(value: str) -> tuple:
  """`writers` 'jsonl,tensorboard,...' -> the entries in order: names of `WRITERS`, or
  'package.module:factory' (a writer of one's own). jsonl must be one: metrics.jsonl is the
  run's own record (plots, keep-best's history and the final report read it). ConfigError
  naming the key otherwise."""
  entries = tuple(part.strip() for part in value.split(','))
  where = "config key 'writers'"
  for entry in entries:
    if entry not in WRITERS and not _CUSTOM_WRITER.fullmatch(entry):
      raise ConfigError(f'{where}: {entry!r} in {value!r}; expected a comma list of '
                        f"{', '.join(WRITERS)} or 'package.module:factory'")
    if entries.count(entry) > 1:
      raise ConfigError(f'{where}: {entry!r} given twice in {value!r}')
  if 'jsonl' not in entries:
    raise ConfigError(f"{where}: {value!r} lacks 'jsonl': metrics.jsonl is the run's own "
                      "record (plots and the final report read it); e.g. 'jsonl,wandb'")
  return entries


def check_run_syntax(config) -> None:
  """The syntax of the run keys written as small languages: `mesh` (its device count is
  checked when the mesh is built), `profile_steps`, `writers`."""
  parse_mesh(config.mesh)
  parse_profile_steps(config.profile_steps)
  parse_writers(config.writers)
