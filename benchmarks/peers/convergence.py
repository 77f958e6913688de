"""Convergence: does t2t_jax training learn at least as well as an independent PyTorch peer?

Two training runs on the bundled EN->ES Bible corpus (configs/quickstart.py with bucketed,
unpacked rows, plus any --config-override KEY=VALUE), one after the other in one process, each
alone on the machine: ours (`parallel.make_train_step`) first, then the peer
(benchmarks/shared/torch_peer.py, with --torch-threads threads), for the same budget: --minutes
of training time (the clock stops during evaluation; our train step is compiled for every batch
shape before it starts, reported as compile_s) or --steps updates. Both wait for each step to
finish, so the clock (a `harness.Stopwatch`) counts finished work. The sides are not interleaved
as in the throughput benchmarks: what is compared is the time to a BLEU over minutes of
training, which each side should get as it would alone, and the peer's steps beside ours slow
ours down through the machine's memory system (docs/performance.md). At the start, every
--eval-every-seconds of training time (--eval-every-steps with --steps) and at the end, each
side reports
  * dev NLL per target token: teacher-forced, the whole dev split, no dropout or smoothing;
  * dev BLEU (sacreBLEU, t2t_jax.inference.bleu.corpus_bleu) of the first --bleu-sentences dev
    sentences, beam 4, alpha 0.6, at most input + 50 tokens, by translate.Translator and by
    torch_peer.PeerDecoder.beam_search (the same search and batching), detokenized by the
    same SentencePiece model. The untrained start is not decoded (it would run to the length
    limit) and counts as BLEU 0.
Summary: X = --target-bleu, else the peer's final BLEU; per side, the training minutes at
which dev BLEU first reaches X (interpolated linearly between eval points) and ours/peer; the
mean of ours minus peer dev NLL (and BLEU) at equal target tokens seen (the peer's curve
interpolated at our eval points); start_dev_nll_diff: both start from the same parameters, so
it checks that both compute the same function.

Kept equal: initial parameters (ours, copied by torch_peer.load_jax_params); batches and
their order (one t2t_jax train iterator, rewound with set_state for the peer, every batch
checked by hash); Adam(0.9, 0.98, 1e-9) and the schedule (d_model, warmup_steps,
learning_rate_scale); dropout_rate on embeddings and sub-layer outputs; label_smoothing.
Differences, all small: the peer's attention projections have biases (stock; they start at 0
and train); nn.Transformer layers also drop out inside the FFN (t2t_jax does not), turned off
here; torch's F.cross_entropy(label_smoothing=eps) smooths toward the uniform mixture (eps/V
on every class, 1 - eps + eps/V on the true one) where ours puts eps/(V-1) on the others and
1 - eps on the true one: the targets differ by eps/V (2.5e-5 at V = 4000).

  # smoke test (tiny model, 20 steps, 8 BLEU sentences; under 2 minutes):
  python -m benchmarks.peers.convergence --smoke --workdir /tmp/conv_smoke \
      --out /tmp/conv_smoke.jsonl --plot /tmp/conv_smoke.png
  # the real run (2 x 12 training minutes plus evaluations: 30+ minutes of a quiet machine):
  python -m benchmarks.peers.convergence --minutes 12 --workdir /tmp/conv_quickstart \
      --out benchmarks/results/convergence.jsonl --plot docs/convergence.png
  # strict per-token check (the same updates on both sides, evaluated at the same steps):
  python -m benchmarks.peers.convergence --steps 1200 --eval-every-steps 200 \
      --workdir /tmp/conv_quickstart --out benchmarks/results/convergence.jsonl
"""

import argparse
import ast
import contextlib
import hashlib
import os
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from benchmarks.shared import common, harness  # noqa: E402

SMOKE = dict(vocab_size=400, vocab_sample_sentences=5000, d_model=32, d_ff=64, num_heads=2,
             num_layers=1, warmup_steps=10, tokens_per_batch=512)
SIDES = {'ours': 'ours (t2t_jax)', 'peer': 'peer (torch.nn.Transformer)'}


def _parse_value(text, like):
  """VALUE as the type of the key's current value; strings are taken as written."""
  if isinstance(like, str):
    return text
  value = ast.literal_eval(text.capitalize() if isinstance(like, bool) else text)
  if isinstance(like, tuple):
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)
  return float(value) if isinstance(like, float) and isinstance(value, int) else value


