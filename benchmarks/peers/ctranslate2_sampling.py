"""Sampling against CTranslate2's (`sampling_topk/topp/temperature`) on the bundled test set,
one trained run (read only), its float32 export.

Samples are random, so the two samplers cannot agree sample by sample; they must agree in
distribution. Per setting (temperature, top-k, top-p), each side draws `--samples` per sentence;
every sample of both sides is then scored by the same scorer (ours, `inference/score.py`: the
model's untempered log probability, EOS included). The record gives, per side, the mean
per-token log probability, the mean length, the distinct samples per sentence and the corpus
BLEU of the first sample, and the paired z of the per-sentence mean log probability (ours
minus theirs over sentences; |z| < 3 is agreement at this sample size: a sampler that kept
one token too many or too few of a nucleus, or applied the temperature after the cut, moves
it by far more). Deterministic options must agree exactly, counted per sentence: `top_k=1`
(greedy on both sides), greedy with `no_repeat_ngram_size=3`, greedy with a target prefix.

Speed (`--speed-rows R1,R2`, for the settings of TIMED): ours through the product path of
`--mode=decode --config.decode_strategy=sample` (`translate.from_config` with the run's
settings and `batch_sentences=R`: `translate_n_best`, XLA's thread pool and one batch per core
at once) against CTranslate2's `translate_batch` (beam_size 1, the same sampling options,
`intra_threads=--threads`, `inter_threads=1`) on the very same batches: the sentences sorted by
length as ours sorts them, R rows a batch (R / `--speed-samples` sentences, each drawn
`--speed-samples` times), each batch under its longest source's length limit. Both text to
text (SentencePiece included). One untimed pass each first (our compilations; its outputs
give the target tokens), then `--repeats` rounds alternated by `harness.interleave`; the
median pass gives sentences/s and samples/s, and the ratio ours / CTranslate2 (> 1: ours is
faster).

  python -m benchmarks.peers.ctranslate2_sampling --workdir RUN --scratch /tmp/serve \
      --out benchmarks/results/ctranslate2_sampling.jsonl [--limit 200] [--samples 4]
  python -m benchmarks.peers.ctranslate2_sampling --workdir RUN --scratch /tmp/serve \
      --out benchmarks/results/ctranslate2_sampling.jsonl --skip-agreement --speed-rows 64,4
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from benchmarks.shared import harness, scripts, serving_common  # noqa: E402

# (temperature, top_k, top_p): the full distribution, fairseq's usual top-k, a nucleus, a cooled one.
SETTINGS = ((1.0, 0, 1.0), (1.0, 10, 1.0), (1.0, 0, 0.9), (0.7, 0, 1.0))
# The settings `--speed-rows` times: the full distribution and top-k 10.
TIMED = SETTINGS[:2]


def _ours(run, sources, samples, temperature, top_k, top_p, strategy='sample', prefixes=None,
          **options):
  """Per sentence, `samples` id lists (no EOS)."""
  from t2t_jax.inference import translate
  c = run.config
  t = translate.Translator(run.cfg, run.params, run.tokenizer, strategy=strategy,
                           temperature=temperature, top_k=top_k, top_p=top_p, seed=0,
                           max_decode_extra=c.max_decode_extra,
                           batch_sentences=c.decode_batch_sentences,
                           bucket_lengths=c.bucket_lengths, **options)
  return [[h.ids for h in hyps]
          for hyps in t.translate_n_best(sources, samples, prefixes=prefixes)]


def _theirs(run, ct2, sources, samples, temperature, top_k, top_p, prefixes=None, **options):
  """CTranslate2's samples, as id lists (no EOS), at each sentence's own length limit."""
  from t2t_jax.export import ctranslate2_decoding as decoding
  sp = run.tokenizer._sp  # pieces back to ids: no re-tokenization of the text
  out = []
  for i, source in enumerate(sources):  # one call each: its own max_decoding_length, as ours
    pieces = run.pieces([source])
    limit = decoding.max_decoding_length(len(pieces[0]), run.config.max_decode_extra,
                                         run.cfg.max_len)
    if prefixes is not None:
      options['target_prefix'] = run.pieces([prefixes[i]])
    result = ct2.translate_batch(pieces, beam_size=1, num_hypotheses=samples,
                                 sampling_topk=top_k, sampling_topp=top_p,
                                 sampling_temperature=temperature,
                                 max_decoding_length=limit, **options)[0]
    out.append([[sp.piece_to_id(p) for p in h] for h in result.hypotheses])
  return out


def _exact(run, ct2, sources, references):
  """Greedy search with repetition control, and with target prefixes (each reference's first
  three words): deterministic, so both sides must give the same ids. Counts of identical."""
  counts = {}
  ours = _ours(run, sources, 1, 1.0, 0, 1.0, strategy='greedy', no_repeat_ngram_size=3)
  theirs = _theirs(run, ct2, sources, 1, 1.0, 1, 1.0, no_repeat_ngram_size=3)
  counts['greedy_no_repeat_ngram_size_3'] = sum(a == b for a, b in zip(ours, theirs))
  prefixes = [' '.join(r.split()[:3]) for r in references]
  ours = _ours(run, sources, 1, 1.0, 0, 1.0, strategy='greedy', prefixes=prefixes)
  theirs = _theirs(run, ct2, sources, 1, 1.0, 1, 1.0, prefixes=prefixes)
  counts['greedy_target_prefix'] = sum(a == b for a, b in zip(ours, theirs))
  return counts


def _summary(run, sources, references, drawn):
  """Per-side statistics of `drawn` (per sentence, its samples' ids) and the per-sentence
  mean log probability [sentences] for the paired test."""
  import sacrebleu
  from t2t_jax.inference import score
  from t2t_jax.model import transformer as model_lib
  tok = run.tokenizer
  pairs, owner = [], []
  for i, (source, rows) in enumerate(zip(sources, drawn)):
    src = tok.encode(source) + [model_lib.EOS_ID]
    for ids in rows:
      pairs.append((src, list(ids) + [model_lib.EOS_ID]))
      owner.append(i)
  scored = score.score_pairs(run.cfg, run.params, pairs)
  log_probs = np.array([s[0] for s in scored])
  tokens = np.array([s[1] for s in scored])
  per_sentence = np.array([log_probs[np.array(owner) == i].mean() for i in range(len(sources))])
  first = [tok.decode(rows[0]) if rows else '' for rows in drawn]
  return {'mean_token_log_prob': float(log_probs.sum() / tokens.sum()),
          'mean_log_prob': float(log_probs.mean()),
          'mean_tokens': float(tokens.mean()),
          'distinct_per_sentence': float(np.mean([len({tuple(r) for r in rows})
                                                  for rows in drawn])),
          'first_sample_bleu': round(sacrebleu.corpus_bleu(first, [references]).score, 2),
          }, per_sentence


def _agreement(emit, args, run, ct2, sources, references):
  """The records of agreement: deterministic options exactly, each setting in distribution."""
  greedy_ours = _ours(run, sources, 1, 1.0, 1, 1.0)
  greedy_theirs = _theirs(run, ct2, sources, 1, 1.0, 1, 1.0)
  emit({'name': 'ctranslate2_sampling_top_k_1', 'checkpoint': run.description,
        'sentences': len(sources),
        'identical': sum(a == b for a, b in zip(greedy_ours, greedy_theirs)),
        **_exact(run, ct2, sources, references)})
  for temperature, top_k, top_p in SETTINGS:
    ours = _ours(run, sources, args.samples, temperature, top_k, top_p)
    theirs = _theirs(run, ct2, sources, args.samples, temperature, top_k, top_p)
    (ours_stats, ours_lp), (theirs_stats, theirs_lp) = (
        _summary(run, sources, references, ours), _summary(run, sources, references, theirs))
    gap = ours_lp - theirs_lp
    emit({'name': 'ctranslate2_sampling', 'checkpoint': run.description,
          'temperature': temperature, 'top_k': top_k, 'top_p': top_p,
          'sentences': len(sources), 'samples': args.samples,
          'ours': ours_stats, 'ctranslate2': theirs_stats,
          'paired_log_prob_gap': float(gap.mean()),
          'paired_z': float(gap.mean() / (gap.std(ddof=1) / np.sqrt(len(gap))))})


def ct2_chunks(lengths, sentences_per_batch: int):
  """Ours' decode batches as lists of sentence indices: sorted by length (stable, as
  `portable.batches` sorts), `sentences_per_batch` a batch."""
  order = sorted(range(len(lengths)), key=lambda i: lengths[i])
  return [order[s:s + sentences_per_batch] for s in range(0, len(order), sentences_per_batch)]


def _ct2_sampler(run, ct2, sources, rows, samples, temperature, top_k, top_p):
  """A call drawing `samples` per sentence with CTranslate2, text to text, on ours' batches
  (`ct2_chunks`), each under its longest source's limit; returns the target pieces drawn."""
  from t2t_jax.export import ctranslate2_decoding as decoding
  sp = run.tokenizer._sp
  per_batch = rows // samples
  chunks = ct2_chunks([len(p) for p in run.pieces(sources)], per_batch)

  def call():
    pieces, drawn, texts = run.pieces(sources), [], []
    for chunk in chunks:
      limit = decoding.max_decoding_length(max(len(pieces[i]) for i in chunk),
                                           run.config.max_decode_extra, run.cfg.max_len)
      results = ct2.translate_batch(
          [pieces[i] for i in chunk], beam_size=1, num_hypotheses=samples,
          sampling_topk=top_k, sampling_topp=top_p, sampling_temperature=temperature,
          min_decoding_length=0, max_decoding_length=limit, max_batch_size=per_batch)
      for result in results:
        drawn += result.hypotheses
        texts += [sp.decode_pieces(h) for h in result.hypotheses]  # text, as ours returns
    return drawn
  return call


