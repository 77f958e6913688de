"""Decoding over every local device vs one device vs batches in threads (`Translator`).

The bundled EN-ES test set (1010 sentences) translated with beam 4 (alpha 0.6) by
`translate.Translator` of a trained run (read only) in each mode:

  * one_device: `parallelism='threads'`, one batch at a time on the first device;
  * threads: `parallelism='threads'`, `portable.default_threads()` batches at once (one per
    core; the CPU default, 'auto');
  * sharded: `parallelism='sharded'`, every batch's rows split over all local devices (one
    shard_map'ed beam search; rows rounded up to a multiple of the device count; the default
    on multi-chip accelerators);
  * sharded_threads: sharded, and `default_threads()` batches at once.

On a CPU the devices are simulated: `--devices N` (default 8) adds
--xla_force_host_platform_device_count=N to XLA_FLAGS before jax starts, as the tests do.
Per mode and batch size: one untimed pass (compiling), then `--rounds` timed passes,
interleaved across modes (`harness.interleave`); sentences/s from the median wall time,
sentences per CPU second of this process (less sensitive to other jobs on the machine), and
how many translations are token for token those of one_device.

A briefly trained run of the embedded default's shape (configs/quickstart.py) will do, e.g.

  python main.py --config=configs/quickstart.py --workdir=/tmp/qs_brief \\
      --config.num_train_steps=1000 --config.eval_every_steps=0 --config.final_eval_split= \\
      --config.checkpoint_every_steps=1000 --config.average_last=1
  python -m benchmarks.peers.decode_sharded --workdir /tmp/qs_brief --batch 4,8,32 \\
      --out benchmarks/results/decode_sharded.jsonl

(`--random-params`: the run's shapes and vocabulary with random parameters instead.)
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import common, harness, serving_common  # noqa: E402

MODES = ('one_device', 'threads', 'sharded', 'sharded_threads')


def _translator(run, params, mode: str, rows: int, beam: int, alpha: float):
  """The run's Translator in `mode` (see module doc) with `rows` sentences a batch."""
  from t2t_jax.inference import portable, translate
  c = run.config
  threads = 1 if mode in ('one_device', 'sharded') else portable.default_threads()
  return translate.Translator(
      run.cfg, params, run.tokenizer, beam_size=beam, alpha=alpha,
      max_decode_extra=c.max_decode_extra, batch_sentences=rows,
      bucket_lengths=c.bucket_lengths, threads=threads,
      parallelism='threads' if mode in ('one_device', 'threads') else 'sharded')


def bench(run, params, sources, rows, args, emit, counter):
  """One record: every mode of `MODES` at `rows` sentences a batch."""
  translators = {m: _translator(run, params, m, rows, args.beam, args.alpha)
                 for m in args.modes.split(',')}
  outputs, entries = {}, {}
  for mode, t in translators.items():
    with counter.window() as compiles:
      outputs[mode], first_s = harness.time_call(t.translate_ids, sources)
    entries[mode] = {'parallelism': t.parallelism, 'threads': t.threads,
                     'devices': t.mesh.size, 'rows': t.batch_sentences,
                     'first_pass_s': first_s, 'compile_s': compiles['seconds'],
                     'compilations': compiles['count'], 'placements': t.placements}
  cpu = {m: [] for m in translators}

  def timed_pass(mode):
    with harness.timed() as t:
      translators[mode].translate_ids(sources)
    cpu[mode].append(t.cpu_seconds)  # this process, all threads: less load-dependent
    return harness.Measured(t.seconds)

  times = harness.interleave({m: (lambda m=m: timed_pass(m)) for m in translators},
                             args.rounds, warmup=0)
  reference = outputs.get('one_device', next(iter(outputs.values())))
  for mode, entry in entries.items():
    entry['time'] = harness.summarize(times[mode])
    entry['sentences_per_s'] = len(sources) / entry['time']['median_s']
    entry['cpu_s'] = harness.summarize(cpu[mode])
    entry['sentences_per_cpu_s'] = len(sources) / entry['cpu_s']['median_s']
    entry['identical_to_one_device'] = sum(a == b for a, b in zip(outputs[mode], reference))
  record = {'name': 'decode_sharded',
            'config': {'beam_size': args.beam, 'alpha': args.alpha, 'batch_sentences': rows,
                       'sentences': len(sources), 'params': params_kind(args),
                       'checkpoint': run.description,
                       **{k: run.config[k] for k in ('vocab_size', 'd_model', 'd_ff',
                                                     'num_heads', 'num_layers')}},
            'modes': entries, 'speedups': harness.speedups(times, next(iter(times))),
            'all_identical': all(e['identical_to_one_device'] == len(sources)
                                 for e in entries.values()),
            'output_tokens': sum(map(len, reference))}
  return emit(record)


def params_kind(args) -> str:
  return 'random' if args.random_params else 'trained'


def _random_params(run):
  import jax
  from t2t_jax.model import transformer as model
  return jax.jit(lambda r: model.init_params(run.cfg, r))(jax.random.PRNGKey(0))


def main(argv=None):
  parser = common.add_common_args(argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
  parser.add_argument('--workdir', required=True, help='a trained run (only read)')
  parser.add_argument('--random-params', action='store_true',
                      help="the run's shapes and vocabulary, random parameters")
  parser.add_argument('--devices', type=int, default=8,
                      help='simulated CPU devices (XLA_FLAGS); 0: leave XLA_FLAGS alone')
  parser.add_argument('--batch', default='4', help='comma list of sentences per batch')
  parser.add_argument('--modes', default=','.join(MODES), help='comma list of ' + str(MODES))
  parser.add_argument('--beam', type=int, default=4)
  parser.add_argument('--alpha', type=float, default=0.6)
  parser.add_argument('--limit', type=int, default=None, help='first N test sentences')
  parser.add_argument('--rounds', type=int, default=3, help='timed passes of each mode')
  args = parser.parse_args(argv)
  if args.devices:
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_'
                               f'device_count={args.devices}').strip()
  harness.start_jax()
  emit = harness.Emitter(args.out)
  counter = common.CompileCounter()
  run = serving_common.load_run(args.workdir)
  params = _random_params(run) if args.random_params else run.params
  sources = serving_common.test_set('en', args.limit)
  for rows in [int(b) for b in args.batch.split(',')]:
    bench(run, params, sources, rows, args, emit, counter)


if __name__ == '__main__':
  main()
