"""Beam search with and without finished sentences leaving the batch, by batch size.

The bundled EN-ES test set (1010 sentences) translated by `translate.Translator` of a trained
run (read only), beam 4, alpha 0.6, `portable.default_threads()` batches at once, for each
`--rows` R in two ways:

  single@R      one program a batch (`batch_search.sharded_decoder` on one device): every row
                runs until the batch's last sentence stops;
  compacting@R  `batch_search.compacting_decoder`: the search in segments, the live sentences
                gathered into a batch of R/2, R/8, R/32 ... as the others finish
                (`compaction.levels`).

`Translator` itself picks compacting from `compaction.MIN_ROWS` rows (`batch_search.decoder`).
One untimed pass each (its compilations, timed apart), then `--rounds` passes interleaved
(`harness.interleave`); sentences/s of the median pass, and how many translations are those
of the first system.

  python -m benchmarks.peers.compaction --workdir RUN --rows 4,16,64 \
      --out benchmarks/results/compaction.jsonl
"""

import argparse
import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import harness  # noqa: E402


def _translator(workdir: str, rows: int, compacting: bool):
  from t2t_jax.inference import batch_search, translate
  tr = translate.Translator.from_workdir(workdir, batch_sentences=rows, parallelism='threads')
  make = (batch_search.compacting_decoder if compacting else
          lambda m, k, a, n_best: batch_search.sharded_decoder(m, k, a, tr.mesh, n_best))
  tr._decode = make(tr.model, tr.beam_size, tr.alpha, False)  # pylint: disable=protected-access
  return tr


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workdir', required=True, help="a trained run's folder")
  parser.add_argument('--rows', default='4,16,64', help='comma list of batch sizes')
  parser.add_argument('--rounds', type=int, default=3, help='timed passes of each system')
  harness.add_out_argument(parser)
  args = parser.parse_args(argv)
  harness.start_jax()
  from t2t_jax.inference import translate
  path = os.path.join(os.path.dirname(translate.__file__), '..', 'data', 'bible_en_es',
                      'test.en.gz')
  with gzip.open(path, 'rt', encoding='utf-8') as f:
    sources = [line.rstrip('\n') for line in f]
  systems, first_s, outputs = {}, {}, {}
  for rows in (int(r) for r in args.rows.split(',')):
    for compacting in (False, True):
      name = f'{"compacting" if compacting else "single"}@{rows}'
      tr = _translator(args.workdir, rows, compacting)
      systems[name] = lambda tr=tr: tr.translate_ids(sources)
      outputs[name], first_s[name] = harness.time_call(systems[name])
      print(f'{name}: first pass {first_s[name]:.1f} s', file=sys.stderr)
  reference = next(iter(outputs.values()))
  times = harness.interleave(systems, args.rounds, warmup=0)
  summary = harness.summaries(times)
  record = {'name': 'compaction', 'workdir': args.workdir, 'sentences': len(sources),
            'rounds': args.rounds, 'results': {
                name: {'first_pass_s': first_s[name], 'passes_s': times[name],
                       'sentences_per_s': len(sources) / summary[name]['median_s'],
                       'identical_to_first': sum(a == b for a, b in zip(outputs[name],
                                                                        reference))}
                for name in systems}}
  for name, r in record['results'].items():
    print(f'{name:>14}: {r["sentences_per_s"]:.1f} sentences/s (first pass '
          f'{r["first_pass_s"]:.1f} s), {r["identical_to_first"]} as the first', file=sys.stderr)
  return harness.Emitter(args.out)(record)


if __name__ == '__main__':
  main()
