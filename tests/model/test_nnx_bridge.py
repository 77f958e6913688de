"""NNX entry point (`nnx_bridge`): the Linen Transformer built, trained with `nnx.Optimizer`
under `nnx.jit`, and decoded through `linen_params` with the Linen decode path; `generate` is
that path (bitwise `Translator`'s search); `linen_params` is a snapshot sharing the arrays."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from t2t_jax.inference import portable, translate
from t2t_jax.model import incremental, losses, nnx_bridge, search, transformer as model

# Dropout on, so that training exercises the module's 'dropout' stream.
TINY = model.TransformerConfig(vocab_size=12, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                               num_layers=1, max_len=16, dropout_rate=0.1)
SRC_LEN = 5  # 4 tokens from 2..11, then EOS (1)


def _copy_batch(rng: np.random.RandomState, rows: int) -> jax.Array:
  """`[rows, SRC_LEN]` int32 sources; the copy task's target is the source itself."""
  tokens = rng.randint(2, TINY.vocab_size, (rows, SRC_LEN - 1))
  return jnp.asarray(np.concatenate([tokens, np.ones((rows, 1), int)], 1), jnp.int32)


@nnx.jit
def _forward(module, src, tgt):
  """`module(src, tgt)` compiled (once per mode: `deterministic` is static)."""
  return module(src, tgt)


def _equal_trees(a, b) -> bool:
  return (jax.tree.structure(a) == jax.tree.structure(b) and
          all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))))


def test_parameters_are_init_params_of_the_rngs_next_params_key():
  module = nnx_bridge.to_nnx(TINY, nnx.Rngs(params=0, dropout=1))
  expected = model.init_params(TINY, nnx.Rngs(params=0, dropout=1).params())
  assert _equal_trees(nnx_bridge.linen_params(module), expected)
  assert not _equal_trees(nnx_bridge.linen_params(module),
                          model.init_params(TINY, jax.random.PRNGKey(0)))
  assert all(isinstance(v, nnx.Param) for _, v in nnx.iter_graph(module)
             if isinstance(v, nnx.Variable) and not isinstance(v, nnx.RngState))
  # From existing Linen parameters (a checkpoint): used as they are.
  given = model.init_params(TINY, jax.random.PRNGKey(7))
  assert _equal_trees(nnx_bridge.linen_params(nnx_bridge.to_nnx(TINY, nnx.Rngs(0), params=given)),
                      given)
  wrong = jax.tree.map(lambda x: x, given)
  wrong['decoder']['layer_0']['ffn']['wi']['bias'] = jnp.zeros(16)
  with pytest.raises(ValueError, match=r"params\['decoder'\]\['layer_0'\]\['ffn'\]\['wi'\]"):
    nnx_bridge.to_nnx(TINY, nnx.Rngs(0), params=wrong)
  wrong['decoder'] = given['decoder']
  del wrong['encoder']
  with pytest.raises(ValueError, match=r"params\['encoder'\].* is missing"):
    nnx_bridge.to_nnx(TINY, nnx.Rngs(0), params=wrong)


def test_forward_is_linen_apply_and_eval_train_switch_dropout():
  module = nnx_bridge.to_nnx(TINY, nnx.Rngs(params=0, dropout=1))
  src = _copy_batch(np.random.RandomState(0), 3)
  linen = model.Transformer(TINY.replace(deterministic=True)).apply(
      {'params': nnx_bridge.linen_params(module)}, src, src)
  assert not module.deterministic  # TINY's mode: training
  first, second = _forward(module, src, src), _forward(module, src, src)
  assert first.shape == (3, SRC_LEN, TINY.vocab_size) and first.dtype == jnp.float32
  assert not np.allclose(first, second)          # a fresh dropout key per call
  assert not np.allclose(first, linen)
  module.eval()
  assert module.deterministic
  np.testing.assert_allclose(_forward(module, src, src), linen, atol=1e-5)
  module.train()
  assert not np.allclose(_forward(module, src, src), linen)
  # Modes follow the model it is given.
  assert nnx_bridge.to_nnx(TINY.replace(deterministic=True), nnx.Rngs(0)).deterministic


