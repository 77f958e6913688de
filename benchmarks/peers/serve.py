"""Serving speed on the bundled test set: ours (jitted beam search), our StableHLO artifact,
CTranslate2 float32 and int8; same model, same machine, same run.

Every system translates all 1010 test sentences with beam 4, alpha 0.6 (the run's decoding
settings), from text to text (SentencePiece included):
  ours        `translate.Translator` (`main.py --mode=decode`), `--rows` sentences a batch
              (default: the run's decode_batch_sentences); XLA CPU's own thread pool (one
              thread per core);
  stablehlo   `ExportedTranslator` of `--mode=export --format=stablehlo` at the same rows
              (the same program, deserialized);
  ct2_*@R     `ctranslate2.Translator(intra_threads=THREADS, inter_threads=1)`, one
              `translate_batch` call with max_batch_size R for each R of `--ct2-rows`
              (default: --rows), the longest source's length limit, 4 hypotheses re-ranked
              by GNMT (`ctranslate2_decoding.translate`); with `--ct2-splits`, one system
              `ct2_*@R/IxJ` per split: inter_threads I (batches at once), intra_threads J.
              On the 2-core EPYC 2x1 was CTranslate2's fastest (233-238 sentences/s at 64
              rows against 159-222 for 1x2, 2026-11-29).
Each CTranslate2 system runs in a child process of its own, driven over a pipe and timed
there: in one process, loading a second CTranslate2 translator (int8 beside float32) made
the float32 one 2x slower for the rest of the process (2.7 s -> 5.4 s a pass), even after
the second was deleted. One untimed pass per system first (our compilations, CTranslate2's
first allocations; its outputs are the ones scored), then `--repeats` timed passes, the
systems interleaved so a change of machine load hits all of them (`harness.interleave`: the
order rotates by one each round); the median pass is reported. Target tokens are the output
pieces, EOS excluded.

  python -m benchmarks.peers.serve --workdir RUN --scratch /tmp/serve \\
      --out benchmarks/results/serve.jsonl
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import harness, serving_common  # noqa: E402


def _code_digest() -> str:
  """12 hex digits of sha256 over the t2t_jax package's Python sources: an artifact exported
  by other code is not this code's (a scratch folder outlives commits)."""
  import hashlib
  import t2t_jax
  root = os.path.dirname(t2t_jax.__file__)
  digest = hashlib.sha256()
  for folder, _, files in sorted(os.walk(root)):
    for name in sorted(f for f in files if f.endswith('.py')):
      with open(os.path.join(folder, name), 'rb') as f:
        digest.update(name.encode() + b'\0' + f.read())
  return digest.hexdigest()[:12]


def _stablehlo(run, scratch: str, rows: int) -> str:
  """The run's StableHLO artifact decoding `rows` sentences a batch (exported once per
  version of the code)."""
  from t2t_jax.export import common, stablehlo_export
  path = os.path.join(scratch, f'stablehlo_rows{rows}_{_code_digest()}')
  if not os.path.isdir(path):
    source = common.load_source(run.workdir)
    source.config.decode_batch_sentences = rows
    stablehlo_export.write_artifact(source, path)
  return path


def _splits(text: str):
  """'1x2,2x1' -> [(1, 2), (2, 1)]; a one-line SystemExit naming --ct2-splits otherwise."""
  try:
    splits = [tuple(int(n) for n in item.split('x')) for item in text.split(',')]
  except ValueError:
    splits = []
  if not splits or any(len(s) != 2 or min(s) < 1 for s in splits):
    raise SystemExit(f'--ct2-splits {text!r}: expected IxJ[,IxJ...], e.g. 1x2,2x1')
  return splits


class _Ct2Process:
  """One CTranslate2 translator in a child process: `translate()` returns the seconds the
  child timed (`harness.Measured`) and keeps the outputs (piece lists) of the last pass."""

  def __init__(self, spec):
    self.child = harness.ChildProcess('benchmarks.peers.serve', '--ct2-server', 'CTranslate2')
    self.child.call(spec)
    self.outputs = None

  def translate(self):
    reply = self.child.call({'translate': True})
    self.outputs = reply['outputs']
    return harness.Measured(reply['seconds'])

  def close(self):
    self.child.close()


def ct2_process(run, path: str, pieces, rows: int, inter: int, intra: int,
                beam_size: int) -> '_Ct2Process':
  """A CTranslate2 translator of the export at `path` in a child process, translating
  `pieces` (source piece lists) `rows` at a time with `inter` x `intra` threads, with the run's
  alpha and length limits."""
  c = run.config
  return _Ct2Process({'path': path, 'threads': intra, 'inter_threads': inter, 'rows': rows,
                      'pieces': pieces, 'beam_size': beam_size,
                      'alpha': c.length_penalty_alpha, 'max_decode_extra': c.max_decode_extra,
                      'max_len': c.max_len})


