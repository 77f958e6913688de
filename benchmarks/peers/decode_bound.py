"""What a beam step of ours must cost to match CTranslate2, beside what its GEMMs cost, on one
core.

The process pins itself to one core (`os.sched_setaffinity`, before jax starts, so XLA's
thread pool has one thread; CTranslate2 gets intra_threads=1, inter_threads=1), then, on the
bundled test set (1010 sentences, beam 4, alpha 0.6), times interleaved passes of
  ours@R  `translate.Translator` of the trained run at R rows a batch, one program a batch
          (`batch_search.sharded_decoder`, as `Translator` runs below `compaction.MIN_ROWS`
          rows; every row runs until the batch's last sentence stops);
  ct2@R   CTranslate2 float32 (`--ct2` model folder, as `serve.py` exports it), max_batch_size R;
and each matrix product of one decoder step at R x beam hypotheses (per layer the self-
attention's query, key, value and output, the cross-attention's query and output, the FFN's
two; then the vocabulary projection), each timed inside one jitted `fori_loop` of many
iterations, so no dispatch between them is counted (`gemms`). The attention's own
score and value products (one query against the cache) are left out: a few percent of the
step's FLOPs.

From `--stopping` (`benchmarks/peers/stopping.py`'s record of the same run) come the
row-steps (sentences x steps) a sentence costs: ours at R rows in one program, and the exact
floor (`best_only`: every sentence stops the step its best can no longer change, and leaves
the batch then). The record gives, in microseconds per row-step (one sentence, its beam of 4):
  ours_us            ours@R's seconds over its row-steps;
  gemm_us            the step's GEMMs at their own in-loop rate;
  needed_at_floor_us CTranslate2's seconds over the floor's row-steps: what a row-step of
                     ours would have to cost for 1.0x even if no sentence ran a step past
                     its own end.

  python -m benchmarks.peers.decode_bound --workdir RUN --ct2 SCRATCH/ct2_float32 \\
      --stopping benchmarks/results/stopping.jsonl --out benchmarks/results/decode_bound.jsonl
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import harness  # noqa: E402

# (name, k, n, per layer): the decoder step's products [m, k] x [k, n]; None: once a step.
_GEMMS = (('self q/k/v/out, cross q/out', 'd', 'd', 6), ('ffn wi', 'd', 'f', 1),
          ('ffn wo', 'f', 'd', 1), ('vocabulary projection', 'd', 'v', None))


def step_gemms(d_model: int, d_ff: int, vocab: int, layers: int) -> List[Tuple[str, int, int,
                                                                                int]]:
  """[(name, k, n, count a step)] of one decoder step's matrix products."""
  dims = {'d': d_model, 'f': d_ff, 'v': vocab}
  return [(name, dims[k], dims[n], layers * per if per else 1) for name, k, n, per in _GEMMS]