def _speed(run, ct2, sources, rows, samples, setting, repeats):
  """One speed record's fields: both sides at `rows` rows a batch (module docstring)."""
  from t2t_jax.inference import translate
  temperature, top_k, top_p = setting
  ours = translate.from_config(run.config, run.params, run.tokenizer, strategy='sample',
                               temperature=temperature, top_k=top_k, top_p=top_p, seed=0,
                               batch_sentences=rows)
  systems = {'ours': lambda: ours.translate_n_best(sources, samples),
             'ctranslate2': _ct2_sampler(run, ct2, sources, rows, samples, *setting)}
  ours_out, ours_first_s = harness.time_call(systems['ours'])
  theirs_out = systems['ctranslate2']()
  times = harness.interleave(systems, repeats, warmup=0)
  tokens = {'ours': sum(len(h.ids) for hyps in ours_out for h in hyps),
            'ctranslate2': sum(len(h) for h in theirs_out)}
  sides = {}
  for name, ts in times.items():
    median = harness.summarize(ts)['median_s']
    sides[name] = {'s': harness.summarize(ts), 'sentences_per_s': len(sources) / median,
                   'samples_per_s': len(sources) * samples / median,
                   'target_tokens': tokens[name], 'target_tokens_per_s': tokens[name] / median}
  sides['ours'].update(first_pass_s=ours_first_s, batches_at_once=ours.threads)
  return {'temperature': temperature, 'top_k': top_k, 'top_p': top_p, 'rows': rows,
          'sentences': len(sources), 'samples': samples, 'repeats': repeats, **sides,
          'ratio_ours_over_ctranslate2': harness.speedups(times, 'ctranslate2')['ours']}


