"""FLOPs of one step counted from the model's shapes: the check on XLA's own count.

A matmul of `[m, k] x [k, n]` costs 2mkn FLOPs (a multiply and an add). Per token, each
weight matrix of the layers (§3.2.2 projections, §3.3 FFN) and the pre-softmax projection
onto the shared vocabulary (§3.4) is used once forward; the attention scores QK^T and their
product with V (§3.2.1, eq. 1) add 2 * q_len * kv_len * (d_k + d_v) per head and row. The
embedding lookup is a gather, not a matmul. Training adds the backward pass, twice the
forward matmuls (gradients of activations and of weights): 3x forward, the usual
"6 x parameters x tokens" plus attention. Elementwise work (softmax, layer norm, dropout,
Adam) is left out: it is memory-bound, and XLA counts it separately.
"""

from typing import Dict

from t2t_jax.model import transformer as model


def forward_flops_by_part(cfg: model.TransformerConfig, rows: int, src_len: int,
                          tgt_len: int) -> Dict[str, int]:
  """Matmul FLOPs of one teacher-forced forward pass over `[rows, src_len]` inputs and
  `[rows, tgt_len]` targets (padded shapes: the compiled program computes padding too), by
  part: encoder/decoder projections (W^Q, W^K, W^V, W^O), attention (QK^T and AV over the
  full score matrix: masking does not skip it; every query head scores, grouped key/value
  heads or not), FFNs, the pre-softmax projection, and total.
  """
  d, h = cfg.d_model, cfg.num_heads
  n_enc, n_dec = cfg.encoder_layers, cfg.decoder_layers  # the paper: N each
  src, tgt = rows * src_len, rows * tgt_len  # token counts, padding included

  def projections(q_tokens, kv_tokens):  # Q and O over the queries, K and V (kv_heads heads:
    # grouped-query attention projects fewer) over keys/values
    return 2 * d * (h * q_tokens * (cfg.d_k + cfg.d_v) +
                    cfg.kv_heads * kv_tokens * (cfg.d_k + cfg.d_v))

  def scores(q_len, kv_len):
    return 2 * rows * h * q_len * kv_len * (cfg.d_k + cfg.d_v)

  ffn = lambda tokens: 4 * tokens * d * cfg.d_ff  # noqa: E731  (two matmuls)
  parts = {
      'encoder_projections': n_enc * projections(src, src),
      'encoder_attention': n_enc * scores(src_len, src_len),
      'encoder_ffn': n_enc * ffn(src),
      'decoder_projections': n_dec * (projections(tgt, tgt) + projections(tgt, src)),
      'decoder_attention': n_dec * (scores(tgt_len, tgt_len) + scores(tgt_len, src_len)),
      'decoder_ffn': n_dec * ffn(tgt),
      'pre_softmax': 2 * tgt * d * cfg.vocab_size,
  }
  parts['total'] = sum(parts.values())
  return parts


def forward_flops(cfg: model.TransformerConfig, rows: int, src_len: int, tgt_len: int) -> int:
  """`forward_flops_by_part(...)['total']`."""
  return forward_flops_by_part(cfg, rows, src_len, tgt_len)['total']


def train_flops(cfg: model.TransformerConfig, rows: int, src_len: int, tgt_len: int) -> int:
  """Forward plus backward (2x forward): one training step's matmul FLOPs."""
  return 3 * forward_flops(cfg, rows, src_len, tgt_len)