def in_loop_seconds(m: int, k: int, n: int, rounds: int = 5, flops: float = 1e9) -> float:
  """Seconds of one [m, k] x [k, n] float32 product, as the fastest of `rounds` calls of a
  jitted loop of products worth about `flops` (each adds the step index to the left operand,
  so none is hoisted; that add, m x k, is counted with the product)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  iters = max(20, int(flops / (2 * m * k * n)))
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((m, k), np.float32))
  w = jnp.asarray(rng.standard_normal((k, n), np.float32))

  @jax.jit
  def loop(x, w):
    body = lambda i, acc: acc + (x + i.astype(jnp.float32)) @ w  # noqa: E731
    return jax.lax.fori_loop(0, iters, body, jnp.zeros((m, n), jnp.float32))
  loop(x, w).block_until_ready()
  return min(harness.time_call(lambda: loop(x, w).block_until_ready())[1]
             for _ in range(rounds)) / iters


def row_steps(stopping_path: str, workdir: str, rows: int) -> Tuple[float, float]:
  """(ours' row-steps a sentence at `rows` in one program, the exact floor) from the newest
  `stopping` record of `workdir`."""
  with open(stopping_path, encoding='utf-8') as f:
    records = [r for r in map(json.loads, f) if r.get('name') == 'stopping'
               and os.path.realpath(r['workdir']) == os.path.realpath(workdir)]
  if not records:
    raise SystemExit(f'{stopping_path}: no stopping record of {workdir}; run '
                     'benchmarks.peers.stopping on it first')
  best_only = records[-1]['rules']['best_only']
  return best_only['row_steps_per_sentence'][str(rows)], best_only['steps_per_sentence']


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workdir', required=True, help="a trained run's folder (only read)")
  parser.add_argument('--ct2', required=True, help="its CTranslate2 float32 export's folder")
  parser.add_argument('--stopping', required=True, help="stopping.py's records (JSON lines)")
  parser.add_argument('--rows', type=int, default=4, help="ours' sentences a batch")
  parser.add_argument('--ct2-rows', type=int, default=64, help="CTranslate2's max_batch_size")
  parser.add_argument('--rounds', type=int, default=3, help='timed passes of each system')
  harness.add_out_argument(parser)
  args = parser.parse_args(argv)
  if min(args.rows, args.ct2_rows, args.rounds) < 1:
    parser.error('--rows, --ct2-rows and --rounds must be at least 1')
  ours_row_steps, floor = row_steps(args.stopping, args.workdir, args.rows)
  os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
  harness.start_jax()
  ours, systems, sources = _systems(args)
  outputs = {name: harness.time_call(call)[0] for name, call in systems.items()}
  passes = harness.interleave(systems, args.rounds, warmup=0)
  record = _record(args, ours.cfg, ours.beam_size, passes, len(sources), ours_row_steps, floor)
  record['ours_best_equal_ct2'] = sum(a == b for a, b in zip(*outputs.values()))
  _report(record)
  return harness.Emitter(args.out)(record)


def _systems(args):
  """(our Translator, {name: a pass over the test set}, the sources)."""
  import ctranslate2
  from benchmarks.shared import serving_common
  from t2t_jax.export import ctranslate2_decoding
  from t2t_jax.inference import batch_search, translate
  run = serving_common.load_run(args.workdir)
  sources = serving_common.test_set('en', None)
  ours = translate.Translator.from_workdir(args.workdir, batch_sentences=args.rows)
  # The single program at every R (Translator compacts from compaction.MIN_ROWS rows), so
  # that stopping.py's row-steps are this system's.
  ours._decode = batch_search.sharded_decoder(  # pylint: disable=protected-access
      ours.model, ours.beam_size, ours.alpha, ours.mesh, False)
  ct2 = ctranslate2.Translator(args.ct2, device='cpu', inter_threads=1, intra_threads=1)
  pieces, c = run.pieces(sources), run.config
  return ours, {f'ours@{args.rows}': lambda: [run.tokenizer.pieces(ids) for ids in
                                        ours.translate_ids(sources)],
          f'ct2@{args.ct2_rows}': lambda: ctranslate2_decoding.translate(
              ct2, pieces, beam_size=c.beam_size, alpha=c.length_penalty_alpha,
              max_decode_extra=c.max_decode_extra, max_len=c.max_len,
              max_batch_size=args.ct2_rows, exact_lengths=False)}, sources


def _record(args, cfg, beam: int, passes: Dict[str, List[float]], sentences: int,
            ours_row_steps: float, floor: float) -> Dict:
  times = harness.summaries(passes)
  gemms = [(name, k, n, count, in_loop_seconds(args.rows * beam, k, n))
           for name, k, n, count in step_gemms(cfg.d_model, cfg.d_ff, cfg.vocab_size,
                                               cfg.num_layers)]
  gemm_row_step = sum(count * s for *_, count, s in gemms) / args.rows
  ours_s, ct2_s = (times[name]['median_s'] for name in (f'ours@{args.rows}',
                                                         f'ct2@{args.ct2_rows}'))
  return {
      'name': 'decode_bound', 'workdir': args.workdir, 'sentences': sentences, 'cores': 1,
      'rows': args.rows, 'ct2_rows': args.ct2_rows, 'beam': beam, 'rounds': args.rounds,
      'ours_sentences_per_s': sentences / ours_s, 'ct2_sentences_per_s': sentences / ct2_s,
      'ours_row_steps_per_sentence': ours_row_steps, 'floor_row_steps_per_sentence': floor,
      'ours_us': ours_s / (sentences * ours_row_steps) * 1e6,
      'gemm_us': gemm_row_step * 1e6,
      'needed_at_floor_us': ct2_s / (sentences * floor) * 1e6,
      'gemms': [{'name': name, 'm': args.rows * beam, 'k': k, 'n': n, 'count': count,
                 'seconds': s, 'gflop_per_s': 2 * args.rows * beam * k * n / s / 1e9}
                for name, k, n, count, s in gemms],
      'passes_s': passes}


def _report(r: Dict) -> None:
  print(f"one core: ours@{r['rows']} {r['ours_sentences_per_s']:.1f} sentences/s, "
        f"CTranslate2@{r['ct2_rows']} {r['ct2_sentences_per_s']:.1f} "
        f"({r['ours_sentences_per_s'] / r['ct2_sentences_per_s']:.2f}x); best translations "
        f"equal {r['ours_best_equal_ct2']}/{r['sentences']}", file=sys.stderr)
  print(f"a row-step: ours {r['ours_us']:.0f} us ({r['ours_row_steps_per_sentence']:.1f} a "
        f"sentence), its GEMMs {r['gemm_us']:.0f} us; for 1.0x at the floor "
        f"({r['floor_row_steps_per_sentence']:.1f}) it may cost {r['needed_at_floor_us']:.0f} us",
        file=sys.stderr)
  for g in r['gemms']:
    print(f"  {g['name']:28s} [{g['m']}, {g['k']}] x [{g['k']}, {g['n']}] x{g['count']}: "
          f"{g['seconds'] * 1e6:.1f} us ({g['gflop_per_s']:.0f} GFLOP/s)", file=sys.stderr)


if __name__ == '__main__':
  main()
