"""How beam search compares hypotheses of different lengths (Vaswani et al. 2017, §6.1: "length
penalty alpha = 0.6"), by one of two rules, `search.beam_search`'s static `length_rule`:

* 'gnmt', the paper's: score = log p / ((5 + |Y|) / 6) ** alpha (Wu et al. 2016), and a
  sentence stops when no live hypothesis can beat the worst finished one even at its most
  favourable reachable length (an exact bound: stopping changes no result).
* 'transformers': Hugging Face transformers' beam search (`generate(num_beams=K,
  length_penalty=alpha)` with its default `early_stopping=False`), so that a model imported
  from or exported to transformers decodes as it does there: score = log p / |Y| ** alpha
  (fairseq's `--lenpen` and CTranslate2's `length_penalty` use the same formula), and a
  sentence stops by transformers' heuristic, when the best live hypothesis, scored as if it
  ended at the current length, is no better than the worst finished one
  (`GenerationMixin._check_early_stop_heuristic`). For alpha > 0 a longer continuation could
  still have won: the heuristic is transformers' choice, reproduced, not a bound.

|Y| counts the EOS in both.
"""

from typing import get_args

import jax
import jax.numpy as jnp

from t2t_jax import choices
from t2t_jax.model.array_checks import check_number

LENGTH_RULES = get_args(choices.LengthRule)


def check_length_rule(caller: str, rule: str) -> str:
  """`rule` if it is one of `LENGTH_RULES`; else ValueError in one line naming `caller`."""
  if rule not in LENGTH_RULES:
    raise ValueError(f'{caller}: length_rule={rule!r}; expected one of '
                     f'{", ".join(LENGTH_RULES)}')
  return rule


def length_penalty(length, alpha, rule: str = 'gnmt') -> jax.Array:
  """The divisor of a hypothesis's log probability: ((5 + length) / 6) ** alpha ('gnmt'), or
  length ** alpha ('transformers'), float32.

  Args:
    length: int or float array of any shape: output length including EOS.
    alpha: float; 0 gives 1 (raw log probs), the paper uses 0.6.
    rule: one of `LENGTH_RULES`.
  Returns:
    float32 array shaped like `length`.
  """
  check_number('length_penalty', 'length', length)
  check_number('length_penalty', 'alpha', alpha)
  check_length_rule('length_penalty', rule)
  length = jnp.asarray(length, jnp.float32)
  return (length if rule == 'transformers' else (5.0 + length) / 6.0) ** alpha


def hopeless(best_live_lp: jax.Array, worst_score: jax.Array, n: jax.Array,
             max_lengths: jax.Array, alpha, rule: str = 'gnmt') -> jax.Array:
  """[B] bool: whether the best live hypothesis (raw log prob [B] float32, after `n` tokens)
  cannot displace a finished one scored `worst_score` [B] float32, by `rule`.

  'gnmt': log probs only decrease, so a live hypothesis's final score is at most its log prob
  over the largest penalty among the lengths it can still reach (n + 1 .. max_lengths [B]
  int32), which is at max_lengths for alpha >= 0. 'transformers': its heuristic, the live
  one scored at length n, no better.
  """
  if rule == 'transformers':
    return best_live_lp / length_penalty(n, alpha, rule) <= worst_score
  best_penalty = jnp.maximum(length_penalty(n + 1, alpha), length_penalty(max_lengths, alpha))
  return best_live_lp / best_penalty < worst_score
