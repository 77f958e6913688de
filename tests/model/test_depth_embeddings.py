"""Encoder and decoder depths apart (`num_encoder_layers`, `num_decoder_layers`), untied and
unscaled embeddings (`share_embeddings`, `scale_embeddings`), the embedding as a part, and the
paper's model bit for bit as before these options (values recorded from commit 7fb3de1)."""

import hashlib
import os
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import at_default_xla_optimization

import t2t_jax
from t2t_jax import config as config_lib
from t2t_jax.configs import default
from t2t_jax.model import incremental, info, layers, losses, parts, transformer as model
from t2t_jax.plan import analytic

TINY = model.TransformerConfig(vocab_size=32, d_model=16, d_ff=32, num_heads=2, num_layers=2,
                               max_len=32)
INPUTS = np.array([[5, 6, 7, 8, 1, 0], [9, 10, 11, 1, 0, 0]], np.int32)
TARGETS = np.array([[12, 13, 14, 1, 0], [15, 16, 1, 0, 0]], np.int32)


def _digest(tree) -> str:
  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    h.update(jax.tree_util.keystr(path).encode())
    a = np.asarray(leaf)
    h.update(str(a.dtype).encode())
    h.update(str(a.shape).encode())
    h.update(a.tobytes())
  return h.hexdigest()


# Recorded from 7fb3de1 (before these options), float32 on CPU, by this very computation
# (/tmp script run in a `git worktree` of 7fb3de1; the same numbers come from this tree).
PAPER_SHAPES = 'ca73e4e02d9a711af0cbccf2f218515cddd81da32955e918ff8060529a6add49'
PAPER_PARAMS = 'bb0dea65395e7e8d1712b3e7e0f79cab82f3099cc89db5a0b513dad544b24a0a'
PAPER_SEQS = [[[26] * 7 + [1], [26] * 6 + [21, 1], [26] * 6 + [7, 1], [21] + [26] * 6 + [1]],
              [[26] * 7 + [1], [26] * 5 + [18, 18, 1], [26] * 6 + [18, 1], [26] * 6 + [30, 1]]]
# The float results are a property of what compiles and runs them: the XLA build (the jax
# version), the backend and, on a CPU, the widest vector instructions XLA targets (an Intel
# Xeon with AVX-512 gave a loss 4 ulps from an AMD EPYC with AVX2 on the same wheels, and
# --xla_cpu_max_isa=AVX2 does not bring the AMD bits back). Recorded for each (jax, machine)
# from the same 7fb3de1 worktree: loss and gradients' digest (compiled as one program, as
# training computes them; re-recorded so on 2026-11-27: op by op they took 325 programs and
# 10 s), scores. Elsewhere the same numbers hold to float32 rounding (`TOLERANCE`).
PAPER_FLOATS = {
    ('0.10.2', 'cpu-avx2'): ('0x1.a54ac60000000p+4',
                             'e05892a78af5e5d7f005e22bee188afa1c12519f95f9e2e5c53d074764e6da66',
                             [['-0x1.2e0af80000000p+3', '-0x1.41c8540000000p+3',
                               '-0x1.43e9d60000000p+3', '-0x1.44e9a20000000p+3'],
                              ['-0x1.27466e0000000p+3', '-0x1.3420b40000000p+3',
                               '-0x1.342cc60000000p+3', '-0x1.3ecd160000000p+3']]),
    ('0.11.2', 'cpu-avx2'): ('0x1.a54ac60000000p+4',
                             '75fbbf72eaaf3ee8820bdbf0436248627453f3bca04b119c29c278fc772e861c',
                             [['-0x1.2e0af80000000p+3', '-0x1.41c8540000000p+3',
                               '-0x1.43e9d80000000p+3', '-0x1.44e9a00000000p+3'],
                              ['-0x1.27466c0000000p+3', '-0x1.3420b20000000p+3',
                               '-0x1.342cc40000000p+3', '-0x1.3ecd160000000p+3']]),
}
# Each gradient leaf's L2 norm (tree order), float64 of the 0.10.2 cpu-avx2 gradients: what the
# tolerance compares on a machine without a bitwise record.
PAPER_GRAD_NORMS = (
    1.22409252, 3.25588295, 1.15733265, 2.82513863, 1.66479926, 1.57378118, 0.771403093,
    3.69773755, 1.28786804, 4.21032318, 2.1328977, 2.35245038, 0.780317068, 3.47961949,
    0.73616906, 3.66504683, 1.28289174, 1.15255472, 1.82494454, 7.39332147, 1.57094218,
    5.70058578, 3.06278492, 2.33378948, 1.59777896, 6.84374778, 2.41332355, 7.53699494,
    3.24280222, 3.23820012, 2.9952189, 4.98008201, 3.04056917, 4.53697961, 2.07371792,
    1.15653175, 2.68857965, 2.15212611, 1.48442193, 5.29052419, 2.46955892, 6.80062367,
    3.18153673, 2.70601055, 2.33527104, 5.70058634, 2.19392559, 6.56713833, 1.97266144,
    1.95465723, 1.39726425, 5.05832917, 2.29870024, 5.1957393, 2.40225896, 2.04764376,
    2.61463115, 4.81345718, 2.51918074, 4.62330397, 13.9073767)
