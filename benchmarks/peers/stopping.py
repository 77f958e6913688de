"""How many decode steps each stopping rule takes, sentence by sentence, on a trained run.

A beam search's work is rows x steps. This counts the steps, not the seconds: every sentence
of the bundled test set decoded alone (its own while loop, so no batch mate's length hides its
own), beam 4, alpha 0.6, max length source + 50, under three rules for when a sentence stops:

  paper       ours (`search.beam_search`): it holds K finished hypotheses and the best live
              one cannot beat the worst of them at any length it can still reach;
  best_only   ours for the best hypothesis only (`best_only=True`, `decode_batch`): one
              finished, and the best live one cannot beat it (the same best, exactly);
  k_finished  CTranslate2's (patience 1): it holds K finished hypotheses, no bound checked.

Also per rule: how often the best hypothesis equals `paper`'s, and the rows x steps a sentence
costs when `--rows` sentences decode together, shortest sources first as
`portable.batches` groups them (a batch runs until its last sentence stops) against the sum of
the sentences' own steps (what removing finished sentences from the batch would leave).

  python -m benchmarks.peers.stopping --workdir RUN --out benchmarks/results/stopping.jsonl
"""

import argparse
import contextlib
import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import harness  # noqa: E402

RULES = ('paper', 'best_only', 'k_finished')


@contextlib.contextmanager
def _rule(name: str):
  """`search._finished_sentences` as `name` decides (k_finished: patched for the block)."""
  from t2t_jax.model import search
  original = search._finished_sentences  # pylint: disable=protected-access

  def k_finished(n, live_lp, live_ok, fin_scores, fin_ok, *, max_lengths, alpha, rank):
    del live_lp, fin_scores, alpha, rank
    return (n >= max_lengths) | ~live_ok[:, 0] | fin_ok[:, -1]

  if name == 'k_finished':
    search._finished_sentences = k_finished  # pylint: disable=protected-access
  try:
    yield name == 'best_only'
  finally:
    search._finished_sentences = original  # pylint: disable=protected-access


def _decoder(translator, best_only: bool):
  """jitted (params, inputs [1, S], max_lengths [1], L static) -> (best [L], steps)."""
  import functools
  import jax
  from t2t_jax.model import beam_decode, incremental, search
  model = translator.model

  @functools.partial(jax.jit, static_argnums=3)
  def run(params, inputs, max_lengths, length):
    logits_fn, cache, grow = beam_decode._decoder(  # pylint: disable=protected-access
        model, params, inputs, length, True, ancestry=True)
    seqs, _, steps = search._search(  # pylint: disable=protected-access
        logits_fn, cache, batch_size=1, beam_size=translator.beam_size,
        alpha=translator.alpha, max_decode_len=length, max_lengths=max_lengths,
        eos_id=beam_decode.EOS_ID, bos_id=beam_decode.BOS_ID, grow_cache=grow,
        reorder_cache=incremental.reorder_cache, best_only=best_only)
    return seqs[0, 0], steps
  return run


def count_steps(translator, encoded, rule: str):
  """Per sentence (a list of ids each): (steps, best hypothesis as a tuple of ids)."""
  import numpy as np
  from t2t_jax.inference import portable
  out = []
  with _rule(rule) as best_only:
    run = _decoder(translator, best_only)
    for ids in encoded:
      src_len = portable.source_length(len(ids), translator.bucket_lengths,
                                       translator.cfg.max_len)
      length = min(src_len + translator.max_decode_extra, translator.cfg.max_len)
      inputs = np.zeros((1, src_len), np.int32)
      inputs[0, :len(ids)] = ids
      limit = np.array([min(len(ids) + translator.max_decode_extra, length)], np.int32)
      best, steps = run(translator.params, inputs, limit, length)
      out.append((int(steps), tuple(portable.until_eos(np.asarray(best).tolist()))))
  return out


def row_steps(lengths, steps, rows: int) -> float:
  """Rows x steps per sentence when `rows` sentences (sorted by source length) decode at
  once, each batch until its last sentence stops."""
  order = sorted(range(len(steps)), key=lambda i: lengths[i])
  total = sum(rows * max(steps[i] for i in order[s:s + rows])
              for s in range(0, len(order), rows))
  return total / len(steps)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workdir', required=True, help="a trained run's folder")
  parser.add_argument('--limit', type=int, default=0, help='first N test sentences (0: all)')
  parser.add_argument('--rows', default='4,16,64', help='batch sizes for rows x steps')
  harness.add_out_argument(parser)
  args = parser.parse_args(argv)
  harness.start_jax()
  from t2t_jax.inference import translate
  translator = translate.Translator.from_workdir(args.workdir)
  path = os.path.join(os.path.dirname(translate.__file__), '..', 'data', 'bible_en_es',
                      'test.en.gz')
  with gzip.open(path, 'rt', encoding='utf-8') as f:
    sources = [line.rstrip('\n') for line in f]
  sources = [s for s in sources[:args.limit or None] if s.strip()]
  encoded = [translator._encode(s) for s in sources]  # pylint: disable=protected-access
  lengths = [len(ids) for ids in encoded]
  rows = [int(r) for r in args.rows.split(',')]
  counted = {rule: count_steps(translator, encoded, rule) for rule in RULES}
  record = {'name': 'stopping', 'workdir': args.workdir, 'sentences': len(encoded),
            'beam': translator.beam_size, 'alpha': translator.alpha, 'rules': {}}
  for rule, results in counted.items():
    steps = [s for s, _ in results]
    record['rules'][rule] = {
        'steps_per_sentence': sum(steps) / len(steps),
        'best_as_paper': sum(a[1] == b[1] for a, b in zip(results, counted['paper'])),
        'row_steps_per_sentence': {r: row_steps(lengths, steps, r) for r in rows}}
  record['best_length_per_sentence'] = sum(
      len(best) + 1 for _, best in counted['paper']) / len(encoded)
  for rule, r in record['rules'].items():
    batched = ', '.join(f'{k} rows {v:.1f}' for k, v in r['row_steps_per_sentence'].items())
    print(f'{rule:>10}: {r["steps_per_sentence"]:.1f} steps a sentence alone; rows x steps '
          f'a sentence batched: {batched}; best = paper\'s: {r["best_as_paper"]}/'
          f'{len(encoded)}', file=sys.stderr)
  return harness.Emitter(args.out)(record)


if __name__ == '__main__':
  main()
