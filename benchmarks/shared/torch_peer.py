"""The PyTorch peer: the same model, loss, optimizer and decoding, written as a PyTorch user would.

Model: `torch.nn.Transformer` (post-LN `norm_first=False`, ReLU, `batch_first=True`, dropout
as ours) with one shared embedding matrix (source, target and pre-softmax), scaled by
sqrt(d_model), and the same sinusoidal position table as t2t_jax. Three settings make it the
same function as ours (and no more expensive than stock):
  * no final LayerNorm after the encoder and decoder stacks (nn.Transformer adds one even in
    post-LN mode; the paper and t2t_jax have none);
  * no dropout on attention weights (nn.MultiheadAttention applies the layer dropout there;
    the paper and t2t_jax default `attention_dropout_rate=0`);
  * LayerNorm epsilon 1e-6.
The attention projections keep nn.MultiheadAttention's biases (t2t_jax has none): O(d_model)
work, kept so the module is stock. `load_jax_params` copies t2t_jax parameters in (zeroing
those biases), which the benchmarks use to check that both sides compute the same thing.

Loss: `F.cross_entropy(label_smoothing=0.1)` summed over non-padding targets / their count.
Optimizer: Adam(0.9, 0.98, 1e-9) with the paper's warmup/inverse-square-root schedule.

Decoding: nn.TransformerDecoder has no key/value cache, so `PeerDecoder` runs the same
decoder layers' weights step by step with preallocated self-attention K/V caches (reordered by
parent beam each step, only the filled prefix), encoder-decoder K/V computed once per sentence
(the K beams of a sentence are its K query rows, so they are never copied or reordered), and
`F.scaled_dot_product_attention`. `beam_search` follows t2t_jax.model.search exactly (top 2K
candidates, finished set with the GNMT length penalty, forced EOS at the maximum length, the
same early-termination bound), so both sides take the same number of steps.
"""

import math
from typing import Any, Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from t2t_jax.model.layers import sinusoidal_positions

PAD_ID, EOS_ID, BOS_ID = 0, 1, 1
NEG_INF = -1.0e9
MIN_LOG_PROB = -1.0e4


class PeerTransformer(nn.Module):
  """Shared-embedding nn.Transformer: `forward(src [B,S], tgt [B,T]) -> logits [B,T,V]`."""

  def __init__(self, size: Dict[str, Any], max_len: int = 512):
    super().__init__()
    d = size['d_model']
    self.d_model, self.vocab_size, self.num_heads = d, size['vocab_size'], size['num_heads']
    self.embedding = nn.Parameter(torch.randn(size['vocab_size'], d) * d ** -0.5)
    self.transformer = nn.Transformer(
        d_model=d, nhead=size['num_heads'], num_encoder_layers=size['num_layers'],
        num_decoder_layers=size['num_layers'], dim_feedforward=size['d_ff'],
        dropout=size['dropout_rate'], activation='relu', layer_norm_eps=1e-6,
        batch_first=True, norm_first=False)
    self.transformer.encoder.norm = None
    self.transformer.decoder.norm = None
    for m in self.modules():
      if isinstance(m, nn.MultiheadAttention):
        m.dropout = 0.0
    self.register_buffer('positions', torch.from_numpy(sinusoidal_positions(max_len, d)),
                         persistent=False)
    self.dropout = nn.Dropout(size['dropout_rate'])
    self.scale = math.sqrt(d)

  def embed(self, ids: torch.Tensor) -> torch.Tensor:
    x = F.embedding(ids, self.embedding) * self.scale + self.positions[:ids.shape[1]]
    return self.dropout(x)

  def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    src_pad = src == PAD_ID
    length = tgt_in.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=src.device).triu(1)
    y = self.transformer(self.embed(src), self.embed(tgt_in), tgt_mask=causal,
                         src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                         tgt_is_causal=True)
    return F.linear(y, self.embedding)


def shift_right(targets: torch.Tensor) -> torch.Tensor:
  return torch.cat([torch.full_like(targets[:, :1], BOS_ID), targets[:, :-1]], dim=1)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float):
  weight = (targets != PAD_ID).sum()
  loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                         ignore_index=PAD_ID, label_smoothing=label_smoothing, reduction='sum')
  return loss / weight.clamp(min=1), weight


