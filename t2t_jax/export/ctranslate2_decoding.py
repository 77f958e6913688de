"""Decoding an exported CTranslate2 model the way t2t_jax decodes (§6.1).

Four differences between `ctranslate2.Translator.translate_batch` and `translate.Translator`
need handling:

* Length penalty: CTranslate2 divides a hypothesis's log probability by |Y|^alpha, the paper
  (and `search.length_penalty`) by GNMT's ((5 + |Y|) / 6)^alpha. Ask for every beam hypothesis
  with its score (`return_end_token=True` so |Y| counts EOS, as ours) and re-rank them
  (`gnmt_rerank`). The hypotheses themselves come from the same kind of search: the K best
  non-EOS extensions stay live, an EOS inside the top K finishes a hypothesis.
* CTranslate2's own ranking: when a sentence ends, CTranslate2 sorts its finished
  hypotheses by log P / |Y|^length_penalty and keeps `num_hypotheses`; its last step can
  finish several at once (up to 2K - 1 in all), so some are dropped. |Y|^alpha favours long
  hypotheses far more than GNMT and dropped the GNMT best; `ct2_length_penalty` picks an
  exponent that keeps it.
* Stopping: CTranslate2 stops a sentence once it holds beam_size * patience finished
  hypotheses; ours once no live hypothesis can still beat the worst finished one. A larger
  `patience` finds more of ours (where they differ, ours is longer and scores higher).
* Length: CTranslate2 ends at least one token in (`min_decoding_length=1` by default; ours may
  emit EOS first) and counts `max_decoding_length` without EOS and forces none; ours allows
  source tokens + EOS + max_decode_extra tokens, EOS included, capped at max_len, and forces
  EOS at the last position, counting its log probability. `translate` scores that EOS for
  the hypotheses CTranslate2 cut at the limit (`score_batch`) before re-ranking: without it a
  run-away hypothesis cut at the limit skipped its (improbable) EOS and outranked ours.
"""

from typing import Any, List, Sequence, Tuple


def gnmt_rerank(hypotheses: Sequence[Sequence[str]], scores: Sequence[float], alpha: float,
                ct2_length_penalty: float, eos: str = '</s>') -> List[Tuple[float, List[str]]]:
  """Re-ranks CTranslate2 beam hypotheses by the paper's GNMT length penalty.

  Decode with `return_scores=True, return_end_token=True, num_hypotheses=beam_size` and
  `length_penalty=ct2_length_penalty(alpha)` (any value re-ranks correctly, but a larger one
  can drop the GNMT best before it gets here).

  Args:
    hypotheses: the tokens of each hypothesis, ending with `eos` unless cut at the maximum
      decoding length.
    scores: CTranslate2's scores: summed token log probs / len(tokens) ** ct2_length_penalty.
    alpha: GNMT alpha (0.6 in the paper).
    ct2_length_penalty: the `length_penalty` the hypotheses were decoded with.
    eos: the end token.

  Returns:
    (GNMT score, tokens without `eos`) pairs, best first; the score is
    log P / ((5 + |Y|) / 6) ** alpha with |Y| = tokens + 1 (EOS), as `search.length_penalty`.

  Raises:
    TypeError: `hypotheses` not a list of token lists (a string, or a list of strings).
    ValueError: no hypotheses, or not one score per hypothesis.
  """
  if isinstance(hypotheses, str) or any(isinstance(h, str) for h in hypotheses):
    raise TypeError('gnmt_rerank: hypotheses must be a list of token lists (each '
                    "hypothesis's tokens, e.g. [['▁a', '</s>']]), not strings")
  hypotheses, scores = list(hypotheses), list(scores)
  if not hypotheses or len(hypotheses) != len(scores):
    raise ValueError(f'gnmt_rerank: {len(hypotheses)} hypotheses and {len(scores)} scores; '
                     'expected one score per hypothesis, at least one')
  ranked = []
  for tokens, score in zip(hypotheses, scores):
    log_prob = score * len(tokens) ** ct2_length_penalty
    words = list(tokens[:-1] if tokens and tokens[-1] == eos else tokens)
    ranked.append((log_prob / ((5.0 + len(words) + 1) / 6.0) ** alpha, words))
  return sorted(ranked, key=lambda pair: -pair[0])


def max_decoding_length(source_tokens: int, max_decode_extra: int, max_len: int) -> int:
  """CTranslate2's `max_decoding_length` for a source of `source_tokens` pieces (no EOS):
  ours allows min(source_tokens + 1 + max_decode_extra, max_len) outputs with EOS."""
  return min(source_tokens + 1 + max_decode_extra, max_len) - 1


def ct2_length_penalty(alpha: float) -> float:
  """The `length_penalty` to decode with for GNMT re-ranking with `alpha` (>= 0): alpha / 5,
  1e-6 for alpha 0 (0 itself changes CTranslate2's stopping: it then also waits for its top
  beam to end).

  CTranslate2's search does not depend on it: it sorts a finished sentence's hypotheses by
  log P / |Y|^p and keeps `num_hypotheses` = K * patience of them. Fewer than that finished
  before the sentence's last step, all shorter than the up to K finishing at it. With
  p <= alpha * log(7/6) / log(2) (0.222 alpha: the tightest case, |Y| 1 against 2) only a
  shorter hypothesis can outrank the GNMT best, so it is never dropped (except at the length
  limit, where the EOS ours forces is only scored afterwards).
  """
  return alpha / 5.0 if alpha > 0 else 1e-6


