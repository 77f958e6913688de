"""`beam_decode` checks its arguments before any work (issue 51, 3): each bad one refused in
one line naming it, instead of every score -1e9 (alpha=nan), "Too many indices" (an int
max_lengths) or "Shapes must be 1D sequences" (beam_size=2.5); good ones decode as before."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import t2t_jax
from t2t_jax.model import search, transformer as model

VOCAB = 24
CFG = model.TransformerConfig(vocab_size=VOCAB, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                              num_layers=1, max_len=32, deterministic=True)
INPUTS = jnp.array([[3, 4, 1, 0], [5, 6, 7, 1]], jnp.int32)
MAX_LENGTHS = jnp.array([4, 6], jnp.int32)


@pytest.fixture(scope='module')
def params():
  return model.init_params(CFG, jax.random.PRNGKey(0))


def test_good_arguments_decode(params):
  sequences, scores = t2t_jax.beam_decode(CFG, 2, 0.6, params, INPUTS, MAX_LENGTHS, 8)
  assert sequences.shape == (2, 2, 8) and scores.shape == (2, 2)
  assert np.all(np.isfinite(np.asarray(scores))) and np.all(np.diff(scores, axis=1) <= 0)
  # Every hypothesis ends with EOS within its row's max_length, then padding.
  for row, limit in enumerate(np.asarray(MAX_LENGTHS)):
    for seq in np.asarray(sequences[row]):
      end = int(np.flatnonzero(seq == model.EOS_ID)[0])
      assert end < limit and not seq[end + 1:].any()
  # Under jit, traced inputs pass the static checks: the same search.
  jitted = jax.jit(t2t_jax.beam_decode, static_argnums=(0, 1, 2, 6))
  got = jitted(CFG, 2, 0.6, params, INPUTS, MAX_LENGTHS, 8)
  np.testing.assert_array_equal(got[0], sequences)
  np.testing.assert_allclose(got[1], scores, rtol=1e-6)


@pytest.mark.parametrize('change,error,message', [
    (dict(alpha=float('nan')), ValueError, 'beam_decode: alpha=nan; expected a finite number'),
    (dict(alpha='0.6'), TypeError, "beam_decode: alpha is a str ('0.6'); expected a finite "
     'number'),
    (dict(beam_size=2.5), TypeError, 'beam_decode: beam_size is a float (2.5); expected an '
     'integer'),
    (dict(beam_size=0), ValueError, 'beam_decode: beam_size=0; expected an integer >= 1'),
    (dict(max_decode_len=40), ValueError, "beam_decode: max_decode_len=40; expected at most "
     "the model's max_len=32"),
    (dict(max_lengths=6), ValueError, 'beam_decode: max_lengths has shape (); expected 1 '
     'dimensions [rows]'),
    (dict(max_lengths=jnp.array([6, 6, 6], jnp.int32)), ValueError,
     'beam_decode: max_lengths has shape (3,); expected [rows] = (2,), one per source row'),
    (dict(max_lengths=jnp.array([6.0, 6.0])), TypeError,
     'beam_decode: max_lengths is dtype float32; expected an array of integers'),
    (dict(inputs=INPUTS.at[0, 0].set(VOCAB)), ValueError,
     f'beam_decode: inputs holds the id {VOCAB}, outside the vocabulary [0, {VOCAB})'),
    (dict(inputs=INPUTS[0]), ValueError, 'beam_decode: inputs of shape (4,); expected '
     '[batch, length] token ids'),
    (dict(params=[1, 2]), TypeError, "beam_decode: params is a list; expected the model's "
     'parameter tree'),
], ids=['alpha-nan', 'alpha-str', 'beam-float', 'beam-0', 'too-long', 'int-max-lengths',
        'max-lengths-rows', 'float-max-lengths', 'oov', 'rank', 'params'])
def test_a_bad_argument_is_refused_naming_it(params, change, error, message):
  args = dict(beam_size=2, alpha=0.6, params=params, inputs=INPUTS, max_lengths=MAX_LENGTHS,
              max_decode_len=8)
  args.update(change)
  with pytest.raises(error) as info:
    t2t_jax.beam_decode(CFG, args['beam_size'], args['alpha'], args['params'], args['inputs'],
                        args['max_lengths'], args['max_decode_len'])
  assert str(info.value).startswith(message), str(info.value)


def test_swapped_beam_size_and_alpha_are_refused(params):
  with pytest.raises(TypeError, match=r'^beam_decode: beam_size is a float \(0.6\)'):
    t2t_jax.beam_decode(CFG, 0.6, 4, params, INPUTS, MAX_LENGTHS, 8)


def test_a_traced_alpha_is_checked_for_its_dtype_only(params):
  """alpha may be traced (a search over several alphas): its value is unknown there."""
  scores = jax.jit(lambda a: t2t_jax.beam_decode(CFG, 2, a, params, INPUTS, MAX_LENGTHS, 8)[1])(
      jnp.float32(0.6))
  want = t2t_jax.beam_decode(CFG, 2, 0.6, params, INPUTS, MAX_LENGTHS, 8)[1]
  np.testing.assert_allclose(scores, want, rtol=1e-6)
  assert float(scores.min()) > search.NEG_INF
