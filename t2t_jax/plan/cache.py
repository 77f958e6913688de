"""What the TPU compiler reported of each program, kept on disk so a second plan is quick.

JAX's persistent compilation cache (`runtime/compile_cache.py`, `--compilation_cache`) cannot
serve `--mode=plan`: it stores the serialized executable, and a compile-only TPU client (the
devices of `topology.devices`, no TPU runtime) writes entries but cannot read one back
(libtpu 0.0.42: 'PjRtCompiler must be constructed with a Client to call
DeserializeLoadedExecutable'; JAX warns and compiles again). A plan needs only what it reads
of a compiled program: memory, cost and collectives (`compile._compiled_fields`), a few
hundred bytes of JSON instead of a 300 MB executable. `PlanCache` keeps those, keyed as
JAX keys its own cache: the lowered module (shapes, shardings, donation), the devices, the
versions of jax, jaxlib and libtpu, and the compiler's flags and options. A rerun lowers
every step again (seconds) and compiles none.
"""

import hashlib
import importlib.metadata
import json
import os
from typing import Any, Dict, Optional, Sequence

import jax

from t2t_jax.storage import paths

# The jax options that change what the compiler builds (jax._src.config), beside XLA_FLAGS.
# jax 0.11 keeps only jax_optimization_level of these: those this jax has.
COMPILER_OPTIONS = tuple(name for name in ('jax_exec_time_optimization_effort',
                                           'jax_memory_fitting_effort', 'jax_optimization_level',
                                           'jax_memory_fitting_level')
                         if hasattr(jax.config, name))
_FORMAT = 1  # bumped when a record's fields change


def _version(package: str) -> str:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return ''


# What `compile._compile` writes, field by field: a record of another format (an older or
# newer `_FORMAT`, an edited file) must be a miss, not a TypeError deep in the report.
_NUMBER = (int, float)
_COMPILED = {'compile_s': _NUMBER, 'compile_cpu_s': _NUMBER, 'argument_bytes': int,
             'output_bytes': int, 'alias_bytes': int, 'temp_bytes': int, 'code_bytes': int,
             'flops': _NUMBER, 'bytes_accessed': _NUMBER, 'collectives': list}
_REFUSED = {'compile_s': _NUMBER, 'compile_cpu_s': _NUMBER, 'does_not_fit': str,
            'needed_bytes': _NUMBER + (type(None),), 'available_bytes': _NUMBER + (type(None),)}
_COLLECTIVE = {'kind': str, 'count': int, 'bytes': int}


def _has_fields(value: Any, fields: Dict[str, Any]) -> bool:
  """Whether `value` is a dict holding each of `fields` with its type (bool is no number)."""
  return isinstance(value, dict) and all(
      name in value and isinstance(value[name], types) and not isinstance(value[name], bool)
      for name, types in fields.items())


def valid_record(record: Any) -> bool:
  """Whether `record` is a compile record as `compile._compile` writes it: the compiled
  program's fields, or a refusal (`does_not_fit`), with the types the report computes on."""
  if _has_fields(record, _REFUSED):
    return True
  return (_has_fields(record, _COMPILED) and
          all(_has_fields(c, _COLLECTIVE) for c in record['collectives']))


def _devices(args: Sequence[Any]) -> list:
  """(id, process, kind, coords) of every device the arguments' shardings name."""
  found = {}
  for leaf in jax.tree_util.tree_leaves(args):
    for d in getattr(getattr(leaf, 'sharding', None), 'device_set', ()):
      found[d.id] = (d.id, d.process_index, d.device_kind, list(getattr(d, 'coords', ())))
  return [found[i] for i in sorted(found)]


class PlanCache:
  """Compile records in `directory` (one `<sha256>.json` each, written atomically).

  A record that cannot be read, or that is not a record of this format (`valid_record`:
  every field, with its type), is a miss (the program is compiled and the record written
  again); a directory that cannot be written costs the speed-up, never the plan.
  """

  def __init__(self, directory: str):
    self.directory = os.path.abspath(os.path.expanduser(directory))
    self.hits = self.misses = 0

  def key(self, module_text: str, args: Sequence[Any]) -> str:
    """sha256 of everything the compiled program depends on."""
    options = {name: str(getattr(jax.config, name, None)) for name in COMPILER_OPTIONS}
    context = json.dumps([_FORMAT, jax.__version__, _version('jaxlib'), _version('libtpu'),
                          os.environ.get('XLA_FLAGS', ''),
                          os.environ.get('LIBTPU_INIT_ARGS', ''), options, _devices(args)])
    digest = hashlib.sha256(context.encode())
    digest.update(module_text.encode())
    return digest.hexdigest()

  def _path(self, key: str) -> str:
    return os.path.join(self.directory, key + '.json')

  def get(self, key: str) -> Optional[Dict[str, Any]]:
    """The record of `key`, or None (counted as a hit or a miss)."""
    try:
      with open(self._path(key), encoding='utf-8') as f:
        record = json.load(f)
      if not valid_record(record):
        raise ValueError('not a compile record of this format')
    except (OSError, ValueError):
      self.misses += 1
      return None
    self.hits += 1
    return record

  def put(self, key: str, record: Dict[str, Any]) -> None:
    # Atomic: a plan stopped by Ctrl-C kills its child process (`interruptible`), maybe
    # mid-write; a record is then whole or absent.
    try:
      os.makedirs(self.directory, exist_ok=True)
      paths.write_atomic(self._path(key), json.dumps(record, sort_keys=True).encode(),
                         overwrite=True)
    except OSError:
      pass  # a read-only or full cache directory: the next plan compiles again
