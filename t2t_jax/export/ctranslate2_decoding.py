"""Decoding an exported CTranslate2 model the way t2t_jax decodes (§6.1).

Three differences between `ctranslate2.Translator.translate_batch` and `translate.Translator`
need handling:

* Length penalty: CTranslate2 divides a hypothesis's log probability by |Y|^alpha, the paper
  (and `search.length_penalty`) by GNMT's ((5 + |Y|) / 6)^alpha. Ask for every beam hypothesis
  with its score (`return_end_token=True` so |Y| counts EOS, as ours) and re-rank them
  (`gnmt_rerank`). The hypotheses themselves come from the same kind of search: the K best
  non-EOS extensions stay live, an EOS inside the top K finishes a hypothesis.
* Stopping: CTranslate2 stops a sentence once it holds beam_size * patience finished
  hypotheses; ours once no live hypothesis can still beat the worst finished one. A larger
  `patience` finds more of ours.
* Length: CTranslate2 ends at least one token in (`min_decoding_length=1` by default; ours may
  emit EOS first) and counts `max_decoding_length` without EOS and forces none; ours allows
  source tokens + EOS + max_decode_extra tokens, EOS included, capped at max_len.
"""

from typing import Any, List, Sequence, Tuple


def gnmt_rerank(hypotheses: Sequence[Sequence[str]], scores: Sequence[float], alpha: float,
                ct2_length_penalty: float, eos: str = '</s>') -> List[Tuple[float, List[str]]]:
  """Re-ranks CTranslate2 beam hypotheses by the paper's GNMT length penalty.

  Decode with `return_scores=True, return_end_token=True, num_hypotheses=beam_size` and a
  `length_penalty` > 0 (0 lets CTranslate2 stop as soon as its top beam ends).

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
  """
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


def translate(translator: Any, sources: Sequence[Sequence[str]], *, beam_size: int = 4,
              alpha: float = 0.6, max_decode_extra: int = 50, max_len: int = 256,
              exact_lengths: bool = True, patience: float = 1.0,
              max_batch_size: int = 64) -> List[List[str]]:
  """The best translation of each source (pieces, EOS excluded), decoded by a
  `ctranslate2.Translator` as `translate.Translator` decodes: GNMT-re-ranked beam (greedy for
  beam_size 1), EOS allowed first, our output length limits.

  `exact_lengths` decodes the sources of each length apart, so each gets exactly its own
  limit; False decodes all together under the longest source's limit (faster; a sentence
  then differs from ours only if it runs past its own limit).
  """
  groups = ({n: [i for i, s in enumerate(sources) if len(s) == n]
             for n in sorted({len(s) for s in sources})} if exact_lengths
            else {max(map(len, sources), default=0): list(range(len(sources)))})
  options = dict(beam_size=beam_size, min_decoding_length=0, max_batch_size=max_batch_size)
  if beam_size > 1:
    options.update(length_penalty=alpha or 1.0, num_hypotheses=round(beam_size * patience),
                   patience=patience, return_scores=True, return_end_token=True)
  best: List[List[str]] = [[] for _ in sources]
  for n, indices in groups.items():
    results = translator.translate_batch(
        [list(sources[i]) for i in indices],
        max_decoding_length=max_decoding_length(n, max_decode_extra, max_len), **options)
    for i, result in zip(indices, results):
      best[i] = (gnmt_rerank(result.hypotheses, result.scores, alpha, options['length_penalty'])
                 [0][1] if beam_size > 1 else list(result.hypotheses[0]))
  return best
