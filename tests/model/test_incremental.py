"""`incremental.check_incremental` beyond one padded batch: a row alone must give the logits it
has inside the padded batch, and wrong arguments are refused before any work, naming them."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import incremental, transformer

CFG = transformer.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
                                    num_layers=1, max_len=24, dropout_rate=0.0)
INPUTS = np.array([[5, 9, 12, 7, 1, 0], [17, 3, 1, 0, 0, 0]], np.int32)
TARGETS = np.array([[8, 14, 22, 1, 0], [30, 6, 11, 19, 1]], np.int32)


@functools.lru_cache(maxsize=None)
def _params():
  return transformer.init_params(CFG, jax.random.PRNGKey(0))


def rms_over_padded_length(x, positions, *, kind, role):
  """The encoder's keys divided by their RMS over every position, padding included."""
  del positions
  if kind == 'encoder' and role == 'key':
    return x / jnp.sqrt(jnp.mean(jnp.square(x), axis=1, keepdims=True) + 1e-6)
  return x


def test_a_variant_that_reads_the_padding_is_caught():
  """Teacher forcing and decoding of one padded batch agree (both see the same padding): only
  a row run alone shows that its logits depend on the padded length."""
  model = transformer.Transformer(CFG, qk_transform=rms_over_padded_length)
  padded = np.zeros((2, 24), np.int32)
  padded[:, :INPUTS.shape[1]] = INPUTS
  with pytest.raises(ValueError, match=r'^row 0 gives other logits alone than inside the '
                     r"padded batch .*: the model reads the batch's padding"):
    incremental.check_incremental(model, _params(), padded, TARGETS)
  # The paper's model: alone or padded, the same sentence.
  assert incremental.check_incremental(CFG, _params(), padded, TARGETS) < 2e-5


@pytest.mark.parametrize('inputs, targets, error, message', [
    (INPUTS, TARGETS[:, :0], ValueError, r'targets of shape \(2, 0\); expected \[batch, '
     r'length\] token ids with batch and length >= 1'),
    (INPUTS[:0], TARGETS[:0], ValueError, r'inputs of shape \(0, 6\)'),
    (INPUTS, np.concatenate([TARGETS, TARGETS[:1]]), ValueError,
     'inputs has 2 rows but targets 3; expected one target row per input row'),
    (INPUTS[0], TARGETS[0], ValueError, r'inputs of shape \(6,\)'),
    (INPUTS.astype(np.float32), TARGETS, TypeError, 'inputs has dtype float32; expected '
     'integer token ids'),
    (INPUTS, TARGETS + 40, ValueError, r'targets holds the id 70, outside the vocabulary '
     r'\[0, 40\) of the model'),
], ids=['empty targets', 'batch 0', 'batches differ', '1-D', 'float', 'outside vocab'])
def test_arguments_it_cannot_check_are_refused_naming_them(inputs, targets, error, message):
  with pytest.raises(error, match=r'^check_incremental: ' + message):
    incremental.check_incremental(CFG, _params(), inputs, targets)


@pytest.mark.parametrize('max_decode_len', [0, 25, True])
def test_a_max_decode_len_outside_the_model_is_refused_naming_it(max_decode_len):
  """The fourth tour: 0 was accepted silently (the long cache never compared), beyond
  max_len came out as 'sequence length 25 exceeds config.max_len' naming no argument."""
  with pytest.raises(ValueError, match=r'^check_incremental: max_decode_len=.*; expected an '
                     r'integer in \[1, max_len=24\]'):
    incremental.check_incremental(CFG, _params(), INPUTS, TARGETS,
                                  max_decode_len=max_decode_len)


def test_params_of_another_model_are_refused_naming_the_parameter():
  """The fourth tour: flax's ScopeParamShapeError from inside the model before."""
  other = transformer.init_params(CFG.replace(d_ff=32), jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match=r"^check_incremental: params\['decoder'\].* is "
                     r'\(32,\), the model needs \(64,\)'):
    incremental.check_incremental(CFG, other, INPUTS, TARGETS)
