"""`python main.py --mode=plan --config=... --topology=v5e:2x4 [--output=plan.json]`."""

import json
import sys
from typing import Optional

import ml_collections
from etils import epath

from t2t_jax.storage import paths
from t2t_jax.plan import report, topology


def run(config: ml_collections.ConfigDict, topology_name: Optional[str],
        output: Optional[str], *, search_batch: bool = True, all_shapes: bool = True,
        config_name: str = '', stream=sys.stdout) -> dict:
  """Plans `config` on `topology_name`, prints the plan, writes it to `output` as JSON.

  Every check that needs no compilation comes first (topology name, libtpu, --output), so a
  mistake costs milliseconds, not minutes. A config that does not fit is written and printed
  like any other, then reported as a PlanError (one line: by how much, the largest batch
  that fits). `all_shapes` False compiles the train step at the largest batch shape alone,
  not at every bucket's (a quicker plan, without the run's total compile time).

  Raises:
    topology.TopologyError, report.PlanError, FileExistsError: one-line reasons.
  """
  if not topology_name:
    raise report.PlanError(f'--mode=plan needs --topology=NAME, e.g. {topology.EXAMPLES}')
  topology.parse(topology_name)
  topology.check_compiler()
  if output and epath.Path(output).exists():
    raise FileExistsError(f'--output={output} already exists; choose another file or remove it')
  plan = report.make_plan(config, topology_name, search_batch=search_batch,
                          all_shapes=all_shapes)
  stream.write(report.format_plan(plan, config_name) + '\n')
  if output:
    paths.write_atomic(output, (json.dumps(plan, indent=2, sort_keys=True) + '\n').encode())
    stream.write(f'wrote {output}\n')
  report.check_fits(plan)
  return plan
