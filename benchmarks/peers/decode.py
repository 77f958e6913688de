"""Batched decoding throughput: t2t_jax beam search (beam 4, alpha 0.6) and greedy vs a PyTorch peer.

Ours: one jitted function, as translate.py builds it: `incremental.decode_context` (encoder,
the encoder-decoder keys/values projected once per sentence, the transposed vocabulary), then
`search.beam_search` / `greedy_search` whose logits_fn closes over the parameters and the
context and calls `incremental.decode_step`; only the self-attention key/value cache goes
through the search (tiled to batch*beam and reordered by parent beam).
The peer (`torch_peer.PeerDecoder`): the same weights copied into torch.nn.Transformer, an
incremental decoder with preallocated self-attention K/V caches, encoder-decoder K/V computed
once per sentence, and a beam search with exactly t2t_jax's semantics, so both sides take the
same number of steps (reported) and should return the same hypotheses (agreement reported).

Parameters are random (speed does not depend on them) with the EOS embedding row zeroed, so
hypotheses run to `max_decode_len` like long sentences; sources are random ids of one length,
no padding.

Timing: a first (compiling) call and a warmup of each side, then `--rounds` rounds of one
decode of each side, alternating (`harness.interleave`); medians are reported.

  python -m benchmarks.peers.decode --sizes tiny,base --batch 32 --src-len 32 --max-len 40 \\
      --out FILE
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from benchmarks.shared import common, harness  # noqa: E402


def _make_ours(cfg, batch, beam, max_len, alpha):
  """The jitted decode, built as translate.py builds it."""
  import jax
  from t2t_jax.model import incremental, transformer as model, search

  def decode(params, src):
    context = incremental.decode_context(cfg, params, src)

    def logits_fn(tokens, cache):
      return incremental.decode_step(cfg, params, cache, tokens, context)

    # search._search is what beam_search/greedy_search run (greedy = beam 1, alpha 0); it also
    # returns the number of decode steps taken. The cache as `beam_decode` makes it: growing
    # with the output, append-only for beams.
    seqs, scores, steps = search._search(
        logits_fn, incremental.init_cache(cfg, batch, 1, ancestry=beam > 1), batch_size=batch,
        beam_size=beam, alpha=alpha if beam > 1 else 0.0, max_decode_len=max_len,
        max_lengths=None, eos_id=model.EOS_ID, bos_id=model.BOS_ID,
        grow_cache=incremental.grow_cache,
        reorder_cache=incremental.reorder_cache if beam > 1 else None)
    return seqs[:, 0], scores[:, 0], steps

  return jax.jit(decode)


def _lengths(best: np.ndarray) -> np.ndarray:
  """Output lengths including EOS of `[batch, L]` (EOS then 0s)."""
  nonzero = best != 0
  return np.where(nonzero.any(1), nonzero.shape[1] - np.argmax(nonzero[:, ::-1], 1), 0)


def _setup_ours(size, batch, src_len, max_len, beam, alpha):
  """Random parameters (EOS row zeroed), a random source batch and the jitted decode."""
  import jax
  from t2t_jax.model import transformer as model
  cfg = model.TransformerConfig(
      vocab_size=size['vocab_size'], d_model=size['d_model'], d_ff=size['d_ff'],
      num_heads=size['num_heads'], d_k=size['d_model'] // size['num_heads'],
      d_v=size['d_model'] // size['num_heads'], num_layers=size['num_layers'],
      dropout_rate=size['dropout_rate'], deterministic=True)
  params = jax.jit(lambda r: model.init_params(cfg, r))(jax.random.PRNGKey(0))
  # With random weights the decoder mostly predicts its input token, and BOS = EOS: zero the
  # EOS row of the shared embedding so sentences do not end at step 1 (EOS then scores like an
  # average token, and hypotheses run to max_decode_len, as long sentences would).
  emb = params['shared_embedding']['embedding']
  params = dict(params, shared_embedding={'embedding': emb.at[model.EOS_ID].set(0.0)})
  src_np = np.random.default_rng(0).integers(2, size['vocab_size'], (batch, src_len),
                                             dtype=np.int32)
  return params, src_np, _make_ours(cfg, batch, beam, max_len, alpha)


def _setup_peer(size, params, src_np, beam, max_len, args):
  """The peer decoder on our weights: (its blocking run() -> (best [B, L], steps), device)."""
  import jax
  import torch
  from benchmarks.shared import torch_peer
  device = 'cuda' if jax.default_backend() != 'cpu' and torch.cuda.is_available() else 'cpu'
  pmodel = torch_peer.PeerTransformer(size)
  torch_peer.load_jax_params(pmodel, jax.device_get(params))
  dec = torch_peer.PeerDecoder(pmodel.to(device))
  psrc = torch.from_numpy(src_np).long().to(device)

  def peer_run():  # .cpu() waits for the device
    if beam > 1:
      s, _, n = dec.beam_search(psrc, beam_size=beam, alpha=args.alpha, max_decode_len=max_len)
      return s[:, 0].cpu().numpy(), n
    s, n = dec.greedy(psrc, max_decode_len=max_len)
    return s.cpu().numpy(), n

  torch.set_num_threads(os.cpu_count())
  return peer_run, device


def bench(size_name, batch, src_len, max_len, beam, args, emit, counter):
  import jax
  size = common.SIZES[size_name]
  params, src_np, fn = _setup_ours(size, batch, src_len, max_len, beam, args.alpha)
  src = jax.device_put(src_np)
  ours_run = lambda: jax.block_until_ready(fn(params, src))  # noqa: E731
  with counter.window() as compiles:
    out, first_call_s = harness.time_call(ours_run)
    ours_run()  # warmup
  seqs, _, steps = jax.device_get(out)
  ours = {'first_call_s': first_call_s, 'compile_s': compiles['seconds'],
          'steps': int(steps), 'generated_tokens': int(_lengths(seqs).sum())}
  systems = {'ours': ours_run}
  peer = None
  if not args.no_peer:
    peer_run, device = _setup_peer(size, params, src_np, beam, max_len, args)
    pseqs, psteps = peer_run()  # warmup
    threads = (common.pick_torch_threads(peer_run, args.torch_threads) if device == 'cpu'
               else {'device': device})
    peer = {'impl': 'torch.nn.Transformer weights + cached incremental decoder',
            'device': device, 'steps': int(psteps),
            'generated_tokens': int(_lengths(pseqs).sum()), 'torch_threads': threads}
    ours['same_best_hypothesis_fraction'] = float(np.mean(np.all(pseqs == seqs, axis=1)))
    systems['peer'] = peer_run
  with counter.window() as loop_compiles:
    times = harness.interleave(systems, args.rounds, warmup=0)  # both warmed up above
  ours['compilations'] = compiles['count'] + loop_compiles['count']

  def finish(entry, name):
    t = harness.summarize(times[name])
    entry['time'] = t
    entry['sentences_per_s'] = batch / t['median_s']
    entry['generated_tokens_per_s'] = entry['generated_tokens'] / t['median_s']
    entry['decode_steps_per_s'] = entry['steps'] / t['median_s']
    return entry

  record = {
      'name': 'decode', 'config': dict(size=size_name, search='greedy' if beam == 1 else 'beam',
                                       beam_size=beam, alpha=args.alpha if beam > 1 else 0.0,
                                       **size),
      'shapes': {'batch': batch, 'src_len': src_len, 'max_decode_len': max_len},
      'ours': finish(ours, 'ours')}
  if peer is not None:
    record['peer'] = finish(peer, 'peer')
    record['ratio_ours_over_peer'] = {
        'sentences_per_s': harness.ratio(ours['sentences_per_s'], peer['sentences_per_s']),
        'generated_tokens_per_s': harness.ratio(ours['generated_tokens_per_s'],
                                                peer['generated_tokens_per_s'])}
  return emit(record)


def main(argv=None):
  parser = common.add_common_args(argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
  parser.add_argument('--sizes', default='tiny,base')
  parser.add_argument('--beams', default='4,1', help='comma list; 1 = greedy')
  parser.add_argument('--batch', type=int, default=32, help='sentences per batch')
  parser.add_argument('--src-len', type=int, default=32)
  parser.add_argument('--max-len', type=int, default=40, help='max_decode_len (steps)')
  parser.add_argument('--alpha', type=float, default=0.6)
  parser.add_argument('--rounds', type=int, default=3,
                      help='interleaved rounds (one timed decode of each side a round)')
  parser.add_argument('--torch-threads', default='auto',
                      help="'auto' (faster of 1 and the core count), or a number (0 = cores)")
  args = parser.parse_args(argv)
  common.require_peer(parser, args)
  harness.start_jax()
  emit = harness.Emitter(args.out)
  counter = common.CompileCounter()
  for size_name in args.sizes.split(','):
    for beam in [int(b) for b in args.beams.split(',')]:
      bench(size_name, args.batch, args.src_len, args.max_len, beam, args, emit, counter)


if __name__ == '__main__':
  main()
