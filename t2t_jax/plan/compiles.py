"""The compilations a run pays before its steady step: every train, eval and decode shape.

XLA compiles a jitted step once per argument shape, and a TPU host compiles the paper's
unrolled base train step in minutes of CPU: a run is steady only once every shape it uses has
compiled. Those are the train step at each batch shape (`Run.train_shapes`: one per bucket,
or the one packed shape), the dev-loss step at each eval bucket when the run evaluates
(`eval_every_steps`, or a `final_eval_split`), and beam search (§6.1) at each decode shape
when it decodes (dev BLEU: `eval_bleu_sentences` with `eval_every_steps`; or a
`final_eval_split`). `fields` compiles each (the largest of each kind is already compiled by
`report`), and `lines` prints one line per shape and the sums; `run_compile_s` is the total.
"""

from typing import Any, Callable, Dict, List, Sequence, Tuple

from t2t_jax.plan import compile as compile_lib

Stats = List[compile_lib.StepStats]


def run_parts(config: Any) -> List[str]:
  """The kinds of step a training run with `config` compiles: 'train', 'eval', 'decode'."""
  evaluates = bool(config.eval_every_steps) or bool(config.final_eval_split)
  decodes = (bool(config.eval_every_steps) and config.eval_bleu_sentences > 0) or bool(
      config.final_eval_split)
  return ['train'] + (['eval'] if evaluates else []) + (['decode'] if decodes else [])


def programs(run: compile_lib.Run, parts: Sequence[str] = ('train', 'eval', 'decode')
             ) -> List[Tuple[str, Callable[[], Stats]]]:
  """(label, compile) of every program of `parts` that `run` compiles, shortest shape first
  per kind: 'train 96x256', 'eval 384x64', 'decode 64x64->114'. Each compile returns its
  programs' stats (the train step with gradient accumulation is two)."""
  out: List[Tuple[str, Callable[[], Stats]]] = []
  if 'train' in parts:
    out += [(f'train {r}x{n}', lambda s=(r, n): run.compile_train(*s))
            for r, n in run.train_shapes()]
  if 'eval' in parts:
    out += [(f'eval {r}x{n}', lambda s=(r, n): [run.compile_eval(*s)])
            for r, n in run.eval_shapes()]
  if 'decode' in parts:
    out += [('decode {}x{}->{}'.format(*s), lambda s=s: [run.compile_decode(s)])
            for s in run.decode_shapes()]
  return out


def _record(shape: Dict[str, List[int]], compile_fn: Callable[[], Stats]) -> Dict[str, Any]:
  """{**shape, compile_s, compile_cpu_s, hbm_bytes, cached, spent_s} of one shape's programs
  (summed), or {**shape, does_not_fit, needed_bytes} when the chip cannot hold it."""
  try:
    stats = compile_fn()
  except compile_lib.DoesNotFit as e:
    return {**shape, 'does_not_fit': str(e), 'needed_bytes': e.needed_bytes}
  return {**shape, 'compile_s': round(sum(s.compile_s for s in stats), 1),
          'compile_cpu_s': round(sum(s.compile_cpu_s for s in stats), 1),
          'hbm_bytes': max(s.hbm_bytes for s in stats),
          'cached': all(s.cached for s in stats),
          'spent_s': round(sum(s.spent_s for s in stats), 1)}


def _compiles(shapes: Sequence[Tuple[int, ...]], largest: Stats,
              describe: Callable[[Tuple[int, ...]], Dict[str, List[int]]],
              compile_fn: Callable[[Tuple[int, ...]], Stats],
              all_shapes: bool) -> List[Dict[str, Any]]:
  """One `_record` per shape, shortest first; the last shape's programs are `largest`,
  already compiled. `all_shapes` False: the last alone."""
  shapes = list(shapes) if all_shapes else list(shapes[-1:])
  return [_record(describe(shape), (lambda: largest) if i == len(shapes) - 1 else
                  (lambda shape=shape: compile_fn(shape))) for i, shape in enumerate(shapes)]


def _total(records: List[Dict[str, Any]], key: str = 'compile_s') -> float:
  return round(sum(r.get(key, 0.0) for r in records), 1)


