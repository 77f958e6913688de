"""Seven model variants researchers try, each a factory `TransformerConfig -> Transformer`.

Train one with the whole machinery (token store, checkpoints, dev BLEU, averaging, decode,
attention maps, export):

  python main.py --workdir=DIR --config.model=examples/variants.py:rotary

README "Change the model" shows each one with its line count; tests/cli/test_model_flag.py
trains, decodes and exports them through main.py.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

import t2t_jax
from t2t_jax.model.parts import feed_forward


# --- Grouped-query attention (Ainslie et al., 2023): 2 key/value heads; 1 is multi-query. ---
def gqa(cfg):
  return t2t_jax.Transformer(cfg.replace(num_kv_heads=2))


# --- Rotary positions (RoPE, Su et al., 2021): queries and keys rotated by their positions;
# a key once, before decoding caches it. Nothing is added to the embeddings. ---
def rotate(x, positions, *, kind, role):       # x: [batch, length, heads, d_k]
  if kind == 'encoder_decoder':                # within a sequence only
    return x
  half = x.shape[-1] // 2
  angle = positions[:, :, None, None] * 10000.0 ** (-jnp.arange(half) / half)
  x1, x2, cos, sin = x[..., :half], x[..., half:], jnp.cos(angle), jnp.sin(angle)
  return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).astype(x.dtype)


def rotary(cfg):
  return t2t_jax.Transformer(cfg, qk_transform=rotate, positions=None)


# --- T5's relative position bias (Raffel et al., 2020): one learned table per stack, shared
# by all its layers, a scalar per head for each bucket of distances. ---
class RelativeBias(nn.Module):
  cfg: t2t_jax.TransformerConfig
  buckets: int = 32
  max_distance: int = 128

  @nn.compact
  def __call__(self, query_positions, key_positions, *, kind):
    if kind == 'encoder_decoder':
      return None
    distance = key_positions[:, None, :] - query_positions[:, :, None]        # [b, q, k]
    both_ways = kind == 'encoder'             # the decoder only looks back
    half = self.buckets // 2 if both_ways else self.buckets
    n = jnp.abs(distance) if both_ways else jnp.maximum(-distance, 0)
    exact = half // 2                         # distances below it get a bucket each
    far = exact + (jnp.log(jnp.maximum(n, 1) / exact) / jnp.log(self.max_distance / exact)
                   * (half - exact)).astype(jnp.int32)
    bucket = jnp.where(n < exact, n, jnp.minimum(far, half - 1))
    bucket += jnp.where(distance > 0, half, 0) if both_ways else 0
    table = self.param(kind, nn.initializers.zeros, (self.buckets, self.cfg.num_heads))
    return jnp.take(table, bucket, axis=0).transpose(0, 3, 1, 2)            # [b, h, q, k]


def biased_attention(query, key, value, mask=None, *, shared=None, **kwargs):
  return t2t_jax.dot_product_attention(query, key, value, mask, bias=shared, **kwargs)


def t5_bias(cfg):
  return t2t_jax.Transformer(cfg, attention_fn=biased_attention, shared=RelativeBias,
                             positions=None)


# --- Pre-LN with RMSNorm (Zhang & Sennrich, 2019) through the parts: x + F(RMSNorm(x)), and
# each stack ends with an RMSNorm because the residual part says 'pre'. ---
def rms_norm(cfg, *, name):
  return nn.RMSNorm(epsilon=1e-6, dtype=cfg.dtype, param_dtype=jnp.float32, name=name)


def pre_residual(cfg, norm, *, name):
  return t2t_jax.Residual('pre', cfg.dropout_rate, cfg.dtype,
                          norm=functools.partial(norm, cfg), name=name)


def pre_rmsnorm(cfg):
  return t2t_jax.Transformer(cfg, norm=rms_norm, residual=pre_residual)


# --- SwiGLU feed-forward (Shazeer, 2020): (Swish(x W) * x V) W_2, no biases. ---
class SwiGLU(nn.Module):
  cfg: t2t_jax.TransformerConfig

  @nn.compact
  def __call__(self, x):
    dense = functools.partial(nn.Dense, use_bias=False, dtype=self.cfg.dtype)
    gate, up = dense(self.cfg.d_ff, name='gate')(x), dense(self.cfg.d_ff, name='up')(x)
    return dense(self.cfg.d_model, name='down')(nn.silu(gate) * up)


def swiglu(cfg):
  return t2t_jax.Transformer(cfg, feed_forward=SwiGLU)


# --- Switch feed-forward (Fedus et al., 2021): a router sends each token to one of 4 experts,
# each the paper's FFN. Its load-balancing loss is sown into 'losses': the train step adds it
# times config.aux_loss_weight and logs it as aux_load_balancing (docs/extension_points.md).
# Dense for clarity: every expert runs on every token. ---
class SwitchFeedForward(nn.Module):
  cfg: t2t_jax.TransformerConfig
  experts: int = 4
  alpha: float = 0.01                          # the Switch Transformer's loss coefficient

  @nn.compact
  def __call__(self, x):                       # x: [batch, length, d_model]
    probs = jax.nn.softmax(nn.Dense(self.experts, dtype=jnp.float32, name='router')(x))
    choice = jnp.argmax(probs, -1)             # [batch, length]: one expert per token
    gate = jnp.take_along_axis(probs, choice[..., None], -1)
    outs = jnp.stack([feed_forward(self.cfg, name=f'expert_{i}')(x)
                      for i in range(self.experts)], -1)           # [b, l, d_model, experts]
    y = jnp.take_along_axis(outs, choice[..., None, None], -1)[..., 0] * gate
    routed = jnp.mean(jax.nn.one_hot(choice, self.experts), (0, 1))  # fraction per expert
    self.sow('losses', 'load_balancing',
             self.alpha * self.experts * jnp.sum(routed * jnp.mean(probs, (0, 1))))
    return y.astype(x.dtype)


def switch_moe(cfg):
  return t2t_jax.Transformer(cfg, feed_forward=SwitchFeedForward)


# --- A sliding-window decoder (local attention, as Longformer's and Mistral's): each target
# position attends to itself and the 15 before it, so decoding keeps a ring buffer of 16 key/
# value slots per layer instead of max_decode_len (docs/extension_points.md). ---
def sliding_window(cfg):
  return t2t_jax.Transformer(cfg.replace(decoder_window=16))


VARIANTS = {'gqa': gqa, 'rotary': rotary, 't5_bias': t5_bias, 'pre_rmsnorm': pre_rmsnorm,
            'swiglu': swiglu, 'switch_moe': switch_moe, 'sliding_window': sliding_window}