def _rows_list(text: str):
  return [scripts.positive_int(r) for r in text.split(',') if r]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--samples', type=scripts.positive_int, default=4,
                      help='samples per sentence, each side (agreement)')
  parser.add_argument('--skip-agreement', action='store_true',
                      help='only the speed records (--speed-rows)')
  parser.add_argument('--speed-rows', type=_rows_list, default=[],
                      help='comma list of batch rows to time both sides at (default: none)')
  parser.add_argument('--speed-samples', type=scripts.positive_int, default=1,
                      help='samples per sentence when timing (rows must be a multiple)')
  parser.add_argument('--repeats', type=scripts.positive_int, default=3,
                      help='timed rounds of each side, interleaved')
  args = serving_common.add_args(parser).parse_args(argv)
  if any(rows % args.speed_samples for rows in args.speed_rows):
    parser.error(f'--speed-rows {args.speed_rows}: each must be a multiple of '
                 f'--speed-samples {args.speed_samples}')
  emit, run, sources, references, ct2 = serving_common.start_against_ctranslate2(args)
  if not args.skip_agreement:
    _agreement(emit, args, run, ct2, sources, references)
  for rows in args.speed_rows:
    for setting in TIMED:
      emit({'name': 'ctranslate2_sampling_speed', 'checkpoint': run.description,
            'ctranslate2_threads': args.threads,
            **_speed(run, ct2, sources, rows, args.speed_samples, setting, args.repeats)})


if __name__ == '__main__':
  main()