def fields(run: compile_lib.Run, train: Stats, evaluated: compile_lib.StepStats,
           decoded: compile_lib.StepStats, all_shapes: bool) -> Dict[str, Any]:
  """The plan's compile keys (documented in `report.make_plan`). `train`, `evaluated`,
  `decoded`: the programs of the largest train, eval and decode shapes."""
  train_shapes, eval_shapes = run.train_shapes(), run.eval_shapes()
  decode_shapes = run.decode_shapes()
  # Gradient accumulation's apply step has one shape per run: compiled with the largest.
  kinds = {
      'train': _compiles(train_shapes, train, lambda s: {'batch': list(s)},
                         lambda s: run.compile_train(*s, apply=False), all_shapes),
      'eval': _compiles(eval_shapes, [evaluated], lambda s: {'batch': list(s)},
                        lambda s: [run.compile_eval(*s)], all_shapes),
      'decode': _compiles(decode_shapes, [decoded],
                          lambda s: {'inputs': [s[0], s[1]], 'outputs': [s[0], s[2]]},
                          lambda s: [run.compile_decode(s)], all_shapes),
  }
  parts = run_parts(run.config)
  result: Dict[str, Any] = {'all_shapes': all_shapes, 'run_compile_parts': parts}
  for kind, records in kinds.items():
    result.update({f'{kind}_compiles': records, f'{kind}_compile_s': _total(records),
                   f'{kind}_compile_cpu_s': _total(records, 'compile_cpu_s')})
  result.update(train_shape_count=len(train_shapes), eval_shape_count=len(eval_shapes),
                decode_shape_count=len(decode_shapes))
  every = [r for records in kinds.values() for r in records]
  result.update(
      run_compile_s=round(sum(result[f'{k}_compile_s'] for k in parts), 1),
      run_compile_cpu_s=round(sum(result[f'{k}_compile_cpu_s'] for k in parts), 1),
      plan_compile_s=_total(every, 'spent_s'),
      plan_cache_hits=sum(1 for r in every if r.get('cached')))
  return result


_TITLES = {'train': ('train-step compiles', 'batch shape(s)', ' the run uses'),
           'eval': ('eval-step compiles', 'dev-loss batch shape(s)', ''),
           'decode': ('decode compiles', 'beam-search shape(s)', ', sentences x source -> output')}


_VERBS = {'eval': 'evaluate', 'decode': 'decode'}


def _shape_text(record: Dict[str, Any]) -> str:
  if 'batch' in record:
    return ' x '.join(map(str, record['batch']))
  (rows, source), (_, output) = record['inputs'], record['outputs']
  return f'{rows} x {source} -> {output}'


def _kind_lines(plan: Dict[str, Any], kind: str) -> List[str]:
  """One line per shape of `kind` with its compile seconds, then their sum."""
  title, what, suffix = _TITLES[kind]
  count = plan[f'{kind}_shape_count']
  which = (f'{count} {what}{suffix}' if plan['all_shapes'] else
           f'the largest of the run\'s {count} {what} only')
  lines = [f'{title} ({which}):']
  for r in plan[f'{kind}_compiles']:
    lines.append(f'  {_shape_text(r)}: ' + (
        f'does not fit: {r["does_not_fit"]}' if 'does_not_fit' in r else
        f'{r["compile_s"]:.1f} s; HBM {r["hbm_bytes"] / 2 ** 30:.2f} GiB'))
  alone = '' if plan['all_shapes'] else ' (the largest alone)'
  if kind == 'train':
    lines.append(f'  sum: {plan["train_compile_s"]:.1f} s of compiling before every shape has '
                 'run once' + alone)
  else:
    lines.append(f'  sum: {plan[f"{kind}_compile_s"]:.1f} s{alone}')
  return lines


def lines(plan: Dict[str, Any]) -> List[str]:
  """The compile lines of `format_plan`: each kind's shapes, then the run's total."""
  out = [line for kind in ('train', 'eval', 'decode') for line in _kind_lines(plan, kind)]
  parts = plan['run_compile_parts']
  skipped = [k for k in ('eval', 'decode') if k not in parts]
  out.append(
      f'run compiles: {plan["run_compile_s"]:.1f} s ({" + ".join(parts)}; '
      f'{plan["run_compile_cpu_s"]:.0f} CPU s) before the first steady step' +
      (f'; the run does not {" or ".join(_VERBS[k] for k in skipped)}' if skipped else '') +
      ('' if plan['all_shapes'] else ' (the largest shapes alone)'))
  if plan['plan_cache_hits']:
    total = sum(len(plan[f'{k}_compiles']) for k in ('train', 'eval', 'decode'))
    out.append(f'  ({plan["plan_cache_hits"]} of {total} read from the plan cache: this plan '
               f'spent {plan["plan_compile_s"]:.1f} s on them; the seconds above are their '
               'first compiles)')
  return out
