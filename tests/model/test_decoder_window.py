"""A sliding-window decoder (`TransformerConfig.decoder_window`, issue 44): the band mask in
training, a ring-buffer cache of W slots in decoding, the real positions for attention_fn."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import t2t_jax
from t2t_jax import config as config_lib
from t2t_jax.configs import default
from t2t_jax.model import attention, incremental, transformer as model

TINY = model.TransformerConfig(vocab_size=32, d_model=16, d_ff=32, num_heads=2, num_layers=2,
                               max_len=32, decoder_window=3)
INPUTS = np.array([[5, 6, 7, 8, 1, 0], [9, 10, 11, 1, 0, 0]], np.int32)
TARGETS = np.array([[12, 13, 14, 15, 16, 17, 18, 19, 20, 1],
                    [15, 16, 17, 18, 19, 1, 0, 0, 0, 0]], np.int32)  # longer than W = 3


def _params(cfg):
  return model.init_params(cfg, jax.random.PRNGKey(0))


def test_the_window_is_a_model_key_and_0_is_the_paper():
  assert model.TransformerConfig(decoder_window=0) == model.TransformerConfig()
  assert hash(model.TransformerConfig(decoder_window=0)) == hash(model.TransformerConfig())
  c = default.get_config()
  assert c.decoder_window == 0 and 'decoder_window' in config_lib.MODEL_KEYS
  c.decoder_window = 16
  assert model.TransformerConfig.from_config(c).decoder_window == 16
  for bad in (-1, 1.5, True):
    with pytest.raises(ValueError, match='decoder_window'):
      model.TransformerConfig(decoder_window=bad)
  c.decoder_window = -1
  with pytest.raises(config_lib.ConfigError, match='decoder_window'):
    config_lib.validate(c)


def test_sliding_window_mask():
  mask = np.asarray(attention.combine_masks(attention.causal_mask(5),
                                            attention.sliding_window_mask(5, 2)))[0, 0]
  assert mask.astype(int).tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0],
                                       [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]


def test_the_cache_has_window_slots():
  cache = incremental.init_cache(TINY, 2, 20)
  assert cache['decoder']['layer_0']['self_attention']['cached_key'].shape == (2, 2, 3, 8)
  assert incremental.cache_slots(TINY, 20) == 3 and incremental.cache_slots(TINY, 2) == 2
  assert incremental.cache_slots(TINY.replace(decoder_window=None), 20) == 20
  grown = incremental.grow_cache(incremental.init_cache(TINY, 2, 1), 16, window=3)
  assert grown['decoder']['layer_1']['self_attention']['cached_value'].shape[2] == 3


def test_the_window_changes_training_only_past_w():
  """Teacher forcing: the first W positions see what the paper's model sees; later ones not."""
  params = _params(TINY)

  def forced(window):  # compiled: one program, not one per operation
    net = model.Transformer(TINY.replace(deterministic=True, decoder_window=window))
    return jax.jit(lambda p: net.apply({'params': p}, INPUTS, TARGETS))(params)
  windowed, full = forced(TINY.decoder_window), forced(None)
  np.testing.assert_allclose(windowed[:, :3], full[:, :3], atol=1e-5)
  assert np.abs(np.asarray(windowed[:, 3:] - full[:, 3:])).max() > 1e-3
  wide = forced(10)
  np.testing.assert_allclose(wide, full, atol=1e-5)  # W >= the targets: the paper's numbers


def _rotate(x, positions, *, kind, role):
  if kind == 'encoder_decoder':
    return x
  half = x.shape[-1] // 2
  angle = positions[:, :, None, None] * 10000.0 ** (-jnp.arange(half) / half)
  x1, x2, cos, sin = x[..., :half], x[..., half:], jnp.cos(angle), jnp.sin(angle)
  return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).astype(x.dtype)


def _distance_bias(query, key, value, mask=None, *, query_positions, key_positions, **kwargs):
  """ALiBi-like: reads the real key positions, so a ring slot handed over at its slot index
  instead of its position would decode differently."""
  distance = query_positions[:, None, :, None] - key_positions[:, None, None, :]
  return attention.dot_product_attention(
      query, key, value, mask, bias=-0.3 * distance.astype(jnp.float32),
      query_positions=query_positions, key_positions=key_positions, **kwargs)


@pytest.mark.parametrize('variant', ['rotary', 'distance_bias', 'gqa_scan'])
def test_windowed_decoding_is_teacher_forcing(variant):
  cfg = TINY
  if variant == 'gqa_scan':
    cfg = TINY.replace(num_kv_heads=1, scan_layers=True)
  net = {'rotary': lambda: model.Transformer(cfg, qk_transform=_rotate, positions=None),
         'distance_bias': lambda: model.Transformer(cfg, attention_fn=_distance_bias),
         'gqa_scan': lambda: model.Transformer(cfg)}[variant]()
  params = _params(net)
  # Caches of 10 and 32 requested: both 3 slots, wrapping 3 times.
  assert t2t_jax.check_incremental(net, params, INPUTS, TARGETS) < 1e-4


def test_a_cache_longer_than_the_window_still_masks_it():
  """A cache of more slots than W (grown without the window) decodes the same."""
  net = model.Transformer(TINY, attention_fn=_distance_bias)
  params = _params(net)
  forced = model.as_model(net, deterministic=True).apply({'params': params}, INPUTS, TARGETS)
  context = incremental.decode_context(net, params, INPUTS)
  cache = incremental.grow_cache(incremental.init_cache(net, 2, 1), 13)  # 13 slots, no cap
  assert cache['decoder']['layer_0']['self_attention']['cached_key'].shape[2] == 13
  step = jax.jit(lambda c, t: incremental.decode_step(net, params, c, t, context))
  logits = []
  for token in np.asarray(model.shift_right(jnp.asarray(TARGETS))).T:
    out, cache = step(cache, jnp.asarray(token)[:, None])
    logits.append(out)
  gap = np.abs(np.stack(logits, 1) - np.asarray(forced)) * (TARGETS != 0)[..., None]
  assert gap.max() < 1e-4


def test_a_windowed_model_beam_decodes_and_refuses_ctranslate2():
  params = _params(TINY)
  seqs, _ = t2t_jax.beam_decode(TINY, 2, 0.6, params, jnp.asarray(INPUTS),
                                jnp.array([20, 20], jnp.int32), 20)
  fixed, _ = t2t_jax.beam_decode(TINY, 2, 0.6, params, jnp.asarray(INPUTS),
                                 jnp.array([20, 20], jnp.int32), 20, grow_cache=False)
  assert seqs.shape == (2, 2, 20)
  np.testing.assert_array_equal(seqs, fixed)
  from t2t_jax.export import ctranslate2_export
  from t2t_jax.export.common import ExportError
  with pytest.raises(ExportError, match='decoder_window'):
    ctranslate2_export.check_paper_layers(model.Transformer(TINY))
  ctranslate2_export.check_paper_layers(model.Transformer(TINY.replace(decoder_window=None)))
