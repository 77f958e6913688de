"""What-if: t2t_jax's decoding with the fixes proposed in docs/performance.md, as a prototype.

NOT the library: a stand-alone decode step over t2t_jax's parameter tree, run through the same
`search._search`, to measure what the proposed changes to `model.py`/`layers.py` would buy:
  1. encoder-decoder K/V projected once per sentence (not every step for every beam row), kept
     untiled at [batch, src_len, heads, d_k]; the K beams of a sentence are its K query rows;
  2. the self-attention cache stored as [rows, heads, max_len, d_k], the layout the attention
     reads, so the per-step update is an in-place slice write instead of a full-cache copy;
  3. the pre-softmax projection against a pre-transposed [d_model, vocab] table.
It checks that it returns the same hypotheses as `model.decode_step`, then times both.

  python -m benchmarks.prototype_decode --size base --batch 16 --src-len 32 --max-len 32
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402


def make_prototype(cfg, batch, beam, max_len, alpha):
  import jax
  import jax.numpy as jnp
  from t2t_jax import model, search
  from t2t_jax.layers import sinusoidal_positions
  h, dk, d = cfg.num_heads, cfg.d_k, cfg.d_model
  pos_table = jnp.asarray(sinusoidal_positions(cfg.max_len, d))

  def ln(x, p):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-6) * p['norm']['scale'] + p['norm']['bias']

  def decode(params, src):
    encoded = model.Transformer(cfg).apply({'params': params}, src,
                                           method=model.Transformer.encode)
    emb = params['shared_embedding']['embedding']
    emb_t = emb.T  # [d, vocab], once per call (loop-invariant)
    layers = [params['decoder'][f'layer_{i}'] for i in range(cfg.num_layers)]
    cross = [(jnp.einsum('bsd,dhk->bshk', encoded, p['cross_attention']['key']['kernel']),
              jnp.einsum('bsd,dhk->bshk', encoded, p['cross_attention']['value']['kernel']))
             for p in layers]
    cross_mask = (src != model.PAD_ID)[:, None, None, :]          # [B, 1, 1, S]
    n = batch * beam
    cache = {'k': [jnp.zeros((n, h, max_len, dk)) for _ in layers],
             'v': [jnp.zeros((n, h, max_len, dk)) for _ in layers],
             't': jnp.zeros((), jnp.int32)}

    def logits_fn(tokens, c):
      t = c['t']
      x = jnp.take(emb, tokens[:, 0], axis=0) * np.sqrt(d) + jax.lax.dynamic_slice_in_dim(
          pos_table, t, 1)
      new_k, new_v = [], []
      for p, (ck, cv), kc, vc in zip(layers, cross, c['k'], c['v']):
        sa = p['self_attention']
        q = jnp.einsum('nd,dhk->nhk', x, sa['query']['kernel'])
        k = jnp.einsum('nd,dhk->nhk', x, sa['key']['kernel'])
        v = jnp.einsum('nd,dhk->nhk', x, sa['value']['kernel'])
        kc = jax.lax.dynamic_update_slice(kc, k[:, :, None], (0, 0, t, 0))
        vc = jax.lax.dynamic_update_slice(vc, v[:, :, None], (0, 0, t, 0))
        s = jnp.einsum('nhk,nhlk->nhl', q, kc) / np.sqrt(dk)
        s = jnp.where(jnp.arange(max_len) <= t, s, -1e30)
        a = jnp.einsum('nhl,nhlk->nhk', jax.nn.softmax(s, -1), vc)
        x = ln(x + jnp.einsum('nhk,hkd->nd', a, sa['out']['kernel']), p['self_attention_block'])
        ca = p['cross_attention']
        q = jnp.einsum('nd,dhk->nhk', x, ca['query']['kernel']).reshape(batch, beam, h, dk)
        s = jnp.einsum('bqhk,bshk->bhqs', q, ck) / np.sqrt(dk)
        s = jnp.where(cross_mask, s, -1e30)
        a = jnp.einsum('bhqs,bshk->bqhk', jax.nn.softmax(s, -1), cv).reshape(n, h, dk)
        x = ln(x + jnp.einsum('nhk,hkd->nd', a, ca['out']['kernel']), p['cross_attention_block'])
        f = p['ffn']
        y = jax.nn.relu(x @ f['wi']['kernel'] + f['wi']['bias']) @ f['wo']['kernel'] + \
            f['wo']['bias']
        x = ln(x + y, p['ffn_block'])
        new_k.append(kc)
        new_v.append(vc)
      return x @ emb_t, {'k': new_k, 'v': new_v, 't': t + 1}

    # search tiles [B, ...] leaves to [B*K, ...]; ours are already [B*K, ...]: pass them as
    # a closure-free cache of batch B by giving search the per-sentence view.
    seqs, scores, steps = search._search(
        logits_fn, _untile(cache, beam), batch_size=batch, beam_size=beam,
        alpha=alpha if beam > 1 else 0.0, max_decode_len=max_len, max_lengths=None,
        eos_id=model.EOS_ID, bos_id=model.BOS_ID)
    return seqs[:, 0], scores[:, 0], steps

  return jax.jit(decode)


def _untile(cache, beam):
  """Zero caches of B rows (search tiles them to B*K): [B*K, ...] -> [B, ...]."""
  import jax
  return jax.tree_util.tree_map(lambda x: x if x.ndim == 0 else x[:x.shape[0] // beam], cache)


def main(argv=None):
  parser = common.add_common_args(argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
  parser.add_argument('--size', default='tiny')
  parser.add_argument('--beams', default='4,1')
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--src-len', type=int, default=32)
  parser.add_argument('--max-len', type=int, default=40)
  parser.add_argument('--rounds', type=int, default=3)
  args = parser.parse_args(argv)
  import jax
  from benchmarks import decode
  from t2t_jax import model
  emit = common.Emitter(args.out)
  size = common.SIZES[args.size]
  cfg = model.TransformerConfig(
      vocab_size=size['vocab_size'], d_model=size['d_model'], d_ff=size['d_ff'],
      num_heads=size['num_heads'], d_k=size['d_model'] // size['num_heads'],
      d_v=size['d_model'] // size['num_heads'], num_layers=size['num_layers'],
      deterministic=True)
  params = jax.jit(lambda r: model.init_params(cfg, r))(jax.random.PRNGKey(0))
  emb = params['shared_embedding']['embedding']
  params = dict(params, shared_embedding={'embedding': emb.at[model.EOS_ID].set(0.0)})
  src = np.random.default_rng(0).integers(2, size['vocab_size'], (args.batch, args.src_len),
                                          dtype=np.int32)
  for beam in [int(b) for b in args.beams.split(',')]:
    fns = {'library': decode._make_ours(cfg, args.batch, beam, args.max_len, 0.6),
           'prototype': make_prototype(cfg, args.batch, beam, args.max_len, 0.6)}
    outs = {k: jax.device_get(jax.block_until_ready(f(params, src))) for k, f in fns.items()}
    times = {k: [] for k in fns}
    for _ in range(args.rounds):
      for k, f in fns.items():
        t0 = time.perf_counter()
        jax.block_until_ready(f(params, src))
        times[k].append(time.perf_counter() - t0)
    rec = {'name': 'prototype_decode', 'config': dict(size=args.size, beam_size=beam, **size),
           'shapes': {'batch': args.batch, 'src_len': args.src_len, 'max_decode_len': args.max_len},
           'device': common.jax_device_info(),
           'same_best_hypothesis_fraction': float(np.mean(np.all(
               outs['library'][0] == outs['prototype'][0], axis=1))),
           'steps': {k: int(v[2]) for k, v in outs.items()}}
    for k, ts in times.items():
      t = common.summarize(ts)
      rec[k] = {'time': t, 'sentences_per_s': args.batch / t['median_s']}
    rec['speedup_prototype_over_library'] = (rec['prototype']['sentences_per_s'] /
                                             rec['library']['sentences_per_s'])
    emit(rec)


if __name__ == '__main__':
  main()
