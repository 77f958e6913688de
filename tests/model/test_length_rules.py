"""`length_rules`: the two ways beam search compares lengths, by their formulas and their stops
(the 'transformers' rule against transformers' own beam search: tests/pretrained/)."""

import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import length_rules, search
from t2t_jax.model.transformer import TransformerConfig


def test_the_penalties_are_the_formulas():
  lengths = np.array([1, 2, 7, 30])
  np.testing.assert_allclose(length_rules.length_penalty(lengths, 0.6),
                             ((5.0 + lengths) / 6.0) ** 0.6, rtol=1e-6)
  np.testing.assert_allclose(length_rules.length_penalty(lengths, 0.6, 'transformers'),
                             lengths ** 0.6, rtol=1e-6)
  np.testing.assert_allclose(length_rules.length_penalty(lengths, 0.0, 'transformers'), 1.0)
  assert search.length_penalty is length_rules.length_penalty  # one definition


def test_the_stops_differ_where_transformers_guesses():
  """After n = 2 tokens a live hypothesis of log prob -2 against a finished -0.9 (alpha 1,
  at most 10 tokens): at its best reachable length it could score -2 / (15 / 6) = -0.8, so
  the GNMT bound goes on; transformers' heuristic scores it at length 2, -1.0, and stops."""
  args = (jnp.array([-2.0]), jnp.array([-0.9]), 2, jnp.array([10]), 1.0)
  assert not length_rules.hopeless(*args)[0]
  assert length_rules.hopeless(*args, 'transformers')[0]
  # A tie stops transformers (it goes on while strictly better), not the bound (it stops
  # strictly below): -2 / 2 against -1, and -2 / ((5 + 3) / 6) against -1.5.
  assert length_rules.hopeless(jnp.array([-2.0]), jnp.array([-1.0]), 2, jnp.array([2]), 1.0,
                               'transformers')[0]
  assert not length_rules.hopeless(jnp.array([-2.0]), jnp.array([-1.5]), 2, jnp.array([2]),
                                   1.0)[0]


def test_an_unknown_rule_is_refused_in_one_line():
  with pytest.raises(ValueError, match=r"^length_penalty: length_rule='fairseq'; expected one "
                     r"of gnmt, transformers$"):
    length_rules.length_penalty(3, 0.6, 'fairseq')
  with pytest.raises(ValueError, match=r"^beam_search: length_rule='GNMT'"):
    search.beam_search(lambda t, c: (jnp.zeros((4, 5)), c), {}, batch_size=1,
                       max_decode_len=3, length_rule='GNMT')
  from t2t_jax.inference.translate import Translator
  with pytest.raises(ValueError, match=r"^Translator: length_rule='hf'"):
    Translator(TransformerConfig(vocab_size=8, d_model=8, d_ff=8, num_heads=1, num_layers=1),
               {}, _Tokenizer(), length_rule='hf')


class _Tokenizer:
  vocab_size = 8

  def encode(self, text):
    return [2]

  def decode(self, ids):
    return ''
