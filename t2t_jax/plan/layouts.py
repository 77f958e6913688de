"""`--mode=plan --plan_meshes='data:-1;fsdp:-1;data:-1,tensor:4'`: the train step of each mesh
layout compiled for one TPU topology (its largest batch shape, no batch search), side by side,
and the layout the plan would choose: among those whose train step fits the chip's HBM, the one
with the shortest roofline step (compute or HBM traffic, plus the interconnect time of its
collectives, `roofline.py`); data parallelism when it fits as fast, being the simplest.

Only the train step is compiled: the mesh is what changes it. Evaluation runs beside it, and
decoding holds the parameters whole on each decoding chip whatever the mesh (a plain
`--mode=plan --config.mesh=...` plans those too).
"""

from typing import Any, Dict, List, Optional

import ml_collections

from t2t_jax.plan import cache as cache_lib, compile as compile_lib, report, topology


def plan_layouts(config: ml_collections.ConfigDict, topology_name: str, specs: List[str],
                 cache_dir: Optional[str] = None) -> Dict[str, Any]:
  """{'layouts': [{mesh, fits, hbm_bytes_per_chip, memory, step_time_s, roofline,
  collectives} or {mesh, error}], 'chosen': a mesh or None, 'reason': why}."""
  topo = topology.parse(topology_name)
  cache = cache_lib.PlanCache(cache_dir) if cache_dir else None
  rows = []
  for spec in specs:
    layout = ml_collections.ConfigDict(config.to_dict())
    layout.mesh = spec
    try:
      run = compile_lib.Run(layout, topology.devices(topo), cache)
      rows.append(_layout(layout, run, topo, spec))
    except ValueError as e:  # a mesh the model cannot be split over, named in one line
      rows.append({'mesh': spec, 'error': str(e)})
  return dict(layouts=rows, **_choice(rows))


def _layout(config: ml_collections.ConfigDict, run: compile_lib.Run, topo: Any,
            spec: str) -> Dict[str, Any]:
  chip, chips = topo.chip, run.mesh.devices.size
  row = {'mesh': spec, 'topology': topo.name, 'chips': chips,
         'hbm_capacity_bytes_per_chip': chip.hbm_bytes, 'memory': run.state_bytes(),
         'step_time_s': None, 'roofline': None, 'collectives': []}
  rows, length, train = report.train_stats(run)
  row['train_batch'] = [rows, length]
  if isinstance(train, compile_lib.DoesNotFit):
    return dict(row, fits=False, hbm_bytes_per_chip=train.needed_bytes)
  _, _, collectives, times = report.train_roofline(config, run, train, chip, chips)
  hbm = max(s.hbm_bytes for s in train)
  return dict(row, fits=hbm <= chip.hbm_bytes, hbm_bytes_per_chip=hbm,
              step_time_s=times['step_s'], roofline=times, collectives=collectives)


def _choice(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
  fitting = [r for r in rows if r.get('fits')]
  if not fitting:
    return {'chosen': None, 'reason': 'none of the layouts fits: add chips, '
            "--config.remat_policy=full or --config.dtype=bfloat16, or split more ('fsdp')"}
  best = min(fitting, key=lambda r: (r['step_time_s'], r['mesh'].count(',')))
  others = [r for r in rows if r is not best]
  why = (f"{best['mesh']} fits ({report.gib(best['hbm_bytes_per_chip'])} of "
         f"{report.gib(best['hbm_capacity_bytes_per_chip'])} per chip) with the shortest "
         f"roofline step of the {len(fitting)} that fit ({1e3 * best['step_time_s']:.1f} ms)")
  unfit = [r['mesh'] for r in others if r.get('fits') is False]
  if unfit:
    why += f"; {', '.join(unfit)} do not fit"
  return {'chosen': best['mesh'], 'reason': why}


def format_layouts(result: Dict[str, Any]) -> str:
  """The table `--plan_meshes` prints, and the choice."""
  rows = result['layouts']
  head = next((r for r in rows if 'topology' in r), None)
  lines = [f"mesh layouts on {head['topology']} ({head['chips']} chips):" if head else
           'mesh layouts:',
           f"  {'mesh':<24} {'HBM/chip':>10} {'params':>9} {'optimizer':>9} {'fits':>4} "
           f"{'step (roofline)':>15}  collectives"]
  for r in rows:
    if 'error' in r:
      lines.append(f"  {r['mesh']:<24} refused: {r['error']}")
      continue
    memory = r['memory']
    step = '-' if r['step_time_s'] is None else f"{1e3 * r['step_time_s']:.1f} ms"
    lines.append(f"  {r['mesh']:<24} {report.gib(r['hbm_bytes_per_chip']):>10} "
                 f"{report.gib(memory['params']):>9} {report.gib(memory['optimizer_state']):>9} "
                 f"{'yes' if r['fits'] else 'NO':>4} {step:>15}  "
                 f"{report.collectives_text(r['collectives']) if r['collectives'] else '-'}")
  lines.append(f"chosen: {result['chosen'] or 'none'} ({result['reason']})")
  return '\n'.join(lines)