def make_config(overrides, smoke):
  """configs/quickstart.py (tiny with --smoke) plus KEY=VALUE overrides, validated."""
  from configs import quickstart
  from t2t_jax import config as config_lib
  config = quickstart.get_config()
  config.pack_examples = False  # the peer attends across whole rows: no packed rows for it
  if smoke:
    config.update(SMOKE)
  for item in overrides:
    key, sep, text = item.partition('=')
    if not sep:
      raise ValueError(f'--config-override wants KEY=VALUE, got {item!r}')
    config_lib.unknown_keys([key])
    try:
      config[key] = _parse_value(text, config[key])
    except (ValueError, TypeError, SyntaxError) as e:
      raise ValueError(f'--config-override {item!r}: {e}') from None
  if config.pack_examples:
    raise ValueError('--config-override pack_examples=True: the peer has no segment masks, '
                     'so both sides train on bucketed rows')
  return config_lib.validate(config)


def run_phase(side, train_step, evaluate, data, start, args, emit, digests):
  """Trains one side within the budget from data state `start`; returns its eval records."""
  data.train.set_state(start)  # the peer replays exactly the batches ours saw, in order
  points, steps, tokens, mismatches = [], 0, 0, 0
  clock = harness.Stopwatch()  # runs only while training: stopped during evaluations

  def eval_point():
    (nll, bleu), seconds = harness.time_call(evaluate, steps)
    points.append(emit({'name': 'convergence', 'kind': 'eval', 'side': side, 'steps': steps,
                        'train_seconds': clock.seconds, 'target_tokens': tokens,
                        'dev_nll': nll, 'dev_bleu': bleu, 'eval_seconds': seconds}))

  eval_point()
  next_eval = args.eval_every_seconds
  while (steps < args.steps) if args.steps else (clock.seconds < args.minutes * 60):
    with clock:
      batch = next(data.train)  # reading is part of training, alike for both sides
      train_step(batch)
    steps += 1
    tokens += int(np.count_nonzero(batch['targets']))
    digest = hashlib.blake2b(repr(batch['inputs'].shape).encode() + batch['inputs'].tobytes()
                             + batch['targets'].tobytes(), digest_size=8).digest()
    if side == 'ours':
      digests.append(digest)
    elif steps <= len(digests):
      mismatches += digests[steps - 1] != digest
    if args.steps and steps % args.eval_every_steps == 0 and steps < args.steps:
      eval_point()
    elif not args.steps and next_eval <= clock.seconds < args.minutes * 60:
      eval_point()
      next_eval = (clock.seconds // args.eval_every_seconds + 1) * args.eval_every_seconds
  eval_point()
  return points, {'batches_compared': min(steps, len(digests)), 'batch_mismatches': mismatches}


def ours_side(config, data, mesh, bleu_pairs, counter):
  """Our train step (compiled for every bucket shape up front), evaluation and start params."""
  import jax
  from t2t_jax.inference import bleu, translate
  from t2t_jax.model import transformer as model
  from t2t_jax.runtime import parallel
  from t2t_jax.training import optim
  from t2t_jax.data import pipeline
  from t2t_jax.inference.evaluate import evaluate_batches
  cfg = model.TransformerConfig.from_config(config)
  optimizer = optim.make_optimizer(config)
  state = parallel.create_train_state(cfg, optimizer, config.seed, mesh)
  init = jax.device_get(state.params)  # numpy, before the step donates the buffers
  step = parallel.make_train_step(cfg, optimizer, mesh, label_smoothing=config.label_smoothing,
                                  seed=config.seed)
  with harness.timed() as compiling, counter.window() as compiles:
    for length, rows in zip(*pipeline.bucket_rows(config, jax.local_device_count())):
      # An all-padding batch on a throwaway copy: compiles the shape, changes nothing.
      dummy = {k: np.zeros((rows, length), np.int32) for k in ('inputs', 'targets')}
      copy = parallel.replicate(jax.device_get(state), mesh)  # new buffers, same sharding
      jax.block_until_ready(step(copy, parallel.shard_batch(dummy, mesh)))
  info = {'compile_s': compiling.seconds,
          'warmup_compilations': compiles['functions'].count('jit(step)')}
  eval_step = parallel.make_eval_step(cfg, mesh, label_smoothing=0.0)
  translator = translate.from_config(config, None, data.tokenizer)
  holder = {'state': state}

  def train_step(batch):
    holder['state'], metrics = step(holder['state'], parallel.shard_batch(batch, mesh))
    jax.block_until_ready(metrics)

  def evaluate(steps):
    params = holder['state'].params
    nll = evaluate_batches(eval_step, params, data.eval_batches, mesh)['nll']
    if not steps:
      return nll, None
    translator.params = params  # a jit argument: no recompilation
    hyps = translator.translate([p['source'] for p in bleu_pairs])
    return nll, bleu.corpus_bleu(hyps, [p['target'] for p in bleu_pairs]).score

  return train_step, evaluate, init, info


def peer_side(config, data, init, bleu_pairs, threads):
  """The peer from our initial parameters: its train step and evaluation."""
  import jax
  import torch
  from benchmarks.shared import torch_peer
  from t2t_jax.inference import bleu
  head = config.d_model // config.num_heads
  if ({config.d_k or head, config.d_v or head}, config.adam_b1, config.adam_b2,
      config.adam_eps) != ({head}, 0.9, 0.98, 1e-9):
    raise ValueError('the peer has d_k = d_v = d_model / num_heads and Adam(0.9, 0.98, 1e-9)')
  device = 'cuda' if jax.default_backend() == 'gpu' and torch.cuda.is_available() else 'cpu'
  torch.set_num_threads(threads)
  torch.manual_seed(config.seed)  # dropout masks
  size = {k: config[k] for k in ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'num_layers',
                                 'dropout_rate')}
  net = torch_peer.PeerTransformer(size, max_len=config.max_len)
  for layer in [*net.transformer.encoder.layers, *net.transformer.decoder.layers]:
    layer.dropout = torch.nn.Identity()  # the FFN-inner dropout t2t_jax and the paper lack
  torch_peer.load_jax_params(net, init)
  net = net.to(device).train()
  opt, sched, impl = torch_peer.make_optimizer(net, config.d_model, config.warmup_steps,
                                               scale=config.learning_rate_scale)
  tensor = lambda a: torch.from_numpy(np.asarray(a)).long().to(device)  # noqa: E731
  dev = [(tensor(b['inputs']), tensor(b['targets'])) for b in data.eval_batches]

  class Decoder(torch_peer.PeerDecoder):
    def step(self, *args):
      logits = super().step(*args)
      logits[:, torch_peer.PAD_ID] = torch_peer.NEG_INF  # as translate.py: PAD is no token
      return logits

  def translate(sources):
    """Translator's batching: EOS appended, sorted by length, per-sentence length caps."""
    dec, limit, out = Decoder(net), config.max_len - 1, [''] * len(sources)
    ids = {i: data.tokenizer.encode(s)[:limit - 1] + [torch_peer.EOS_ID]  # truncated as ours
           for i, s in enumerate(sources) if s.strip()}
    order = sorted(ids, key=lambda i: len(ids[i]))
    for b in range(0, len(order), config.decode_batch_sentences):
      chunk = order[b:b + config.decode_batch_sentences]
      src = np.zeros((len(chunk), max(len(ids[i]) for i in chunk)), np.int64)
      for r, i in enumerate(chunk):
        src[r, :len(ids[i])] = ids[i]
      caps = [min(len(ids[i]) + config.max_decode_extra, config.max_len) for i in chunk]
      seqs, _, _ = dec.beam_search(tensor(src), beam_size=config.beam_size,
                                   alpha=config.length_penalty_alpha, max_decode_len=max(caps),
                                   max_lengths=tensor(caps))
      for r, i in enumerate(chunk):
        out[i] = data.tokenizer.decode(seqs[r, 0].cpu().tolist())
    return out

  def train_step(batch):
    loss = torch_peer.train_step(net, net, opt, sched, tensor(batch['inputs']),
                                 tensor(batch['targets']), label_smoothing=config.label_smoothing)
    loss.item()  # waits for the device (a no-op wait on CPU)

  def evaluate(steps):
    net.eval()
    total = count = 0.0
    with torch.inference_mode():
      for src, tgt in dev:
        mean, weight = torch_peer.loss_fn(net(src, torch_peer.shift_right(tgt)), tgt, 0.0)
        total, count = total + float(mean) * float(weight), count + float(weight)
      hyps = translate([p['source'] for p in bleu_pairs]) if steps else None
    net.train()
    score = bleu.corpus_bleu(hyps, [p['target'] for p in bleu_pairs]).score if steps else None
    return total / max(count, 1.0), score

  return train_step, evaluate, {'optimizer': impl, 'torch_threads': torch.get_num_threads(),
                                'device': device}