# Each initial parameter leaf's L2 norm (tree order), likewise: initialisation samples through
# float maths (a normal's inverse error function), whose last bits follow the ISA too (XLA
# targeting AVX without FMA changes the parameters' digest).
PAPER_PARAM_NORMS = (
    3.89598879, 4.15122325, 3.843669, 3.9336865, 0.0, 4.0, 0.0, 4.62059252, 0.0, 4.5254508, 0.0,
    4.0, 3.98646534, 4.12564283, 3.89809692, 3.9831622, 0.0, 4.0, 3.95564497, 4.13494043,
    4.1249675, 4.09308745, 0.0, 4.0, 0.0, 4.55170819, 0.0, 4.57196147, 0.0, 4.0, 4.17950402,
    3.96267045, 3.9218588, 3.96467695, 0.0, 4.0, 0.0, 4.0, 0.0, 4.70213216, 0.0, 4.69914107,
    0.0, 4.0, 3.91956675, 3.96901141, 4.00841432, 4.02530364, 0.0, 4.0, 0.0, 4.55128043, 0.0,
    4.54908595, 0.0, 4.0, 4.07862008, 4.01614364, 3.91370897, 4.11365632, 5.7207148)
# 4 ulps of float32 are 5e-7 relative; a changed model moves these by far more.
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def _machine() -> str:
  """What decides the float bits beside the XLA build: the backend and, on a CPU, the widest
  vector ISA XLA:CPU targets there ('cpu-avx512', 'cpu-avx2', else 'cpu-other'; a cap given
  in XLA_FLAGS, --xla_cpu_max_isa=AVX, is its own machine)."""
  backend = jax.default_backend()
  if backend != 'cpu':
    return backend
  capped = re.search(r'--xla_cpu_max_isa=(\S+)', os.environ.get('XLA_FLAGS', ''))
  if capped:
    return f'cpu-max-{capped.group(1).lower()}'
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      flags = next((line.split(':', 1)[1].split() for line in f if line.startswith('flags')), [])
  except OSError:
    return 'cpu-other'
  return 'cpu-avx512' if 'avx512f' in flags else 'cpu-avx2' if 'avx2' in flags else 'cpu-other'


@at_default_xla_optimization  # the records were made at XLA's default level
def test_the_paper_model_is_bitwise_what_it_was():
  """Same parameter names, shapes and values, loss, gradients and beams as before the options
  (the defaults: num_layers for both stacks, tied and scaled embeddings)."""
  net = model.Transformer(TINY)
  # Initialised op by op, as init_params did when the records were made (it is compiled now,
  # as training's init is: tests/runtime/test_parallel.py).
  dummy = jnp.ones((1, 8), jnp.int32)
  params = nn.meta.unbox(net.init(jax.random.PRNGKey(0), dummy, dummy)['params'])

  def loss_fn(p):
    logits = net.apply({'params': p}, INPUTS, TARGETS, rngs={'dropout': jax.random.PRNGKey(1)})
    return losses.label_smoothed_cross_entropy(logits, TARGETS,
                                               losses.padding_weights(TARGETS), 0.1)[0]

  loss, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
  seqs, scores = t2t_jax.beam_decode(TINY, 4, 0.6, params, jnp.asarray(INPUTS),
                                     jnp.array([8, 8], jnp.int32), 8)
  assert _digest(jax.tree_util.tree_map(lambda x: np.zeros(x.shape, np.int8), params)) == \
      PAPER_SHAPES
  record = PAPER_FLOATS.get((jax.__version__, _machine()))
  if record is not None:
    assert _digest(params) == PAPER_PARAMS
  np.testing.assert_allclose([np.linalg.norm(np.asarray(p, np.float64))
                              for p in jax.tree_util.tree_leaves(params)], PAPER_PARAM_NORMS,
                             **TOLERANCE)
  assert np.asarray(seqs).tolist() == PAPER_SEQS  # argmaxes by margins far above rounding
  if record is None:  # another XLA build or machine: the same numbers to float32 rounding
    paper_loss, _, paper_scores = PAPER_FLOATS[('0.10.2', 'cpu-avx2')]
    np.testing.assert_allclose(float(loss), float.fromhex(paper_loss), **TOLERANCE)
    np.testing.assert_allclose([np.linalg.norm(np.asarray(g, np.float64))
                                for g in jax.tree_util.tree_leaves(grads)], PAPER_GRAD_NORMS,
                               **TOLERANCE)
    np.testing.assert_allclose(np.asarray(scores),
                               [[float.fromhex(x) for x in row] for row in paper_scores],
                               **TOLERANCE)
    return
  paper_loss, paper_grads, paper_scores = record
  assert float(loss).hex() == paper_loss
  assert _digest(grads) == paper_grads
  assert [[float(s).hex() for s in row] for row in np.asarray(scores)] == paper_scores


