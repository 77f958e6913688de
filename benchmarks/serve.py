"""Serving speed on the bundled test set: ours (jitted beam search), our StableHLO artifact,
CTranslate2 float32 and int8; same model, same machine, same run.

Every system translates all 1010 test sentences with beam 4, alpha 0.6 (the run's decoding
settings), from text to text (SentencePiece included), in batches of the run's
decode_batch_sentences (64):
  ours        `translate.Translator` (`main.py --mode=decode`); XLA CPU's own thread pool
              (one thread per core);
  stablehlo   `ExportedTranslator` of `--mode=export --format=stablehlo` (the same program,
              deserialized);
  ct2_*       `ctranslate2.Translator(intra_threads=THREADS, inter_threads=1)`, one
              `translate_batch` call (max_batch_size 64, the longest source's length limit,
              4 hypotheses re-ranked by GNMT: `ctranslate2_decoding.translate`).
One untimed pass per system first (our compilations, CTranslate2's first allocations; its
outputs are the ones scored), then `--repeats` timed passes, the systems interleaved so a
change of machine load hits all of them (`harness.interleave`: the order rotates by one each
round); the median pass is reported. Target tokens are the output pieces, EOS excluded.

  python -m benchmarks.serve --workdir RUN --scratch /tmp/serve --out benchmarks/results/serve.jsonl
"""

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import harness, serving_common  # noqa: E402


def _systems(run, scratch, threads):
  """{name: translate(sentences) -> list of piece lists}."""
  from t2t_jax.export import ctranslate2_decoding, stablehlo_export
  from t2t_jax.inference.portable import ExportedTranslator
  c = run.config
  ours = run.translator(c.beam_size, c.length_penalty_alpha)
  artifact = os.path.join(scratch, 'stablehlo')
  if not os.path.isdir(artifact):
    stablehlo_export.export_stablehlo(run.workdir, artifact)
  exported = ExportedTranslator(artifact)
  pieces = lambda rows: [run.tokenizer.pieces(r) for r in rows]  # noqa: E731
  systems = {'ours': lambda s: pieces(ours.translate_ids(s)),
             'stablehlo': lambda s: pieces(exported.translate_ids(s))}
  for quantization in ('float32', 'int8'):
    ct2 = serving_common.ctranslate2_translator(serving_common.ctranslate2_model(
        run, scratch, None if quantization == 'float32' else quantization), threads)

    def translate(sentences, ct2=ct2):
      return ctranslate2_decoding.translate(
          ct2, run.pieces(sentences), beam_size=c.beam_size, alpha=c.length_penalty_alpha,
          max_decode_extra=c.max_decode_extra, max_len=c.max_len, exact_lengths=False,
          max_batch_size=c.decode_batch_sentences)
    systems[f'ct2_{quantization}'] = translate
  return systems


THREADS = {'ours': 'XLA CPU thread pool, one per core', 'stablehlo': 'as ours',
           'ct2_float32': 'intra_threads={}, inter_threads=1',
           'ct2_int8': 'intra_threads={}, inter_threads=1'}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=2, help='timed passes of each system')
  args = serving_common.add_args(parser).parse_args(argv)
  harness.start_jax()
  emit = harness.Emitter(args.out)
  import sentencepiece
  from t2t_jax.inference import bleu
  run, sources, references = serving_common.load(args)
  systems = _systems(run, args.scratch, args.threads)
  sp = sentencepiece.SentencePieceProcessor(model_file=run.tokenizer.path)
  load_before = harness.load_average()
  # The untimed first pass (compilation, first allocations) gives the outputs that are scored.
  outputs = {name: translate(sources) for name, translate in systems.items()}
  times = harness.interleave({name: functools.partial(translate, sources)
                              for name, translate in systems.items()}, args.repeats, warmup=0)
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
        'threads': THREADS[name].format(args.threads)}
  c = run.config
  emit({'name': 'serve', 'checkpoint': run.description,
        'config': {'d_model': c.d_model, 'num_layers': c.num_layers, 'vocab_size': c.vocab_size,
                   'beam_size': c.beam_size, 'alpha': c.length_penalty_alpha,
                   'rows': c.decode_batch_sentences},
        'sentences': len(sources), 'repeats': args.repeats, 'results': results,
        'speedup_over_ours': harness.speedups(times, 'ours'),
        'load_average_before': load_before})


if __name__ == '__main__':
  main()