def _train(module, steps: int):
  """Adam on the copy task with the project's loss; returns per-step losses (train mode)."""
  optimizer = nnx.Optimizer(module, optax.adam(3e-3), wrt=nnx.Param)

  @nnx.jit
  def train_step(module, optimizer, src):
    def loss_fn(module):
      loss, weight = losses.label_smoothed_cross_entropy(
          module(src, src), src, losses.padding_weights(src), label_smoothing=0.1)
      return loss / weight
    loss, grads = nnx.value_and_grad(loss_fn)(module)
    optimizer.update(module, grads)
    return loss

  rng = np.random.RandomState(1)
  return [float(train_step(module, optimizer, _copy_batch(rng, 32))) for _ in range(steps)]


@pytest.fixture(scope='module')
def trained():
  module = nnx_bridge.to_nnx(TINY, nnx.Rngs(params=0, dropout=1))
  before = nnx_bridge.linen_params(module)
  return module, before, _train(module, 300)


def _beam_decode(params, src, beam_size=4, alpha=0.6):
  """The Linen decode path: `decode_context` / `decode_step` / `init_cache` + `beam_search`."""
  context = incremental.decode_context(TINY, params, src)

  def logits_fn(tokens, cache):
    logits, cache = incremental.decode_step(TINY, params, cache, tokens, context)
    return logits.at[:, model.PAD_ID].set(-1e9), cache

  return search.beam_search(logits_fn, incremental.init_cache(TINY, src.shape[0], 1),
                            batch_size=src.shape[0], beam_size=beam_size, alpha=alpha,
                            max_decode_len=SRC_LEN + 2, grow_cache=incremental.grow_cache)


def test_nnx_optimizer_trains_the_copy_task(trained):
  module, before, curve = trained
  assert curve[-1] < 0.5 * curve[0], curve[::25]
  src = _copy_batch(np.random.RandomState(99), 16)   # held out
  weights = losses.padding_weights(src)
  eval_net = model.Transformer(TINY.replace(deterministic=True))

  @jax.jit
  def nll(params):
    m = losses.compute_metrics(eval_net.apply({'params': params}, src, src), src, weights, 0.1)
    return m['nll'] / m['weight']

  assert nll(nnx_bridge.linen_params(module)) < 0.5 * nll(before)
  # The optimizer changed the module's Params in place; the tree is still init_params's.
  assert jax.tree.structure(nnx_bridge.linen_params(module)) == jax.tree.structure(before)


def test_trained_module_beam_decodes_with_linen_params(trained):
  module, _, _ = trained
  module.eval()
  params = nnx_bridge.linen_params(module)
  src = _copy_batch(np.random.RandomState(5), 8)
  sequences, scores = jax.jit(_beam_decode)(params, src)
  best = np.asarray(sequences[:, 0])
  # The task is learned: every sentence decodes to its copy (EOS, then padding).
  np.testing.assert_array_equal(best[:, :SRC_LEN], src)
  assert (best[:, SRC_LEN:] == 0).all()
  # The beam's score is the NNX forward's log-probability of that output over the GNMT
  # length penalty: the cached Linen decoder and the NNX module compute the same model.
  log_probs = jax.nn.log_softmax(_forward(module, src, src).at[..., model.PAD_ID].set(-1e9))
  tokens_lp = jnp.take_along_axis(log_probs, src[..., None], -1)[..., 0].sum(-1)
  np.testing.assert_allclose(scores[:, 0], tokens_lp / search.length_penalty(SRC_LEN, 0.6),
                             rtol=1e-4, atol=1e-5)



def test_linen_params_is_a_snapshot_of_the_modules_arrays_without_copies():
  module = nnx_bridge.to_nnx(TINY, nnx.Rngs(0))
  params = nnx_bridge.linen_params(module)
  variable = module.shared_embedding['embedding']
  # No copy: the leaves are the arrays the module's Params hold.
  assert params['shared_embedding']['embedding'] is variable[...]
  held = {id(v[...]) for _, v in nnx.iter_graph(module) if isinstance(v, nnx.Param)}
  assert {id(x) for x in jax.tree.leaves(params)} == held
  # A snapshot: an update of the module puts a new array there, the dict keeps the old one...
  before = params['shared_embedding']['embedding']
  variable[...] = before * 2
  assert params['shared_embedding']['embedding'] is before
  np.testing.assert_array_equal(nnx_bridge.linen_params(module)['shared_embedding']['embedding'],
                                before * 2)
  # ... and changing the dict does not change the module.
  params['shared_embedding']['embedding'] = jnp.zeros_like(before)
  np.testing.assert_array_equal(variable[...], before * 2)


class _IdTokenizer:
  """'3 4 5' <-> [3, 4, 5]: Translator's batching and padding over ids given as text."""

  def encode(self, text):
    return [int(t) for t in text.split()]

  def decode(self, ids):
    return ' '.join(map(str, ids))