def test_the_tolerance_holds_where_the_bits_are_recorded():
  """The fallback's own check, on the machine whose bits are recorded: the recorded gradient
  norms are those of the recorded gradients, to float32 rounding."""
  net = model.Transformer(TINY)
  dummy = jnp.ones((1, 8), jnp.int32)
  # Compiled, initialisation too (op by op this test took 21 s of the suite's 2 workers): the
  # norms hold to float32 rounding either way, which is what the fallback's tolerance is for.
  params = nn.meta.unbox(jax.jit(net.init)(jax.random.PRNGKey(0), dummy, dummy)['params'])
  grads = jax.jit(jax.grad(lambda p: losses.label_smoothed_cross_entropy(
      net.apply({'params': p}, INPUTS, TARGETS, rngs={'dropout': jax.random.PRNGKey(1)}),
      TARGETS, losses.padding_weights(TARGETS), 0.1)[0]))(params)
  leaves = jax.tree_util.tree_leaves(grads)
  assert len(leaves) == len(PAPER_GRAD_NORMS) == 61
  np.testing.assert_allclose([np.linalg.norm(np.asarray(g, np.float64)) for g in leaves],
                             PAPER_GRAD_NORMS, **TOLERANCE)
  assert re.fullmatch(r'cpu-(avx512|avx2|other|max-\S+)|gpu|tpu', _machine()), _machine()


def test_layer_counts_follow_num_layers_unless_set():
  assert (TINY.encoder_layers, TINY.decoder_layers) == (2, 2)
  cfg = TINY.replace(num_encoder_layers=3, num_decoder_layers=1)
  assert (cfg.encoder_layers, cfg.decoder_layers) == (3, 1)
  # Equal to num_layers is stored as None: the paper's config and hash are unchanged.
  assert TINY.replace(num_encoder_layers=2, num_decoder_layers=2) == TINY
  assert hash(TINY.replace(num_encoder_layers=2)) == hash(TINY)
  moved = TINY.replace(num_decoder_layers=1).replace(num_layers=4)
  assert (moved.encoder_layers, moved.decoder_layers) == (4, 1)
  for bad in (0, -1, 1.5, True):
    with pytest.raises(ValueError, match='num_encoder_layers'):
      TINY.replace(num_encoder_layers=bad)
  for key in ('share_embeddings', 'scale_embeddings'):
    with pytest.raises(ValueError, match=key):
      TINY.replace(**{key: 1})


def test_run_config_keys_map_to_the_model_and_are_model_keys():
  c = default.get_config()
  assert (c.num_encoder_layers, c.num_decoder_layers) == (0, 0)
  assert c.share_embeddings and c.scale_embeddings
  base = model.TransformerConfig.from_config(c)
  assert base == model.TransformerConfig()  # defaults: the paper's
  c.num_encoder_layers, c.num_decoder_layers = 3, 1
  c.share_embeddings, c.scale_embeddings = False, False
  cfg = model.TransformerConfig.from_config(c)
  assert (cfg.encoder_layers, cfg.decoder_layers) == (3, 1)
  assert not cfg.share_embeddings and not cfg.scale_embeddings
  for key in ('num_encoder_layers', 'num_decoder_layers', 'share_embeddings',
              'scale_embeddings'):
    assert key in config_lib.MODEL_KEYS  # a checkpoint fixes them; resume compares them
  c.num_decoder_layers = -1
  with pytest.raises(config_lib.ConfigError, match='num_decoder_layers'):
    config_lib.validate(c)


