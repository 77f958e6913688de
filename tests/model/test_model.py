"""The Transformer (§3): parameter counts (Table 3), masking, shared embedding, cached decoding."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import table3, wmt_base, wmt_big
from t2t_jax.model import incremental, layers, losses, transformer as model

TINY = model.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                               num_layers=2, max_len=32, deterministic=True)


def closed_form_params(c) -> int:
  """Parameter count written out from §3: shared embedding + N encoder + N decoder layers."""
  d, h = c.d_model, c.num_heads
  d_k, d_v = c.d_k or d // h, c.d_v or d // h
  attention = 2 * d * h * d_k + 2 * d * h * d_v       # W^Q, W^K, W^V, W^O (no biases)
  ffn = d * c.d_ff + c.d_ff + c.d_ff * d + d          # W1, b1, W2, b2
  norm = 2 * d
  encoder = attention + ffn + 2 * norm
  decoder = 2 * attention + ffn + 3 * norm
  positions = 2 * c.max_len * d if c.positional == 'learned' else 0
  return c.vocab_size * d + c.num_layers * (encoder + decoder) + positions


def _count(config) -> int:
  return model.count_params(model.param_shapes(model.TransformerConfig.from_config(config)))


def test_base_and_big_parameter_counts_match_table3():
  base, big = _count(wmt_base.get_config()), _count(wmt_big.get_config())
  assert base == 63_045_632 and 63e6 <= base <= 65e6  # Table 3: 65M
  assert big == 214_171_648 and 210e6 <= big <= 216e6  # Table 3: 213M


@pytest.mark.parametrize('row', list(table3.ROWS) + ['big'])
def test_every_table3_row_matches_the_closed_form(row):
  c = table3.get_config(row)
  assert _count(c) == closed_form_params(c)
  if row in table3.PAPER_PARAMS:
    # The paper's counts sit 2-4% above ours across rows: a vocabulary-size offset.
    assert abs(_count(c) / (table3.PAPER_PARAMS[row] * 1e6) - 1) < 0.075


def _batch(seed=0, batch=3, src_len=7, tgt_len=6):
  rng = np.random.RandomState(seed)
  src = rng.randint(2, TINY.vocab_size, (batch, src_len))
  src[0, 5:] = 0
  tgt = rng.randint(2, TINY.vocab_size, (batch, tgt_len))
  return jnp.asarray(src), jnp.asarray(tgt)


@functools.partial(jax.jit, static_argnums=0)  # one program, not each operation compiled
def _logits(cfg, params, src, tgt, rngs=None):
  return model.Transformer(cfg).apply({'params': params}, src, tgt, rngs=rngs)


def test_padded_source_positions_change_no_logit():
  params = model.init_params(TINY, jax.random.PRNGKey(0))
  src, tgt = _batch()  # source row 0 is padded from position 5; targets have no padding
  before = _logits(TINY, params, src, tgt)
  # Whatever the encoder sees at padded positions must not matter: move the padding
  # embedding far away. Only column 0 (the logit *of* the pad token, read from the same
  # shared row by the pre-softmax layer) may change.
  table = params['shared_embedding']['embedding']
  moved = dict(params, shared_embedding={'embedding': table.at[0].set(table[0] * 50 + 3.0)})
  after = _logits(TINY, moved, src, tgt)
  np.testing.assert_allclose(before[..., 1:], after[..., 1:], atol=1e-6)
  assert not np.allclose(before[..., 0], after[..., 0])
  # Making a padded position real does change that sentence's logits (the test has teeth).
  real = _logits(TINY, params, src.at[0, 6].set(17), tgt)
  assert not np.allclose(before[0], real[0])
  np.testing.assert_array_equal(before[1:], real[1:])


def test_future_target_token_changes_no_earlier_logit():
  params = model.init_params(TINY, jax.random.PRNGKey(0))
  src, tgt = _batch()
  before = _logits(TINY, params, src, tgt)
  after = _logits(TINY, params, src, tgt.at[:, 3].set(5))
  # Target j is decoder input j+1: logits 0..3 must not move, later ones must.
  np.testing.assert_array_equal(before[:, :4], after[:, :4])
  assert not np.allclose(before[:, 4:], after[:, 4:])


@pytest.mark.slow
def test_one_embedding_matrix_used_three_times():
  params = model.init_params(TINY, jax.random.PRNGKey(0))
  vocab_leaves = [x for x in jax.tree_util.tree_leaves(params) if TINY.vocab_size in x.shape]
  assert len(vocab_leaves) == 1 and vocab_leaves[0].shape == (40, 32)
  table = params['shared_embedding']['embedding']
  src, tgt = _batch()
  logits, state = jax.jit(functools.partial(model.Transformer(TINY).apply,
                                            capture_intermediates=True))(
                                                {'params': params}, src, tgt)
  hidden = state['intermediates']['decoder'][f'layer_{TINY.num_layers - 1}']['__call__'][0]
  np.testing.assert_allclose(logits, hidden @ table.T, atol=1e-5)  # pre-softmax projection
  # The encoder input and decoder input embeddings read the same matrix: the gradient of the
  # logits w.r.t. the table is non-zero on rows that occur only in the source, and on rows
  # that occur only in the decoder input.
  only_src = int(np.setdiff1d(np.asarray(src), np.asarray(tgt))[1])
  only_tgt = int(np.setdiff1d(np.asarray(tgt[:, :-1]), np.asarray(src))[0])

  def logit_of_token_0(t):
    # Column 0 of the pre-softmax layer reads only row 0 of the table, so gradient on any
    # other row must come through the encoder or decoder input embeddings.
    return jnp.sum(_logits(TINY, dict(params, shared_embedding={'embedding': t}), src, tgt)[..., 0])
  grad = jax.jit(jax.grad(logit_of_token_0))(table)
  assert np.abs(grad[only_src]).sum() > 0
  assert np.abs(grad[only_tgt]).sum() > 0


@pytest.mark.parametrize('norm_position,positional,remat_policy', [
    ('post', 'sinusoidal', 'none'), ('pre', 'sinusoidal', 'none'), ('post', 'learned', 'none'),
    ('post', 'sinusoidal', 'full')])
def test_cached_decoding_equals_teacher_forcing(norm_position, positional, remat_policy):
  cfg = TINY.replace(norm_position=norm_position, positional=positional,
                     remat_policy=remat_policy)
  params = model.init_params(cfg, jax.random.PRNGKey(1))
  src, tgt = _batch(seed=2)
  full = _logits(cfg, params, src, tgt)
  context = incremental.decode_context(cfg, params, src)
  cache = incremental.init_cache(cfg, batch=3, max_decode_len=tgt.shape[1])
  decoder_inputs = model.shift_right(tgt)
  step = jax.jit(lambda c, tok: incremental.decode_step(cfg, params, c, tok, context))
  outputs = []
  for t in range(tgt.shape[1]):
    logits, cache = step(cache, decoder_inputs[:, t:t + 1])
    outputs.append(logits)
  np.testing.assert_allclose(jnp.stack(outputs, 1), full, atol=1e-5)


def test_decode_context_holds_projected_encoder_output_and_transposed_vocabulary():
  params = model.init_params(TINY, jax.random.PRNGKey(1))
  src, _ = _batch(seed=3)
  encoded = model.Transformer(TINY).apply({'params': params}, src,
                                          method=model.Transformer.encode)
  context = incremental.decode_context(TINY, params, src)
  assert len(context.cross_kv) == TINY.num_layers and context.cross_kv[0][0].shape == (3, 4, 7, 8)
  kernel = params['decoder']['layer_1']['cross_attention']['value']['kernel']  # [d, heads, d_v]
  np.testing.assert_allclose(context.cross_kv[1][1], np.einsum('bsd,dhk->bhsk', encoded, kernel),
                             atol=1e-5)
  np.testing.assert_array_equal(context.vocab_t, params['shared_embedding']['embedding'].T)


def test_decode_step_shares_sentence_context_across_beam_rows():
  """Rows = sentences x beams (sentence-major) read one context row per sentence: the same
  logits as giving every row its own copy of the context."""
  params = model.init_params(TINY, jax.random.PRNGKey(1))
  src, tgt = _batch(seed=4)
  beam = 3
  # Compiled (the config static): one program per shape, not one per operation.
  decode_context = jax.jit(incremental.decode_context, static_argnums=0)
  decode_step = jax.jit(incremental.decode_step, static_argnums=0)
  context = decode_context(TINY, params, src)
  tiled = decode_context(TINY, params, np.repeat(src, beam, axis=0))
  rng = np.random.RandomState(0)
  tokens = rng.randint(1, TINY.vocab_size, (3 * beam, 4)).astype(np.int32)
  shared = incremental.init_cache(TINY, 3 * beam, 4)
  own = incremental.init_cache(TINY, 3 * beam, 4)
  for t in range(4):
    a, shared = decode_step(TINY, params, shared, tokens[:, t:t + 1], context)
    b, own = decode_step(TINY, params, own, tokens[:, t:t + 1], tiled)
    np.testing.assert_allclose(a, b, atol=1e-5)
  assert shared['decoder']['layer_0']['self_attention']['cached_key'].shape == (9, 4, 4, 8)


def test_eval_mode_is_deterministic_and_train_mode_is_not():
  params = model.init_params(TINY, jax.random.PRNGKey(0))
  src, tgt = _batch()
  a = _logits(TINY, params, src, tgt, rngs={'dropout': jax.random.PRNGKey(1)})
  b = _logits(TINY, params, src, tgt, rngs={'dropout': jax.random.PRNGKey(2)})
  np.testing.assert_array_equal(a, b)
  train = TINY.replace(deterministic=False)
  c = _logits(train, params, src, tgt, rngs={'dropout': jax.random.PRNGKey(1)})
  d = _logits(train, params, src, tgt, rngs={'dropout': jax.random.PRNGKey(2)})
  assert not np.allclose(c, d)


def test_shift_right_starts_with_eos_as_bos():
  tgt = jnp.array([[5, 6, 1, 0]])
  np.testing.assert_array_equal(model.shift_right(tgt), [[1, 5, 6, 1]])


def test_bfloat16_activations_keep_float32_params_and_logits():
  cfg = TINY.replace(dtype=jnp.bfloat16)
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(params))
  src, tgt = _batch()
  logits = _logits(cfg, params, src, tgt)
  assert logits.dtype == jnp.float32
  reference = _logits(TINY, params, src, tgt)
  # bf16 keeps 8 significant bits (relative rounding 2^-9 per value) and the rounding compounds
  # over 2 layers: measured max 0.024, mean 0.0065 against logits up to 3.4. The lower bounds
  # show the bfloat16 setting was honoured (float32 all through would differ by 0).
  diff = np.abs(np.asarray(logits) - np.asarray(reference))
  assert diff.mean() > 1e-3 and diff.max() > 5e-3, diff.max()
  assert diff.max() < 0.06, diff.max()  # 2.5x the measured worst case


def test_sequence_longer_than_max_len_is_refused():
  params = model.init_params(TINY, jax.random.PRNGKey(0))
  long = jnp.ones((1, 33), jnp.int32)
  with pytest.raises(ValueError, match='max_len=32'):
    _logits(TINY, params, long, long)


TRAIN = TINY.replace(deterministic=False, dropout_rate=0.1)


@functools.lru_cache(maxsize=None)
def _loss_and_grads(remat_policy):
  """TRAIN's label-smoothed loss sum on a training-length `_batch` and its gradient, with
  dropout on (one fixed dropout key): (params, loss, grads). Cached: every policy compares
  with one 'none' run."""
  cfg = TRAIN.replace(remat_policy=remat_policy)
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  # Training lengths (the shortest bucket is 8): attention's fused form, as in training; below
  # 8 queries `dot_product_attention` takes decoding's forms, which remat fuses differently.
  src, tgt = _batch(src_len=9, tgt_len=8)

  def loss(p):
    logits = _logits(cfg, p, src, tgt, rngs={'dropout': jax.random.PRNGKey(3)})
    return losses.label_smoothed_cross_entropy(logits, tgt, losses.padding_weights(tgt), 0.1)[0]
  return (params,) + jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.slow
@pytest.mark.parametrize('policy', sorted(model.REMAT_POLICIES))
def test_remat_keeps_parameters_loss_and_gradients(policy):
  """Rematerialised layers: the same parameter tree (checkpoints stay compatible), and the same
  loss and gradients as without, dropout included; only where activations come from differs."""
  params, loss, grads = _loss_and_grads('none')
  remat_params, remat_loss, remat_grads = _loss_and_grads(policy)
  assert jax.tree_util.tree_structure(remat_params) == jax.tree_util.tree_structure(params)
  jax.tree_util.tree_map(np.testing.assert_array_equal, remat_params, params)
  # The layers really are remat'ed (a remat primitive in the program), and only with a policy.
  src, tgt = _batch()
  jaxpr = lambda cfg: str(jax.make_jaxpr(lambda p: _logits(cfg, p, src, tgt))(params))  # noqa: E731
  assert 'remat' in jaxpr(TINY.replace(remat_policy=policy)) and 'remat' not in jaxpr(TINY)
  np.testing.assert_allclose(remat_loss, loss, rtol=1e-6)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                         remat_grads, grads)


def pre_norm_residual(cfg, norm, *, name):
  """A researcher's pre-LN residual part: pre-norm whatever the config says."""
  return layers.Residual('pre', cfg.dropout_rate, cfg.dtype, norm=functools.partial(norm, cfg),
                         name=name)


