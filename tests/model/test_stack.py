"""The scanned layer stack (`stack.py`) computes what the unrolled one does, from the same tree."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax.model import transformer as model

# Three layers, attention dropout on and d_v != d_k (the einsum path): every dropout site.
CFG = model.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=4,
                              num_layers=3, max_len=32, dropout_rate=0.3,
                              attention_dropout_rate=0.2, scan_layers=True)


def _batch():
  rng = np.random.RandomState(0)
  src, tgt = rng.randint(2, CFG.vocab_size, (3, 7)), rng.randint(2, CFG.vocab_size, (3, 6))
  src[0, 5:] = 0
  return jnp.asarray(src), jnp.asarray(tgt)


@functools.lru_cache(maxsize=None)
def _jitted(cfg):
  def loss(p, src, tgt, rng):
    logits = model.Transformer(cfg).apply({'params': p}, src, tgt, rngs={'dropout': rng})
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0] * jnp.arange(logits.shape[1]))
  return jax.jit(jax.value_and_grad(loss))


def _loss_and_grads(cfg, params, src, tgt, rng):
  return _jitted(cfg)(params, src, tgt, rng)


@pytest.mark.slow  # 14-21 s each cold; the fast tier keeps test_packed_rows_and_bfloat16_scan_alike
@pytest.mark.parametrize('deterministic,remat,norm', [
    (True, 'none', 'post'), (False, 'none', 'post'), (False, 'dots_saveable', 'pre')])
def test_scanned_stack_equals_unrolled_dropout_masks_included(deterministic, remat, norm):
  cfg = CFG.replace(deterministic=deterministic, remat_policy=remat, norm_position=norm)
  params = model.init_params(cfg, jax.random.PRNGKey(1))
  assert model.init_params(cfg.replace(scan_layers=False), jax.random.PRNGKey(1)).keys() == (
      params.keys())  # one tree whichever way it runs
  src, tgt = _batch()
  rng = jax.random.PRNGKey(7)
  scanned = _loss_and_grads(cfg, params, src, tgt, rng)
  unrolled = _loss_and_grads(cfg.replace(scan_layers=False), params, src, tgt, rng)
  assert jax.tree_util.tree_structure(scanned) == jax.tree_util.tree_structure(unrolled)
  for a, b in zip(jax.tree_util.tree_leaves(scanned), jax.tree_util.tree_leaves(unrolled)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
  if not deterministic:  # dropout is on: another key gives another loss
    other = _loss_and_grads(cfg, params, src, tgt, jax.random.PRNGKey(8))[0]
    assert abs(float(other) - float(scanned[0])) > 1e-4


def test_packed_rows_and_bfloat16_scan_alike():
  cfg = CFG.replace(dtype=jnp.bfloat16, deterministic=True)
  params = model.init_params(cfg, jax.random.PRNGKey(2))
  src, tgt = _batch()
  seg = jnp.asarray([[1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 1, 1], [1, 1, 2, 2, 3, 0]])
  pos = jnp.asarray([[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 4, 5], [0, 1, 0, 1, 0, 0]])
  packing = dict(inputs_segmentation=jnp.pad(seg, ((0, 0), (0, 1))),
                 inputs_position=jnp.pad(pos, ((0, 0), (0, 1))),
                 targets_segmentation=seg, targets_position=pos)
  run = lambda c: jax.jit(lambda p: model.Transformer(c).apply(  # noqa: E731
      {'params': p}, src, tgt, **packing))(params)
  np.testing.assert_allclose(np.asarray(run(cfg), np.float32),
                             np.asarray(run(cfg.replace(scan_layers=False)), np.float32),
                             rtol=2e-2, atol=2e-2)


def test_one_layer_body_is_compiled_per_stack():
  """The point of scanning: the lowered program holds one while loop per stack (forward), not
  N copies of the layer."""
  cfg = CFG.replace(deterministic=True)
  params = model.init_params(cfg, jax.random.PRNGKey(3))
  src, tgt = _batch()
  text = lambda c: jax.jit(lambda p: model.Transformer(c).apply(  # noqa: E731
      {'params': p}, src, tgt)).lower(params).as_text()
  assert text(cfg).count('stablehlo.while') == 2
  assert text(cfg.replace(scan_layers=False)).count('stablehlo.while') == 0