@pytest.mark.parametrize('scan', [False, True])
def test_3_encoder_1_decoder_layers_train_and_decode_as_they_teacher_force(scan):
  cfg = TINY.replace(num_encoder_layers=3, num_decoder_layers=1, scan_layers=scan)
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  assert sorted(params['encoder']) == ['layer_0', 'layer_1', 'layer_2']
  assert sorted(params['decoder']) == ['layer_0']
  assert incremental.check_incremental(cfg, params, INPUTS, TARGETS, max_decode_len=8) < 1e-4
  assert len(incremental.decode_context(cfg, params, INPUTS).cross_kv) == 1
  cache = incremental.init_cache(cfg, 2, 4)
  assert sorted(cache['decoder']) == ['layer_0', 'position']
  if scan:  # the scanned stacks compute the unrolled ones
    forced = jax.jit(lambda p: model.Transformer(cfg.replace(deterministic=True)).apply(
        {'params': p}, INPUTS, TARGETS))(params)
    unrolled = jax.jit(lambda p: model.Transformer(
        cfg.replace(scan_layers=False, deterministic=True)).apply(
            {'params': p}, INPUTS, TARGETS))(params)
    np.testing.assert_allclose(forced, unrolled, atol=1e-5)


def test_untied_unscaled_embeddings():
  cfg = TINY.replace(share_embeddings=False, scale_embeddings=False)
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  emb = params['shared_embedding']
  assert sorted(emb) == ['embedding', 'projection']
  assert emb['projection'].shape == emb['embedding'].shape == (32, 16)
  # The embedding is the table's rows, unscaled; the projection is its own matrix.
  ids = jnp.asarray(INPUTS)
  embedded = model.Transformer(cfg).apply({'params': params}, ids,
                                          method=lambda m, x: m.shared_embedding(x))
  np.testing.assert_array_equal(embedded, emb['embedding'][ids])
  scaled = model.Transformer(cfg.replace(scale_embeddings=True)).apply(
      {'params': params}, ids, method=lambda m, x: m.shared_embedding(x))
  np.testing.assert_allclose(scaled, emb['embedding'][ids] * 4.0, rtol=1e-6)
  context = incremental.decode_context(cfg, params, INPUTS)
  np.testing.assert_array_equal(context.vocab_t, emb['projection'].T)
  other = dict(params, shared_embedding=dict(emb, projection=emb['projection'] * 2))
  net = model.Transformer(cfg.replace(deterministic=True))
  teacher_forced = jax.jit(lambda p: net.apply({'params': p}, INPUTS, TARGETS))  # one program
  forced, doubled = teacher_forced(params), teacher_forced(other)
  np.testing.assert_allclose(doubled, forced * 2, rtol=1e-5, atol=1e-6)
  assert incremental.check_incremental(cfg, params, INPUTS, TARGETS, max_decode_len=8) < 1e-4
  seqs, _ = t2t_jax.beam_decode(cfg, 2, 0.6, params, jnp.asarray(INPUTS),
                                jnp.array([6, 6], jnp.int32), 6)
  assert seqs.shape == (2, 2, 6)


def test_the_embedding_is_a_part():
  assert parts.PAPER.embedding is parts.embedding and 'embedding' in parts.NAMES

  class Doubled(layers.SharedEmbedding):
    def __call__(self, ids):
      return super().__call__(ids) * 2

  def doubled(cfg, *, name):
    return Doubled(cfg.vocab_size, cfg.d_model, cfg.dtype, name=name)

  params = model.init_params(TINY, jax.random.PRNGKey(0))
  net = model.Transformer(TINY, embedding=doubled)
  assert net.parts.embedding is doubled
  got = net.apply({'params': params}, jnp.asarray(INPUTS),
                  method=lambda m, x: m.shared_embedding(x))
  want = model.Transformer(TINY).apply({'params': params}, jnp.asarray(INPUTS),
                                       method=lambda m, x: m.shared_embedding(x))
  np.testing.assert_array_equal(got, want * 2)
  assert incremental.check_incremental(net, params, INPUTS, TARGETS, max_decode_len=8) < 1e-4


def test_analytic_flops_and_info_follow_the_depths():
  deep = TINY.replace(num_encoder_layers=3, num_decoder_layers=1)
  by_part = analytic.forward_flops_by_part(deep, 2, 8, 8)
  paper = analytic.forward_flops_by_part(TINY, 2, 8, 8)
  assert by_part['encoder_ffn'] == paper['encoder_ffn'] * 3 // 2
  assert by_part['decoder_ffn'] == paper['decoder_ffn'] // 2
  c = default.get_config()
  c.update(vocab_size=32, d_model=16, d_ff=32, num_heads=2, num_layers=2, max_len=256,
           num_encoder_layers=3, num_decoder_layers=1, share_embeddings=False,
           scale_embeddings=False)
  text = info.describe(c)
  assert 'encoder_layers=3 decoder_layers=1' in text
  assert 'share_embeddings=False scale_embeddings=False' in text
  assert 'encoder/layer_2/ffn/wi/kernel' in text and 'decoder/layer_1' not in text
  assert 'shared_embedding/projection' in text