def test_generate_is_the_translators_beam_search(trained):
  module, _, _ = trained
  module.train()  # generate decodes without dropout in either mode
  params = nnx_bridge.linen_params(module)
  rng = np.random.RandomState(3)
  rows = [list(rng.randint(2, TINY.vocab_size, n)) + [model.EOS_ID] for n in (4, 1, 6, 3, 2)]
  src = np.zeros((len(rows) + 1, 8), np.int32)   # the last row: padding only
  for r, ids in enumerate(rows):
    src[r, :len(ids)] = ids
  best, scores = module.generate(src, max_decode_extra=3)
  assert best.shape == (6, 8 + 3) and best.dtype == jnp.int32 and scores.dtype == jnp.float32
  assert best[5].tolist() == [model.EOS_ID] + [0] * 10  # an empty row: EOS alone
  # Translator on the same sentences, one batch of 6 rows padded to 8 (its search with every
  # beam, `decode_batch_n_best`): the same best hypotheses, the same scores up to rounding
  # (two programs: XLA may fuse them apart; 1e-7 apart with the tests' older emitters).
  translator = translate.Translator(TINY, params, _IdTokenizer(), max_decode_extra=3,
                                    batch_sentences=6, bucket_lengths=(8,))
  hypotheses = translator.translate_n_best([' '.join(map(str, ids[:-1])) for ids in rows], n=1)
  assert [h.ids for h, in hypotheses] == [portable.until_eos(r) for r in best[:5].tolist()]
  np.testing.assert_allclose([h.score for h, in hypotheses], scores[:5], rtol=1e-6)
  assert best[:5, -1].tolist() == [0] * 5 and hypotheses[0][0].ids == rows[0][:-1]  # copied
  # Under nnx.jit: the same program, the same numbers.
  jitted = nnx.jit(lambda module, src: module.generate(src, max_decode_extra=3))(module, src)
  np.testing.assert_array_equal(jitted[0], best)
  np.testing.assert_array_equal(jitted[1], scores)
  with pytest.raises(ValueError, match=r'generate: inputs of shape \(2, 17\); expected '
                     r'\[batch, src_len\] with src_len <= max_len=16'):
    module.generate(np.ones((2, 17), np.int32))
  module.eval()


@pytest.mark.parametrize('inputs, kwargs, error, message', [
    ([[500, 6, 1]], {}, ValueError, r'inputs holds the id 500, outside the vocabulary '
     r'\[0, 12\)'),
    ([[-2, 6, 1]], {}, ValueError, r'inputs holds the id -2, outside the vocabulary'),
    (np.ones((1, 3), np.float32), {}, TypeError, 'inputs has dtype float32; expected integer '
     'token ids'),
    ([5, 6, 1], {}, ValueError, r'inputs of shape \(3,\); expected \[batch, length\]'),
    ([[5, 6, 1]], {'max_decode_extra': -3}, ValueError, 'max_decode_extra=-3; expected an '
     'integer >= 0'),
    ([[5, 6, 1]], {'beam_size': 0}, ValueError, 'beam_size=0; expected an integer >= 1'),
    ([[5, 6, 1]], {'alpha': float('nan')}, ValueError, 'alpha=nan; expected a finite number'),
    ([[5, 6, 1]], {'alpha': '0.6'}, ValueError, "alpha='0.6'; expected a finite number"),
], ids=['id 500', 'negative id', 'float', '1-D', 'extra -3', 'beam 0', 'alpha nan',
        'alpha str'])
def test_generate_refuses_arguments_naming_them(inputs, kwargs, error, message):
  """Before any work: not a result computed from clamped embedding rows, nor jax's own error
  from inside the search ('grow_cache: cannot shrink a cache')."""
  module = nnx_bridge.to_nnx(TINY, nnx.Rngs(params=0))
  with pytest.raises(error, match=r'^generate: ' + message):
    module.generate(inputs, **kwargs)


def test_to_nnx_refuses_a_bad_model_or_rngs_naming_the_argument():
  """The fourth tour: not an AttributeError on None, nor a message naming neither."""
  with pytest.raises(TypeError, match=r'^to_nnx: rngs is a NoneType; expected an nnx.Rngs'):
    nnx_bridge.to_nnx(TINY, None)
  with pytest.raises(TypeError, match=r'^to_nnx: model is a str; expected a Transformer'):
    nnx_bridge.to_nnx('base', nnx.Rngs(0))