def _serve_ct2():
  """Child side of `_Ct2Process` (`harness.child_protocol`): one pass per request."""
  from t2t_jax.export import ctranslate2_decoding
  spec, reply = harness.child_protocol()
  translator = serving_common.ctranslate2_translator(spec['path'], spec['threads'],
                                                     spec['inter_threads'])
  reply({})
  for _ in harness.requests():
    with harness.timed() as t:
      outputs = ctranslate2_decoding.translate(
          translator, spec['pieces'], beam_size=spec['beam_size'], alpha=spec['alpha'],
          max_decode_extra=spec['max_decode_extra'], max_len=spec['max_len'],
          exact_lengths=False, max_batch_size=spec['rows'])
    reply({'seconds': t.seconds, 'outputs': outputs})


def _systems(run, sources, args):
  """({name: untimed call returning piece lists}, {name: timed call}, {name: batch rows},
  {name: its threads, in words}, closers)."""
  from t2t_jax.inference.portable import ExportedTranslator
  c = run.config
  ours = run.translator(c.beam_size, c.length_penalty_alpha)
  ours.batch_sentences = args.rows
  exported = ExportedTranslator(_stablehlo(run, args.scratch, args.rows))
  pieces = lambda rows: [run.tokenizer.pieces(r) for r in rows]  # noqa: E731
  first = {'ours': lambda: pieces(ours.translate_ids(sources)),
           'stablehlo': lambda: pieces(exported.translate_ids(sources))}
  timed = dict(first)
  rows = {'ours': args.rows, 'stablehlo': args.rows}
  threads = {'ours': THREADS['ours'], 'stablehlo': THREADS['stablehlo']}
  children = []
  for quantization in ('float32', 'int8'):
    path = serving_common.ctranslate2_model(
        run, args.scratch, None if quantization == 'float32' else quantization)
    for r, (inter, intra) in ((r, split) for r in args.ct2_rows for split in args.ct2_splits):
      child = ct2_process(run, path, run.pieces(sources), r, inter, intra, c.beam_size)
      name = f'ct2_{quantization}@{r}' + (f'/{inter}x{intra}' if len(args.ct2_splits) > 1
                                          else '')
      first[name] = lambda child=child: (child.translate(), child.outputs)[1]
      timed[name] = child.translate
      rows[name] = r
      threads[name] = THREADS['ct2'].format(inter=inter, intra=intra)
      children.append(child)
  return first, timed, rows, threads, [child.close for child in children]


THREADS = {'ours': 'XLA CPU thread pool, one per core', 'stablehlo': 'as ours',
           'ct2': 'intra_threads={intra}, inter_threads={inter}, own process'}


def main(argv=None):
  if (sys.argv[1:] if argv is None else argv) == ['--ct2-server']:
    return _serve_ct2()
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=2, help='timed passes of each system')
  parser.add_argument('--rows', type=int, default=None,
                      help="our decode batch (default: the run's decode_batch_sentences)")
  parser.add_argument('--ct2-rows', default=None,
                      help="comma list of CTranslate2's max_batch_size (default: --rows)")
  parser.add_argument('--ct2-splits', default=None,
                      help='comma list of CTranslate2 thread splits IxJ: I batches at once '
                           '(inter_threads), J threads each (default: 1x--threads)')
  args = serving_common.add_args(parser).parse_args(argv)
  harness.start_jax()
  emit = harness.Emitter(args.out)
  import sentencepiece
  from t2t_jax.inference import bleu
  run, sources, references = serving_common.load(args)
  args.rows = args.rows or run.config.decode_batch_sentences
  args.ct2_rows = [int(r) for r in args.ct2_rows.split(',')] if args.ct2_rows else [args.rows]
  args.ct2_splits = _splits(args.ct2_splits or f'1x{args.threads}')
  first, timed, rows, threads, closers = _systems(run, sources, args)
  sp = sentencepiece.SentencePieceProcessor(model_file=run.tokenizer.path)
  load_before = harness.load_average()
  # The untimed first pass (compilation, first allocations) gives the outputs that are scored.
  outputs = {name: translate() for name, translate in first.items()}
  times = harness.interleave(timed, args.repeats, warmup=0)
  for close in closers:
    close()
  results = {}
  for name, passes in times.items():
    seconds = harness.summarize(passes)['median_s']
    tokens = sum(len(row) for row in outputs[name])
    text = [sp.decode(row) for row in outputs[name]]
    results[name] = {
        'seconds': seconds, 'passes_s': passes, 'sentences_per_s': len(sources) / seconds,
        'target_tokens_per_s': tokens / seconds, 'target_tokens': tokens,
        'bleu': bleu.corpus_bleu(text, references).score,
        'identical_to_ours': sum(a == b for a, b in zip(outputs[name], outputs['ours'])),
        'rows': rows[name], 'threads': threads[name]}
  c = run.config
  emit({'name': 'serve', 'checkpoint': run.description,
        'config': {'d_model': c.d_model, 'num_layers': c.num_layers, 'vocab_size': c.vocab_size,
                   'beam_size': c.beam_size, 'alpha': c.length_penalty_alpha,
                   'rows': args.rows, 'ct2_rows': args.ct2_rows},
        'sentences': len(sources), 'repeats': args.repeats, 'results': results,
        'speedup_over_ours': harness.speedups(times, 'ours'),
        'load_average_before': load_before})


if __name__ == '__main__':
  main()