def test_a_pre_norm_residual_part_brings_its_final_norm():
  """The residual part, not cfg.norm_position, decides the stacks' final norm: a pre-norm part
  under a 'post' config is the 'pre' config's model (the same tree, the same logits); without
  the final norm the un-normalised stream would reach the tied softmax."""
  pre = TINY.replace(norm_position='pre')
  variant = model.Transformer(TINY, residual=pre_norm_residual)
  params = model.init_params(pre, jax.random.PRNGKey(5))
  assert 'final_norm' in params['encoder'] and 'final_norm' in params['decoder']
  assert (jax.tree_util.tree_structure(model.init_params(variant, jax.random.PRNGKey(5))) ==
          jax.tree_util.tree_structure(params))
  src, tgt = _batch(seed=6)
  np.testing.assert_array_equal(jax.jit(variant.apply)({'params': params}, src, tgt),
                                _logits(pre, params, src, tgt))
  assert incremental.check_incremental(variant, params, src, tgt) < 2e-5


def test_a_residual_part_must_declare_its_norm_position():
  class Undeclared(nn.Module):
    cfg: model.TransformerConfig
    norm: object

    @nn.compact
    def __call__(self, x, sublayer, *, deterministic):
      return x + sublayer(self.norm(self.cfg, name='norm')(x))

  with pytest.raises(ValueError, match=r"^residual part Undeclared: its module \(Undeclared\) "
                     r"must declare norm_position 'pre' or 'post' .*, got None"):
    model.init_params(model.Transformer(TINY, residual=Undeclared), jax.random.PRNGKey(0))