def minutes_to(points, target):
  """First training time (minutes) at which dev BLEU >= target, interpolated; None if never."""
  t0, b0 = 0.0, 0.0
  for p in points:
    t1, b1 = p['train_seconds'], (p['dev_bleu'] if p['steps'] else 0.0)
    if b1 >= target:
      return (t0 + (target - b0) / (b1 - b0) * (t1 - t0) if b1 > b0 else t1) / 60
    t0, b0 = t1, b1
  return None


def at_equal_tokens(ours, peer, key):
  """Mean of ours - peer for `key`, the peer interpolated at our (trained) eval points."""
  ref = [p for p in peer if p[key] is not None]
  xs, ys = [p['target_tokens'] for p in ref], [p[key] for p in ref]
  diffs = [o[key] - float(np.interp(o['target_tokens'], xs, ys)) for o in ours
           if o['steps'] and o[key] is not None and xs and xs[0] <= o['target_tokens'] <= xs[-1]]
  return (float(np.mean(diffs)) if diffs else None), len(diffs)


def plot(path, curves, target):
  """Three panels: NLL and BLEU vs target tokens seen, BLEU vs training minutes."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  fig = Figure(figsize=(15, 4.5), dpi=100)
  FigureCanvasAgg(fig)
  axes = fig.subplots(1, 3)
  tokens = ('target_tokens', 1e6, 'target tokens seen (millions)')
  panels = [(tokens, 'dev_nll', 'dev NLL per token'), (tokens, 'dev_bleu', 'dev BLEU'),
            (('train_seconds', 60, 'training minutes'), 'dev_bleu', 'dev BLEU')]
  if target is not None:
    axes[2].axhline(target, color='gray', linestyle='--', label=f'X = {target:.2f}')
  for ax, ((xkey, xscale, xlabel), ykey, ylabel) in zip(axes, panels):
    for side, points in curves.items():  # the undecoded start drawn as BLEU 0, as it counts
      ax.plot([p[xkey] / xscale for p in points], [p[ykey] or 0.0 for p in points],
              marker='o', label=SIDES[side])
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
  fig.suptitle('EN->ES Bible dev: t2t_jax vs a PyTorch peer from the same start and batches')
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path)


def _parse_args(argv):
  """The command line, its defaults filled in, and the config it asks for: (args, config)."""
  parser = common.add_common_args(argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
  budget = parser.add_mutually_exclusive_group()
  budget.add_argument('--minutes', type=float, help='training minutes per side (default 12)')
  budget.add_argument('--steps', type=int, help='updates per side instead of a time budget')
  parser.add_argument('--workdir', required=True, help='vocabulary and data cache live here')
  parser.add_argument('--config-override', action='append', default=[], metavar='KEY=VALUE')
  parser.add_argument('--eval-every-seconds', type=float, default=60.0)
  parser.add_argument('--eval-every-steps', type=int, default=0, help='--steps; 0: steps / 5')
  parser.add_argument('--bleu-sentences', type=int, default=200)
  parser.add_argument('--target-bleu', type=float, help="default: the peer's final dev BLEU")
  parser.add_argument('--torch-threads', type=int, default=2)
  parser.add_argument('--plot', help="PNG (default docs/convergence.png; none with --smoke)")
  parser.add_argument('--smoke', action='store_true', help='tiny model, 20 steps, 8 sentences')
  args = parser.parse_args(argv)
  common.require_peer(parser, args)
  if args.smoke:
    args.bleu_sentences = min(args.bleu_sentences, 8)
    if args.minutes is None and args.steps is None:
      args.steps, args.eval_every_steps = 20, args.eval_every_steps or 10
  if args.minutes is None and args.steps is None:
    args.minutes = 12.0
  args.eval_every_steps = (args.eval_every_steps or max(1, args.steps // 5)) if args.steps else 0
  if args.plot is None and not args.smoke:
    args.plot = os.path.join(ROOT, 'docs', 'convergence.png')
  try:
    config = make_config(args.config_override, args.smoke)
  except ValueError as e:  # ConfigError included
    parser.error(str(e))
  return args, config


def main(argv=None):
  args, config = _parse_args(argv)
  harness.start_jax()
  warnings.filterwarnings('ignore', message='.*nested tensors.*')
  import jax  # noqa: F401  (imported before the first line, so its version is recorded)
  from t2t_jax.runtime import parallel
  from t2t_jax.training import train
  if not args.no_peer:
    import torch  # noqa: F401
  emit = harness.Emitter(args.out)
  os.makedirs(args.workdir, exist_ok=True)
  config.eval_batches = 0  # the whole dev split
  config.eval_bleu_sentences = args.bleu_sentences  # Data keeps the first N dev pairs
  with contextlib.redirect_stdout(sys.stderr):  # TFDS prints as it first prepares the corpus
    data = train.Data(config, args.workdir, with_eval=True)
  mesh, start = parallel.make_mesh(), data.train.get_state()
  dev_tokens = sum(int(np.count_nonzero(b['targets'])) for b in data.eval_batches)
  emit({'name': 'convergence', 'kind': 'setup', 'config': config.to_dict(), 'budget': {
            k: getattr(args, k) for k in ('minutes', 'steps', 'eval_every_seconds',
                                          'eval_every_steps', 'torch_threads')},
        'data': {'train_pairs_used': data.train.info.num_used, 'dev_target_tokens': dev_tokens,
                 'dev_batches': len(data.eval_batches), 'bleu_sentences': len(data.bleu_pairs)}})

  counter, digests, curves, infos = common.CompileCounter(), [], {}, {}
  train_step, evaluate, init, infos['ours'] = ours_side(config, data, mesh, data.bleu_pairs,
                                                        counter)
  with counter.window() as compiles:
    curves['ours'], _ = run_phase('ours', train_step, evaluate, data, start, args, emit, digests)
  # Decode shapes compile during evaluation (off the clock); the train step must not.
  infos['ours']['train_step_compilations'] = compiles['functions'].count('jit(step)')
  if not args.no_peer:
    train_step, evaluate, infos['peer'] = peer_side(config, data, init, data.bleu_pairs,
                                                    args.torch_threads)
    curves['peer'], extra = run_phase('peer', train_step, evaluate, data, start, args, emit,
                                      digests)
    infos['peer'].update(extra)
  data.train.close()

  target, source = args.target_bleu, '--target-bleu'
  if target is None and 'peer' in curves:
    target, source = curves['peer'][-1]['dev_bleu'], "the peer's final dev BLEU"
  target = target if target is not None and target > 0 else None  # BLEU 0 is no target
  minutes = {side: minutes_to(points, target) if target else None
             for side, points in curves.items()}
  for side, points in curves.items():
    last = points[-1]
    emit({'name': 'convergence', 'kind': 'summary', 'side': side, 'target_bleu': target,
          'minutes_to_target_bleu': minutes[side],
          **{k: last[k] for k in ('train_seconds', 'steps', 'target_tokens')},
          'target_tokens_per_s': last['target_tokens'] / max(last['train_seconds'], 1e-9),
          'final_dev_nll': last['dev_nll'], 'final_dev_bleu': last['dev_bleu'], **infos[side]})
  if 'peer' in curves:
    nll_diff, n_nll = at_equal_tokens(curves['ours'], curves['peer'], 'dev_nll')
    bleu_diff, n_bleu = at_equal_tokens(curves['ours'], curves['peer'], 'dev_bleu')
    emit({'name': 'convergence', 'kind': 'comparison', 'target_bleu': target,
          'target_bleu_source': source, 'minutes_to_target_bleu': minutes,
          'ratio_minutes_ours_over_peer': harness.ratio(minutes['ours'], minutes['peer']),
          'dev_nll_ours_minus_peer_at_equal_tokens': nll_diff, 'nll_points': n_nll,
          'dev_bleu_ours_minus_peer_at_equal_tokens': bleu_diff, 'bleu_points': n_bleu,
          'start_dev_nll_diff': curves['ours'][0]['dev_nll'] - curves['peer'][0]['dev_nll']})
  if args.plot:
    plot(args.plot, curves, target)
    print(f'plot written to {args.plot}', file=sys.stderr)


if __name__ == '__main__':
  main()