def make_optimizer(model: nn.Module, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
  """Adam(0.9, 0.98, 1e-9) + the paper's schedule (times `scale`, as config.learning_rate_scale);
  the fused CPU/GPU kernel when available."""
  params = list(model.parameters())
  kwargs = dict(lr=1.0, betas=(0.9, 0.98), eps=1e-9)
  try:
    opt = torch.optim.Adam(params, fused=True, **kwargs)
    impl = 'fused'
  except (RuntimeError, TypeError, ValueError):
    opt = torch.optim.Adam(params, foreach=True, **kwargs)
    impl = 'foreach'
  factor = scale * d_model ** -0.5
  sched = torch.optim.lr_scheduler.LambdaLR(
      opt, lambda count: factor * min((count + 1) ** -0.5, (count + 1) * warmup_steps ** -1.5))
  return opt, sched, impl


def train_step(model, forward, opt, sched, src, tgt, label_smoothing=0.1, autocast=None):
  """One update; `forward` is `model` or its torch.compile'd version."""
  opt.zero_grad(set_to_none=True)
  if autocast is not None:
    with torch.autocast(device_type=src.device.type, dtype=autocast):
      logits = forward(src, shift_right(tgt))
  else:
    logits = forward(src, shift_right(tgt))
  loss, _ = loss_fn(logits, tgt, label_smoothing)
  loss.backward()
  opt.step()
  sched.step()
  return loss


@torch.no_grad()
def load_jax_params(model: PeerTransformer, params) -> None:
  """Copies t2t_jax parameters into the peer (attention biases set to zero)."""
  t = lambda x: torch.from_numpy(np.asarray(x, np.float32).copy())  # noqa: E731
  model.embedding.copy_(t(params['shared_embedding']['embedding']))

  def attn(mha: nn.MultiheadAttention, p):
    d = model.d_model
    w = [t(p[n]['kernel']).reshape(d, -1).T for n in ('query', 'key', 'value')]
    mha.in_proj_weight.copy_(torch.cat(w, 0))
    mha.in_proj_bias.zero_()
    mha.out_proj.weight.copy_(t(p['out']['kernel']).reshape(-1, d).T)
    mha.out_proj.bias.zero_()

  def norm(ln: nn.LayerNorm, p):
    ln.weight.copy_(t(p['norm']['scale']))
    ln.bias.copy_(t(p['norm']['bias']))

  def ffn(layer, p):
    layer.linear1.weight.copy_(t(p['wi']['kernel']).T)
    layer.linear1.bias.copy_(t(p['wi']['bias']))
    layer.linear2.weight.copy_(t(p['wo']['kernel']).T)
    layer.linear2.bias.copy_(t(p['wo']['bias']))

  for i, layer in enumerate(model.transformer.encoder.layers):
    p = params['encoder'][f'layer_{i}']
    attn(layer.self_attn, p['self_attention'])
    norm(layer.norm1, p['attention_block'])
    ffn(layer, p['ffn'])
    norm(layer.norm2, p['ffn_block'])
  for i, layer in enumerate(model.transformer.decoder.layers):
    p = params['decoder'][f'layer_{i}']
    attn(layer.self_attn, p['self_attention'])
    norm(layer.norm1, p['self_attention_block'])
    attn(layer.multihead_attn, p['cross_attention'])
    norm(layer.norm2, p['cross_attention_block'])
    ffn(layer, p['ffn'])
    norm(layer.norm3, p['ffn_block'])


def _length_penalty(length, alpha: float):
  return ((5.0 + length) / 6.0) ** alpha


class PeerDecoder:
  """Incremental decoding with key/value caches over a PeerTransformer's weights."""

  def __init__(self, model: PeerTransformer):
    self.m = model.eval()
    self.layers = list(model.transformer.decoder.layers)
    self.h = model.num_heads
    self.dk = model.d_model // model.num_heads

  def encode(self, src: torch.Tensor) -> torch.Tensor:
    m = self.m
    x = F.embedding(src, m.embedding) * m.scale + m.positions[:src.shape[1]]
    return m.transformer.encoder(x, src_key_padding_mask=src == PAD_ID)

  def _start(self, src: torch.Tensor, beam: int, max_len: int):
    """Encodes and precomputes the encoder-decoder K/V: [B, H, S, dk] per layer, once."""
    memory = self.encode(src)
    b, s, d = memory.shape
    cross = []
    for layer in self.layers:
      mha = layer.multihead_attn
      _, wk, wv = mha.in_proj_weight.chunk(3)
      _, bk, bv = mha.in_proj_bias.chunk(3)
      k = F.linear(memory, wk, bk).view(b, s, self.h, self.dk).transpose(1, 2)
      v = F.linear(memory, wv, bv).view(b, s, self.h, self.dk).transpose(1, 2)
      cross.append((k, v))
    # True = may attend, for SDPA's boolean mask: [B, 1, 1, S].
    cross_mask = (src != PAD_ID)[:, None, None, :]
    n = b * beam
    self_cache = [(memory.new_zeros(n, self.h, max_len, self.dk),
                   memory.new_zeros(n, self.h, max_len, self.dk)) for _ in self.layers]
    return cross, cross_mask, self_cache

  def step(self, tokens: torch.Tensor, t: int, beam: int, cross, cross_mask, self_cache):
    """tokens [B*K] at position t -> float32 logits [B*K, V]."""
    m = self.m
    n = tokens.shape[0]
    b = n // beam
    x = F.embedding(tokens, m.embedding) * m.scale + m.positions[t]
    for layer, (ck, cv), (sk, sv) in zip(self.layers, cross, self_cache):
      # Masked self-attention over the cached prefix 0..t.
      mha = layer.self_attn
      q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).view(
          n, 3, self.h, self.dk).unbind(1)
      sk[:, :, t] = k
      sv[:, :, t] = v
      a = F.scaled_dot_product_attention(q[:, :, None], sk[:, :, :t + 1], sv[:, :, :t + 1])
      x = layer.norm1(x + mha.out_proj(a.reshape(n, -1)))
      # Encoder-decoder attention: the K beams of a sentence are its K query rows.
      mha = layer.multihead_attn
      wq, _, _ = mha.in_proj_weight.chunk(3)
      bq, _, _ = mha.in_proj_bias.chunk(3)
      q = F.linear(x, wq, bq).view(b, beam, self.h, self.dk).transpose(1, 2)
      a = F.scaled_dot_product_attention(q, ck, cv, attn_mask=cross_mask)  # [B, H, K, dk]
      x = layer.norm2(x + mha.out_proj(a.transpose(1, 2).reshape(n, -1)))
      x = layer.norm3(x + layer.linear2(F.relu(layer.linear1(x))))
    return F.linear(x, m.embedding).float()

  @staticmethod
  def _reorder(self_cache, index: torch.Tensor, t: int):
    for sk, sv in self_cache:
      sk[:, :, :t + 1] = sk[index, :, :t + 1]
      sv[:, :, :t + 1] = sv[index, :, :t + 1]

  @torch.inference_mode()
  def beam_search(self, src: torch.Tensor, beam_size: int = 4, alpha: float = 0.6,
                  max_decode_len: int = 64, max_lengths: Optional[torch.Tensor] = None):
    """Same semantics as t2t_jax.model.search.beam_search. Returns (sequences [B,K,L], scores, steps)."""
    b, k, length = src.shape[0], beam_size, max_decode_len
    dev = src.device
    if max_lengths is None:
      max_lengths = torch.full((b,), length, dtype=torch.long, device=dev)
    max_lengths = max_lengths.clamp(1, length)
    cross, cross_mask, self_cache = self._start(src, k, length)
    first = torch.arange(k, device=dev) == 0
    live_tok = torch.full((b, k), BOS_ID, dtype=torch.long, device=dev)
    live_seqs = torch.zeros((b, k, length), dtype=torch.long, device=dev)
    live_lp = torch.where(first, 0.0, NEG_INF).expand(b, k).clone()
    live_ok = first.expand(b, k).clone()
    fin_seqs = torch.zeros((b, k, length), dtype=torch.long, device=dev)
    fin_scores = torch.full((b, k), NEG_INF, device=dev)
    fin_ok = torch.zeros((b, k), dtype=torch.bool, device=dev)
    done = torch.zeros((b,), dtype=torch.bool, device=dev)
    arange2k = torch.arange(2 * k, device=dev)
    rows = torch.arange(b, device=dev)[:, None] * k
    lp_max = _length_penalty(max_lengths.float(), alpha)
    step = 0
    while step < length and not bool(done.all()):
      i = step
      logits = self.step(live_tok.reshape(-1), i, k, cross, cross_mask, self_cache)
      vocab = logits.shape[-1]
      logp = torch.log_softmax(logits, -1).clamp_min(MIN_LOG_PROB).view(b, k, vocab)
      forced = i >= max_lengths - 1
      token_ok = ~forced[:, None] | (torch.arange(vocab, device=dev) == EOS_ID)
      ok = (live_ok[:, :, None] & token_ok[:, None, :]).view(b, k * vocab)
      cand = torch.where(ok, (live_lp[:, :, None] + logp).view(b, k * vocab), NEG_INF)
      top_lp, top_index = cand.topk(2 * k, dim=1)
      top_ok = ok.gather(1, top_index)
      parent, token = top_index // vocab, top_index % vocab
      is_eos = token == EOS_ID
      top_seqs = live_seqs.gather(1, parent[:, :, None].expand(b, 2 * k, length)).clone()
      top_seqs[:, :, i] = token
      new_fin = top_ok & is_eos & (arange2k < k)
      new_scores = torch.where(new_fin, top_lp / _length_penalty(i + 1, alpha), NEG_INF)
      fin_scores, idx = torch.cat([fin_scores, new_scores], 1).topk(k, dim=1)
      fin_seqs = torch.cat([fin_seqs, top_seqs], 1).gather(
          1, idx[:, :, None].expand(b, k, length))
      fin_ok = torch.cat([fin_ok, new_fin], 1).gather(1, idx)
      live = top_ok & ~is_eos
      live_lp, idx = torch.where(live, top_lp, NEG_INF).topk(k, dim=1)
      live_ok = live.gather(1, idx)
      live_seqs = top_seqs.gather(1, idx[:, :, None].expand(b, k, length))
      live_tok = token.gather(1, idx)
      self._reorder(self_cache, (rows + parent.gather(1, idx)).view(-1), i)
      n = i + 1
      best = torch.maximum(torch.tensor(_length_penalty(n + 1, alpha), device=dev), lp_max)
      hopeless = fin_ok[:, k - 1] & (live_lp[:, 0] / best < fin_scores[:, k - 1])
      done = done | (n >= max_lengths) | ~live_ok[:, 0] | hopeless
      live_ok = live_ok & ~done[:, None]
      live_lp = torch.where(live_ok, live_lp, NEG_INF)
      step = n
    any_fin = fin_ok.any(1, keepdim=True)
    ok = torch.where(any_fin, fin_ok, live_ok)
    scores = torch.where(ok, torch.where(any_fin, fin_scores,
                                         live_lp / _length_penalty(step, alpha)), NEG_INF)
    seqs = torch.where((any_fin & ok)[:, :, None], fin_seqs,
                       torch.where(ok[:, :, None], live_seqs, 0))
    return seqs, scores, step

  @torch.inference_mode()
  def greedy(self, src: torch.Tensor, max_decode_len: int = 64):
    """Argmax decoding (what beam 1 is); stops when every sentence has emitted EOS."""
    b, length = src.shape[0], max_decode_len
    cross, cross_mask, self_cache = self._start(src, 1, length)
    tok = torch.full((b,), BOS_ID, dtype=torch.long, device=src.device)
    out = torch.zeros((b, length), dtype=torch.long, device=src.device)
    finished = torch.zeros((b,), dtype=torch.bool, device=src.device)
    step = 0
    while step < length:
      logits = self.step(tok, step, 1, cross, cross_mask, self_cache)
      if step == length - 1:
        tok = torch.full_like(tok, EOS_ID)
      else:
        tok = logits.argmax(-1)
      out[:, step] = torch.where(finished, 0, tok)
      finished = finished | (tok == EOS_ID)
      step += 1
      if bool(finished.all()):
        break
    return out, step