def _np_layer_norm(x, p):
  mean = x.mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-6) * p['scale'] + p['bias']


@pytest.mark.parametrize('how', ['config', 'part'])
def test_one_pre_norm_layer_equals_a_hand_written_reference(how):
  """A one-layer pre-norm encoder written out with numpy from the parameters (not by the code
  under test): x + SelfAttention(LN(x)), then + FFN(LN(.)), then the stack's final LN."""
  pre = TINY.replace(norm_position='pre', num_layers=1)
  net = (model.Transformer(pre) if how == 'config' else
         model.Transformer(pre.replace(norm_position='post'), residual=pre_norm_residual))
  params = jax.tree_util.tree_map(np.asarray, model.init_params(pre, jax.random.PRNGKey(7)))
  src, _ = _batch(seed=8)
  encoded = net.apply({'params': params}, src, method=model.Transformer.encode)

  src = np.asarray(src)
  d, heads, d_k = pre.d_model, pre.num_heads, pre.d_k
  angle = np.arange(src.shape[1])[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)
  sinusoids = np.stack([np.sin(angle), np.cos(angle)], -1).reshape(src.shape[1], d)
  x = params['shared_embedding']['embedding'][src] * np.sqrt(d) + sinusoids
  layer = params['encoder']['layer_0']
  att = layer['self_attention']
  y = _np_layer_norm(x, layer['attention_block']['norm'])
  q, k, v = (np.einsum('bld,dhk->blhk', y, att[n]['kernel']) for n in ('query', 'key', 'value'))
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(d_k)
  logits = np.where((src != 0)[:, None, None, :], logits, -1e30)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  x = x + np.einsum('bhqk,bkhd,hde->bqe', weights, v, att['out']['kernel'])
  y = _np_layer_norm(x, layer['ffn_block']['norm'])
  ffn = layer['ffn']
  x = x + np.maximum(0, y @ ffn['wi']['kernel'] + ffn['wi']['bias']) @ ffn['wo']['kernel'] + (
      ffn['wo']['bias'])
  expected = _np_layer_norm(x, params['encoder']['final_norm'])
  assert heads * d_k == 32
  np.testing.assert_allclose(encoded, expected, atol=2e-5)


