"""Prints a results file (JSON lines from the benchmarks) as Markdown tables.

  python -m benchmarks.shared.summarize benchmarks/results/cpu.jsonl

The tables read only fields that records have had from the start (`date`, `load_average`
and each benchmark's numbers), so the records written before benchmarks/shared/harness.py (with
`versions` and `device` where newer ones have `machine`) print alike.
"""

import json
import sys


def _f(x, digits=2):
  if x is None:
    return '-'
  if isinstance(x, str):
    return x
  return f'{x:.{digits}f}'


def _matmul_row(r):
  return [r['date'], r['config']['dtype'], _f(r['jax']['gflops_per_s'], 1),
          _f(r.get('torch', {}).get('gflops_per_s'), 1), r['load_average']]


def _train_row(r):
  o, p = r['ours'], r.get('peer', {})
  e, c = p.get('eager', {}), p.get('compiled', {})
  return [r['config']['size'], r['shapes']['target_tokens'],
          _f(o['target_tokens_per_s'], 0), _f(e.get('target_tokens_per_s'), 0),
          _f(r.get('ratio_ours_over_peer_eager', {}).get('tokens_per_s')),
          _f(c.get('target_tokens_per_s'), 0) if c else p.get('compiled_error', '-')[:30],
          _f(r.get('ratio_ours_over_peer_compiled', {}).get('tokens_per_s')),
          _f(o['step_time']['median_s'], 3), _f(o['model_flops_per_s'] / 1e9, 1),
          _f(o['fraction_of_peak']), _f(e.get('fraction_of_peak')),
          _f((r['peak']['flops_per_s'] or 0) / 1e9, 1), _f(o['compile_s'], 1),
          o['compilations'], e.get('torch_threads', {}).get('threads', '-'), r['load_average']]


def _decode_row(r):
  o, p, s, c = r['ours'], r.get('peer', {}), r['shapes'], r['config']
  return [c['size'], f"{c['search']} {c['beam_size'] if c['beam_size'] > 1 else ''}",
          f"{s['batch']} x {s['src_len']}, {s['max_decode_len']}",
          _f(o['sentences_per_s']), _f(p.get('sentences_per_s')),
          _f(r.get('ratio_ours_over_peer', {}).get('sentences_per_s')),
          _f(o['generated_tokens_per_s'], 0), _f(p.get('generated_tokens_per_s'), 0),
          f"{o['steps']}/{p.get('steps', '-')}", _f(o.get('same_best_hypothesis_fraction')),
          _f(o['compile_s'], 1), p.get('torch_threads', {}).get('threads', '-'),
          r['load_average']]


def _plan_row(r):
  gib = lambda b: _f(b / 2 ** 30) if b else '-'  # noqa: E731
  over = ' '.join(r['overrides']) or '-'
  if 'error' in r:
    return [r['config_name'], r['dtype'], over, r['topology']] + ['-'] * 11 + [r['error']]
  steps, roof = r.get('steps', {}), r.get('roofline', {})
  train = max((s['hbm_bytes'] for n, s in steps.items() if n.startswith('train')),
              default=r['hbm_bytes_per_chip'])
  collectives = ', '.join(f"{c['kind']} x{c['count']} {c['bytes'] / 2 ** 20:.0f} MiB"
                          for c in r.get('collectives', []))
  hours = r.get('train_hours')
  return [r['config_name'], r['dtype'], over, f"{r['topology']} ({r['chips']})",
          f"{r['train_batch'][0]}x{r['train_batch'][1]}", gib(train),
          gib(steps.get('decode', {}).get('hbm_bytes')), gib(r['hbm_capacity_bytes_per_chip']),
          'yes' if r['fits'] else 'NO', f"{r['largest_tokens_per_batch']:,}"
          if r.get('largest_tokens_per_batch') else '-',
          _f(r['flops_per_step'] / r['analytic_flops_per_step']) if 'flops_per_step' in r
          else '-', collectives or '-',
          f"{1e3 * roof['compute_s']:.1f} / {1e3 * roof['hbm_s']:.1f} / {1e3 * roof['ici_s']:.1f}"
          if roof else '-', _f(1e3 * r['step_time_s'], 1) if 'step_time_s' in r else '-',
          _f(hours, 1) if hours else '-', r.get('compiler_message', '')]


# record name -> (column headers, row function)
TABLES = {
    'matmul_peak': (['matmul (jitted, 2048^3)', 'dtype', 'JAX GFLOP/s', 'torch GFLOP/s',
                     'load avg'], _matmul_row),
    'train_step': (['train step', 'target tokens', 'ours tok/s', 'peer eager tok/s',
                    'ours/eager', 'peer compiled tok/s', 'ours/compiled', 'ours step s',
                    'ours model GFLOP/s', 'ours / matmul peak', 'peer eager / matmul peak',
                    'matmul peak GFLOP/s', 'compile s', 'compilations', 'torch threads',
                    'load avg'], _train_row),
    'decode': (['decode', 'search', 'batch x src_len, max_len', 'ours sent/s', 'peer sent/s',
                'ours/peer', 'ours tok/s', 'peer tok/s', 'steps ours/peer', 'same best hyp',
                'compile s', 'torch threads', 'load avg'], _decode_row),
    'plan_tpu': (['plan', 'dtype', 'overrides', 'topology (chips)', 'train batch',
                  'train HBM GiB/chip', 'decode HBM GiB/chip', 'capacity GiB', 'fits',
                  'largest tokens_per_batch', 'XLA / analytic FLOPs', 'collectives per step',
                  'compute / HBM / ICI ms', 'roofline step ms', 'num_train_steps h',
                  'note'], _plan_row),
}


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  records = []
  for path in argv:
    with open(path) as f:
      records += [json.loads(line) for line in f if line.strip()]
  tables = []
  for name, (columns, row) in TABLES.items():
    rows = [row(r) for r in records if r.get('name') == name]
    if rows:
      tables.append('\n'.join(['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)] +
                              ['| ' + ' | '.join(str(c) for c in cells) + ' |' for cells in rows]))
  print('\n\n'.join(tables))


if __name__ == '__main__':
  main()