def _score_forced_eos(translator: Any, sources: Sequence[Sequence[str]], results: Sequence[Any],
                      length_penalty: float, eos: str) -> List[Tuple[List[List[str]], List[float]]]:
  """Per result, (hypotheses, scores) with EOS appended to every hypothesis CTranslate2 cut at
  the length limit, its log probability (one `score_batch` for all) added to the score, as
  ours forces and counts that EOS. Scores stay CTranslate2's: log P / len(tokens) ** p."""
  out = [([list(h) for h in r.hypotheses], list(r.scores)) for r in results]
  cut = [(i, j) for i, (hyps, _) in enumerate(out) for j, h in enumerate(hyps)
         if not h or h[-1] != eos]
  if cut:
    scored = translator.score_batch([list(sources[i]) for i, _ in cut],
                                    [out[i][0][j] for i, j in cut])
    for (i, j), result in zip(cut, scored):
      hyps, scores = out[i]
      log_prob = scores[j] * len(hyps[j]) ** length_penalty + result.log_probs[-1]
      hyps[j] = hyps[j] + [eos]
      scores[j] = log_prob / len(hyps[j]) ** length_penalty
  return out


def translate(translator: Any, sources: Sequence[Sequence[str]], *, beam_size: int = 4,
              alpha: float = 0.6, max_decode_extra: int = 50, max_len: int = 256,
              exact_lengths: bool = True, patience: float = 1.0, max_batch_size: int = 64,
              eos: str = '</s>', return_scores: bool = False,
              target_prefix: Sequence[str] = ()) -> List[Any]:
  """The best translation of each source (pieces, EOS excluded), decoded by a
  `ctranslate2.Translator` as `translate.Translator` decodes: GNMT-re-ranked beam (greedy for
  beam_size 1), EOS allowed first, our output length limits, EOS forced at the limit.

  `exact_lengths` decodes the sources of each length apart, so each gets exactly its own
  limit; False decodes all together under the longest source's limit (faster; a sentence
  then differs from ours only if it runs past its own limit). `return_scores` (beam_size > 1):
  (score, pieces) pairs instead, the score log P / ((5 + |Y|) / 6) ** alpha as
  `search.beam_search`'s, log P and |Y| counting EOS. `target_prefix`: the pieces every
  translation starts with (a language token: `data/language_tokens.py`), part of the output.
  """
  if return_scores and beam_size == 1:
    raise ValueError('return_scores needs beam_size > 1 (greedy decoding returns no scores)')
  groups = ({n: [i for i, s in enumerate(sources) if len(s) == n]
             for n in sorted({len(s) for s in sources})} if exact_lengths
            else {max(map(len, sources), default=0): list(range(len(sources)))})
  options = dict(beam_size=beam_size, min_decoding_length=0, max_batch_size=max_batch_size)
  if beam_size > 1:
    options.update(length_penalty=ct2_length_penalty(alpha),
                   num_hypotheses=round(beam_size * patience), patience=patience,
                   return_scores=True, return_end_token=True)
  best: List[Any] = [[] for _ in sources]
  for n, indices in groups.items():
    group = [list(sources[i]) for i in indices]
    prefix = {'target_prefix': [list(target_prefix)] * len(group)} if target_prefix else {}
    results = translator.translate_batch(
        group, max_decoding_length=max_decoding_length(n, max_decode_extra, max_len),
        **options, **prefix)
    if beam_size == 1:  # at the limit ours forces EOS, which changes no token
      for i, result in zip(indices, results):
        best[i] = list(result.hypotheses[0])
      continue
    scored = _score_forced_eos(translator, group, results, options['length_penalty'], eos)
    for i, (hypotheses, scores) in zip(indices, scored):
      score, tokens = gnmt_rerank(hypotheses, scores, alpha, options['length_penalty'], eos)[0]
      best[i] = (score, tokens) if return_scores else tokens
  return best


def decoding_options(config, description: str) -> dict:
  """What `t2t_jax_decoding.json` records: the run's decoding settings and their source."""
  return {'beam_size': config.beam_size, 'length_penalty_alpha': config.length_penalty_alpha,
          'length_penalty': 'GNMT ((5 + |Y|) / 6) ** alpha, |Y| counting EOS: re-rank '
                            'CTranslate2 hypotheses (t2t_jax.gnmt_rerank)',
          'min_decoding_length': 0,
          'max_decode_extra': config.max_decode_extra, 'max_len': config.max_len,
          'source_max_tokens': config.max_len - 1, 'checkpoint': description,
          **_language_options(config)}


def _language_options(config) -> dict:
  """A model with language tokens (`data/language_tokens.py`): the source's token, which
  starts every source, and the target's, CTranslate2's `target_prefix`."""
  pattern = getattr(config, 'language_tokens', '')
  if not pattern:
    return {}
  return {'source_prefix': [pattern.format(lang=config.source_lang)],
          'target_prefix': [pattern.format(lang=config.target_lang)]}
