"""--mode=score's speed against CTranslate2's `score_batch` on the bundled test set (1010
reference translations, one trained run, read only), and how far the two agree.

Both sides score batches of `--rows` pairs sorted by length (ours by source then target
length; CTranslate2's `score_batch` sorts by length what `max_batch_size` splits), from
sentences tokenized beforehand (no tokenization timed). One untimed warm-up pass each (our
compilations, timed apart as `ours_first_pass_s`; CTranslate2's model load is outside; these
passes give the agreement), then `--repeats` rounds alternated by `harness.interleave`, so a
change of machine load hits both; pairs per second of the median pass, and the ratio ours /
CTranslate2 (> 1: ours is faster). Agreement: the largest and mean |difference| of the
per-pair log probabilities (EOS included).

  python -m benchmarks.peers.score --workdir RUN --scratch /tmp/serve \
      --out benchmarks/results/score.jsonl [--threads 2] [--rows 64]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from benchmarks.shared import harness, serving_common  # noqa: E402


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=3, help='timed passes of each side')
  parser.add_argument('--rows', type=int, default=64, help='pairs per batch, both sides')
  parser.add_argument('--pad-to', type=int, default=8, help="our score_pairs' pad_to")
  args = serving_common.add_args(parser).parse_args(argv)
  emit, run, sources, targets, ct2 = serving_common.start_against_ctranslate2(args)
  from t2t_jax.inference import score
  tok = run.tokenizer
  pairs = score.encode_pairs(sources, targets, tok.encode, tok.encode, run.cfg.max_len)
  ours_call = lambda: score.score_pairs(  # noqa: E731
      run.cfg, run.params, pairs, rows=args.rows, pad_to=args.pad_to)
  src_pieces, tgt_pieces = run.pieces(sources), run.pieces(targets)
  theirs_call = lambda: ct2.score_batch(src_pieces, tgt_pieces,  # noqa: E731
                                        max_batch_size=args.rows)
  ours, first_s = harness.time_call(ours_call)
  theirs = theirs_call()
  times = harness.interleave({'ours': ours_call, 'ctranslate2': theirs_call}, args.repeats,
                             warmup=0)
  ours_s, theirs_s = harness.summarize(times['ours']), harness.summarize(times['ctranslate2'])
  ours_lp = np.array([lp for lp, _ in ours])
  theirs_lp = np.array([sum(r.log_probs) for r in theirs])
  diff = np.abs(ours_lp - theirs_lp)
  emit({'name': 'score_vs_ctranslate2', 'checkpoint': run.description, 'pairs': len(pairs),
        'rows': args.rows, 'pad_to': args.pad_to, 'ctranslate2_threads': args.threads,
        'interleaved': True,
        'ours_first_pass_s': first_s, 'ours_s': ours_s, 'ctranslate2_s': theirs_s,
        'ours_pairs_per_s': len(pairs) / ours_s['median_s'],
        'ctranslate2_pairs_per_s': len(pairs) / theirs_s['median_s'],
        'ratio_ours_over_ctranslate2': theirs_s['median_s'] / ours_s['median_s'],
        'log_prob_max_abs_diff': float(diff.max()),
        'log_prob_mean_abs_diff': float(diff.mean())})


if __name__ == '__main__':
  main()
