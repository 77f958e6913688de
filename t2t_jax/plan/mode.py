"""`python main.py --mode=plan --config=... --topology=v5e:2x4 [--output=plan.json]`."""

import json
import os
import sys
from typing import Optional, Sequence

import jax
import ml_collections
from etils import epath

from t2t_jax.runtime import compile_cache, interruptible
from t2t_jax.storage import outputs, paths, workdir
from t2t_jax.plan import cache, layouts, report, topology


# What the caller may have set in `jax.config` that the plan depends on: the child process
# of `interruptible.call` starts with jax's defaults (and this process's environment).
_JAX_OPTIONS = ('jax_platforms', 'jax_enable_x64') + cache.COMPILER_OPTIONS


def _make_plan(make_plan, options: dict, *args, **kwargs) -> dict:
  """`make_plan(*args, **kwargs)` (`report.make_plan`) with this process's jax `options`:
  what the child process of `interruptible.call` runs."""
  for name, value in options.items():
    jax.config.update(name, value)
  return make_plan(*args, **kwargs)


def cache_dir(compilation_cache: Optional[str]) -> Optional[str]:
  """The plan cache (`cache.PlanCache`): `plan/` in the compilation cache directory
  (`--compilation_cache`; None: its default, `compile_cache.default_dir`; '': off)."""
  base = compile_cache.default_dir() if compilation_cache is None else compilation_cache
  return os.path.join(base, 'plan') if base else None


def run(config: ml_collections.ConfigDict, topology_name: Optional[str],
        output: Optional[str], *, search_batch: bool = True, all_shapes: bool = True,
        config_name: str = '', compilation_cache: Optional[str] = None,
        stream=sys.stdout, mesh_specs: Sequence[str] = ()) -> dict:
  """Plans `config` on `topology_name`, prints the plan, writes it to `output` as JSON.

  Every check that needs no compilation comes first (topology name, --output and its folder,
  libtpu), so a mistake costs milliseconds, not minutes. A config that does not fit is
  written and printed like any other, then reported as a PlanError (one line: by how much,
  the largest batch that fits). `all_shapes` False compiles the train step at the largest
  batch shape alone, not at every bucket's (a quicker plan, without the run's total compile
  time). What each compilation reported is kept in `cache_dir(compilation_cache)`, so
  planning the same programs again takes seconds. `mesh_specs` (`--plan_meshes`): each
  layout's train step instead, side by side, and the one chosen (`layouts.py`).

  Raises:
    topology.TopologyError, report.PlanError, FileExistsError, WorkdirError: one-line
      reasons.
  """
  if not topology_name:
    raise report.PlanError(f'--mode=plan needs --topology=NAME, e.g. {topology.EXAMPLES}')
  topology.parse(topology_name)
  if output and epath.Path(output).exists():
    raise FileExistsError(f'--output={output} already exists; choose another file or remove it')
  if output:
    outputs.check_writable(output)  # in a file, read-only or full: one line, before compiling
  topology.check_compiler()
  # In a child process: Ctrl-C or SIGTERM during a compile of minutes stops the plan at once,
  # not when XLA returns, whatever XLA does with the GIL (`interruptible`).
  options = {name: getattr(jax.config, name) for name in _JAX_OPTIONS}
  if mesh_specs:  # several layouts side by side, and the one it would choose
    result = interruptible.call(_make_plan, layouts.plan_layouts, options, config,
                                topology_name, mesh_specs, cache_dir(compilation_cache))
    interruptible.raise_if_signalled()
    stream.write(layouts.format_layouts(result) + '\n')
    _write(output, result, stream)
    return result
  plan = interruptible.call(_make_plan, report.make_plan, options, config, topology_name,
                            search_batch=search_batch, all_shapes=all_shapes,
                            cache_dir=cache_dir(compilation_cache))
  interruptible.raise_if_signalled()  # one swallowed on the way: no plan printed or written
  stream.write(report.format_plan(plan, config_name) + '\n')
  _write(output, plan, stream)
  report.check_fits(plan)
  return plan


def _write(output: Optional[str], result: dict, stream) -> None:
  """`result` as JSON into `output` (none: nothing)."""
  if output:
    interruptible.raise_if_signalled()
    with workdir.writing(output):  # a disk full by now: one line naming the file
      paths.write_atomic(output, (json.dumps(result, indent=2, sort_keys=True) + '\n').encode())
    stream.write(f'wrote {output}\n')
