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

  python -m benchmarks.peers.ctranslate2_sampling --workdir RUN --scratch /tmp/serve \
      --out benchmarks/results/ctranslate2_sampling.jsonl [--limit 200] [--samples 4]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from benchmarks.shared import scripts, serving_common  # noqa: E402

# (temperature, top_k, top_p): the full distribution, fairseq's usual top-k, a nucleus, a cooled one.
SETTINGS = ((1.0, 0, 1.0), (1.0, 10, 1.0), (1.0, 0, 0.9), (0.7, 0, 1.0))


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
  scored = score.score_pairs(run.cfg, run.params, pairs, buckets=run.config.bucket_lengths)
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


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--samples', type=scripts.positive_int, default=4,
                      help='samples per sentence, each side')
  args = serving_common.add_args(parser).parse_args(argv)
  emit, run, sources, references, ct2 = serving_common.start_against_ctranslate2(args)

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


if __name__ == '__main__':
  main()
