"""The decoding and evaluation options of docs/modes.md, shown on a trained run of the embedded
default and the bundled test set (issue 53); each record is appended to `--out` at once.

  repeats   plain beam search against no_repeat_ngram_size=3: test BLEU, and how many outputs
            repeat a word trigram (twice or more; three times or more, docs/modes.md's count);
            each command's seconds with an empty compilation cache, then with it warm.
  nbest     nbest=4 on the first 200 test lines; --mode=score of each rank-1 hypothesis: how
            many log probabilities agree within 1e-3 with the list's, and the largest gap.
  compare   --mode=eval of the last training checkpoint and of the average (the default) on
            the test split, then `python -m t2t_jax.inference.compare` of the two.
  stream    a named pipe: seconds from one line written to its translation read, the pipe
            left open (model loading and compiling excluded: a first line warms it up).

Usage: python benchmarks/studies/decoding_options.py --workdir=RUN --scratch=/tmp/dec \
         --out=benchmarks/results/decoding_options.jsonl [--only=repeats,...]
"""

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import harness, serving_common  # noqa: E402

PARTS = ('repeats', 'nbest', 'compare', 'stream')


def _main(*args, **kwargs):
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'main.py'), *args], cwd=ROOT,
                          capture_output=True, text=True, **kwargs)
  if result.returncode:
    raise SystemExit(f'main.py {" ".join(args)} failed:\n{result.stderr[-3000:]}')
  return result


def _trigram_repeats(line, at_least):
  words = line.split()
  counts = collections.Counter(zip(words, words[1:], words[2:]))
  return bool(counts) and max(counts.values()) >= at_least


def _write(path, lines):
  with open(path, 'w', encoding='utf-8') as f:
    f.write(''.join(line + '\n' for line in lines))
  return path


def part_repeats(args, sources, references, emit):
  import sacrebleu  # pylint: disable=import-outside-toplevel
  source = _write(os.path.join(args.scratch, 'test.en'), sources)
  row = {'name': 'decoding_repeats', 'sentences': len(sources),
         'references_repeating_3x': sum(_trigram_repeats(r, 3) for r in references)}
  for name, extra in (('plain', []), ('no_repeat_ngram_size_3',
                                      ['--config.no_repeat_ngram_size=3'])):
    output = os.path.join(args.scratch, f'{name}.es')
    # A compilation cache of its own, empty at first: the first command compiles everything
    # (cold), the second finds it all (warm): the search's own cost, apart from compiling.
    cache = os.path.join(args.scratch, f'xla_{name}')
    shutil.rmtree(cache, ignore_errors=True)
    seconds = []
    for _ in ('cold', 'warm'):
      if os.path.exists(output):
        os.remove(output)
      seconds.append(harness.time_call(
          _main, '--mode=decode', f'--workdir={args.workdir}', f'--input={source}',
          f'--output={output}', *extra,
          env=dict(os.environ, T2T_COMPILATION_CACHE_DIR=cache))[1])
    with open(output, encoding='utf-8') as f:
      hyps = f.read().splitlines()
    row[name] = {'bleu': round(sacrebleu.corpus_bleu(hyps, [references]).score, 2),
                 'repeating_2x': sum(_trigram_repeats(h, 2) for h in hyps),
                 'repeating_3x': sum(_trigram_repeats(h, 3) for h in hyps),
                 'command_cold_s': round(seconds[0], 1), 'command_warm_s': round(seconds[1], 1)}
  emit(row)


def part_nbest(args, sources, references, emit):
  del references
  source = _write(os.path.join(args.scratch, 'nbest.en'), sources[:200])
  listed = _main('--mode=decode', f'--workdir={args.workdir}', f'--input={source}',
                 '--config.nbest=4').stdout.splitlines()
  best = [line.split('\t') for line in listed if line.split('\t')[1] == '1']
  targets = _write(os.path.join(args.scratch, 'best.es'), [b[4] for b in best])
  scored = _main('--mode=score', f'--workdir={args.workdir}', f'--input={source}',
                 f'--targets={targets}').stdout.splitlines()
  gaps = [abs(float(s.split('\t')[0]) - float(b[3])) for s, b in zip(scored, best)]
  emit({'name': 'nbest_against_score', 'sentences': len(best), 'lines': len(listed),
        'within_1e-3': sum(g <= 1e-3 for g in gaps), 'max_gap': max(gaps),
        'median_gap': sorted(gaps)[len(gaps) // 2]})


def part_compare(args, sources, references, emit):
  del sources, references
  results = {}
  steps = sorted(int(n) for n in os.listdir(os.path.join(args.workdir, 'checkpoints'))
                 if n.isdigit())
  for name, extra in (('last', [f'--checkpoint={steps[-1]}']), ('average', [])):
    printed = _main('--mode=eval', f'--workdir={args.workdir}', '--split=test', *extra).stdout
    results[name] = json.loads(printed[printed.index('{'):])
  compared = subprocess.run(
      [sys.executable, '-m', 't2t_jax.inference.compare',
       f'--baseline={results["last"]["path"]}', f'--system={results["average"]["path"]}',
       '--json'], cwd=ROOT, capture_output=True, text=True, check=True)
  emit({'name': 'paired_last_against_average', 'last': results['last']['checkpoint'],
        'average': results['average']['checkpoint'],
        'scores': {n: {k: round(r[k], 2) for k in ('bleu', 'chrf', 'ter')}
                   for n, r in results.items()},
        'paired_bootstrap': json.loads(compared.stdout)})


def part_stream(args, sources, references, emit):
  del references
  fifo = os.path.join(args.scratch, 'stream.fifo')
  if os.path.exists(fifo):
    os.remove(fifo)
  os.mkfifo(fifo)
  process = subprocess.Popen([sys.executable, os.path.join(ROOT, 'main.py'), '--mode=decode',
                              f'--workdir={args.workdir}', f'--input={fifo}'], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  times = []
  with open(fifo, 'w', encoding='utf-8') as pipe:
    for sentence in sources[:6]:  # the first one warms up (loading, compiling)
      with harness.timed() as clock:
        pipe.write(sentence + '\n')
        pipe.flush()
        process.stdout.readline()
      times.append(clock.seconds)
  process.wait(120)
  emit({'name': 'stream_first_line', 'first_line_s_with_loading': times[0],
        'later_lines_s': times[1:], 'returncode': process.returncode})


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--workdir', required=True, help='a trained embedded default (read only)')
  parser.add_argument('--scratch', required=True, help='folder for inputs and outputs')
  parser.add_argument('--out', required=True, help='JSON lines file records are appended to')
  parser.add_argument('--only', default=','.join(PARTS), help=f'a subset of {PARTS}')
  args = parser.parse_args()
  for part in args.only.split(','):
    if part not in PARTS:
      parser.error(f'--only: {part!r} is not one of {", ".join(PARTS)}')
  os.makedirs(args.scratch, exist_ok=True)
  emit = harness.Emitter(args.out)
  sources, references = serving_common.test_set('en'), serving_common.test_set('es')
  for part in args.only.split(','):
    globals()[f'part_{part}'](args, sources, references, emit)


if __name__ == '__main__':
  main()