def test_separate_vocabularies_give_the_encoder_a_table_of_its_own():
  shared = model.param_shapes(TINY)
  assert set(shared) == {'shared_embedding', 'encoder', 'decoder'}  # the paper's tree
  assert {k: v.shape for k, v in shared['shared_embedding'].items()} == {'embedding': (40, 32)}
  cfg = TINY.replace(share_embeddings=False, source_vocab_size=50)
  shapes = model.param_shapes(cfg)
  assert {k: v.shape for k, v in shapes['source_embedding'].items()} == {'embedding': (50, 32)}
  assert {k: v.shape for k, v in shapes['shared_embedding'].items()} == {
      'embedding': (40, 32), 'projection': (40, 32)}  # the target side's, untied (§3.4 off)
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  # The rest of the model starts as it does with one vocabulary: same paths, same numbers.
  untied = model.init_params(TINY.replace(share_embeddings=False), jax.random.PRNGKey(0))
  for part in ('encoder', 'decoder', 'shared_embedding'):
    jax.tree_util.tree_map(np.testing.assert_array_equal, params[part], untied[part])
  # Source ids 40..49 exist only in the encoder's table: the encoder reads it, not the
  # target's (changing the target embedding leaves the encoder output as it is).
  src = jnp.array([[45, 49, 3, model.EOS_ID]], jnp.int32)
  encode = jax.jit(lambda p: model.Transformer(cfg).apply({'params': p}, src,
                                                          method=model.Transformer.encode))
  other = dict(params, shared_embedding=dict(params['shared_embedding'], embedding=jnp.zeros(
      (40, 32))))
  np.testing.assert_array_equal(encode(params), encode(other))
  moved = dict(params, source_embedding={'embedding': params['source_embedding']['embedding']
                                         + 1.0})
  assert not np.allclose(encode(params), encode(moved))
