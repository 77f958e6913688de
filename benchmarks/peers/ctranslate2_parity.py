"""CTranslate2 export parity on the bundled test set with a trained run (read only).

Measures, for the float32 export against our model:
  * greedy: how many sentences translate identically (ours: Translator, beam 1);
  * scoring: the largest |difference| of the token log-probabilities of the reference
    translations (teacher forced, EOS included);
  * beam 4, alpha 0.6: how often CTranslate2's GNMT-re-ranked best hypothesis equals ours,
    for patience 1 (CTranslate2's default) and 2; every difference is classified by scoring
    both hypotheses under the GNMT penalty (CTranslate2's log-probabilities, equal to ours
    within the measured error): which search found the better one.

  python -m benchmarks.peers.ctranslate2_parity --workdir RUN --scratch /tmp/serve \
      --out benchmarks/results/ctranslate2_parity.jsonl
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from benchmarks.shared import harness, serving_common  # noqa: E402


def _teacher_forced(run, sources, targets, rows=32):
  """Our log-probabilities of each target token (EOS last), padding masked as decoding."""
  import jax
  from t2t_jax.inference import portable
  from t2t_jax.model import transformer as model
  cfg = run.cfg.replace(deterministic=True)
  score = jax.jit(lambda p, x, y: jax.nn.log_softmax(model.Transformer(cfg).apply(
      {'params': p}, x, y).at[..., model.PAD_ID].set(-1e9)))
  out = []
  for start in range(0, len(sources), rows):
    xs = [run.tokenizer.encode(s) + [model.EOS_ID] for s in sources[start:start + rows]]
    ys = [run.tokenizer.encode(t) + [model.EOS_ID] for t in targets[start:start + rows]]
    length = portable.source_length(max(map(len, xs + ys)), run.config.bucket_lengths,
                                    cfg.max_len)
    x, y = (np.zeros((rows, length), np.int32) for _ in range(2))
    for i, (a, b) in enumerate(zip(xs, ys)):
      x[i, :len(a)], y[i, :len(b)] = a, b
    picked = np.take_along_axis(np.asarray(score(run.params, x, y)), y[..., None], -1)[..., 0]
    out += [picked[i, :len(b)] for i, b in enumerate(ys)]
  return out


def _gnmt(log_prob: float, tokens: int, alpha: float) -> float:
  return log_prob / ((5.0 + tokens + 1) / 6.0) ** alpha


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  args = serving_common.add_args(parser).parse_args(argv)
  emit, run, sources, targets, ct2 = serving_common.start_against_ctranslate2(args)
  from t2t_jax.export import ctranslate2_decoding as decoding
  c = run.config
  pieces = run.pieces(sources)
  ids = lambda rows: [run.tokenizer.pieces(r) for r in rows]  # noqa: E731
  record = {'name': 'ctranslate2_parity', 'checkpoint': run.description,
            'config': {'d_model': c.d_model, 'num_layers': c.num_layers,
                       'vocab_size': c.vocab_size, 'max_len': c.max_len},
            'sentences': len(sources), 'ctranslate2_threads': args.threads}

  ours_greedy = ids(run.translator(1, 0.0).translate_ids(sources))
  theirs = decoding.translate(ct2, pieces, beam_size=1, max_decode_extra=c.max_decode_extra,
                              max_len=c.max_len)
  record['greedy_identical'] = sum(a == b for a, b in zip(ours_greedy, theirs))

  target_pieces = run.pieces(targets)
  scored = ct2.score_batch(pieces, target_pieces, max_batch_size=64)
  ours = _teacher_forced(run, sources, targets)
  diffs = np.concatenate([np.abs(np.asarray(s.log_probs) - o) for s, o in zip(scored, ours)])
  record['log_prob_max_abs_diff'] = float(diffs.max())
  record['log_prob_mean_abs_diff'] = float(diffs.mean())
  record['log_prob_tokens'] = int(diffs.size)

  # One pass, compilation included: for scale only (benchmarks/peers/serve.py times serving).
  ours_beam, record['ours_beam_seconds'] = harness.time_call(
      run.translator(c.beam_size, c.length_penalty_alpha).translate_ids, sources)
  ours_beam = ids(ours_beam)
  alpha = c.length_penalty_alpha
  for patience in (1.0, 2.0):
    theirs = decoding.translate(ct2, pieces, beam_size=c.beam_size, alpha=alpha,
                                max_decode_extra=c.max_decode_extra, max_len=c.max_len,
                                patience=patience)
    differ = [i for i, (a, b) in enumerate(zip(ours_beam, theirs)) if a != b]
    cases = []
    if differ:  # score both under CTranslate2 (= our log-probs within the measured error)
      pairs = ct2.score_batch([pieces[i] for i in differ] * 2,
                              [ours_beam[i] for i in differ] + [theirs[i] for i in differ])
      for k, i in enumerate(differ):
        a, b = pairs[k], pairs[k + len(differ)]
        ours_score = _gnmt(sum(a.log_probs), len(ours_beam[i]), alpha)
        theirs_score = _gnmt(sum(b.log_probs), len(theirs[i]), alpha)
        cases.append({'line': i + 1, 'ours_gnmt': ours_score, 'ctranslate2_gnmt': theirs_score,
                      'better': 'ours' if ours_score > theirs_score else 'ctranslate2',
                      'ours_tokens': len(ours_beam[i]), 'ctranslate2_tokens': len(theirs[i])})
    record[f'beam_patience_{patience:g}'] = {
        'identical': len(sources) - len(differ),
        'identical_fraction': (len(sources) - len(differ)) / len(sources),
        'ours_better': sum(x['better'] == 'ours' for x in cases),
        'ctranslate2_better': sum(x['better'] == 'ctranslate2' for x in cases),
        'differences': cases}
  emit(record)


if __name__ == '__main__':
  main()
