"""The model variants of examples/variants.py next to the paper's model, and grouped-query
attention at 8 query heads, each trained by `main.py` for a short run of the embedded default.

Every model is `python main.py --workdir=ROOT/NAME` (configs/quickstart.py, the bundled EN->ES
corpus) for 1300 steps (`SHORT_RUN`: one dev evaluation, BLEU of the first 100 dev sentences at
step 1300, no final averaging or test evaluation; checkpoints every 400 steps as quickstart, so
an interrupted run resumes), run from the repository root; a workdir whose dev BLEU at the last
step is recorded is not trained again. With `--cores 0,1` two runs go side by side, one per
core (`common.run_pinned`). Then, in this process, from the newest checkpoint (step 1300):

Part 1, the variant table ('paper' and the five factories of examples/variants.py, trained
with `--config.model=examples/variants.py:NAME`), one record per model:
  user_code_lines: non-blank, non-comment lines of the factory and of the functions and
    classes of examples/variants.py it uses, read from the file (`user_code`);
  params; train_loss (the last logged window) and dev_bleu at the last step (metrics.jsonl);
  incremental_gap: `incremental.check_incremental` of the trained parameters on the first 16
    dev pairs (tokenized with the run's vocabulary), a cache of the targets' length and one of
    max_len;
  test_bleu: `Translator.from_workdir` (the run's beam 4, alpha 0.6, batches) on the bundled
    test split, sacreBLEU as --mode=eval computes it (`evaluate.decoded_bleu_of`);
  export: `main.py --mode=export --format=stablehlo --output=W/export`, then the first 32 test
    sentences through the artifact's runtime (`portable.ExportedTranslator`) and through the
    Translator: export_identical is true when every line is the same.

Part 2, grouped-query attention: quickstart at --config.num_heads=8 with num_kv_heads 0 (8/8),
2 and 1 (`GQA`), one record for the three: params; decode-cache bytes per sentence (the
self-attention cache of `incremental.init_cache` at beam 4 and the longest test source (with
EOS) + max_decode_extra positions, plus `incremental.cross_key_values` of that source, from
their shapes); test BLEU; beam-4 decode speed of the whole test split (text to text), one
untimed pass each then `--rounds` passes interleaved round by round (`harness.interleave`);
ratios against 8/8 from the same run.

  python -m benchmarks.studies.variants --root /tmp/variants --cores 0,1 \\
      --out benchmarks/results/variants.jsonl
  python -m benchmarks.studies.variants --root /tmp/variants_smoke --smoke --rounds 1  # 1-2 min
"""

import argparse
import ast
import gzip
import os
import subprocess
import sys
import traceback
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import common, harness, serving_common  # noqa: E402

VARIANTS_FILE = 'examples/variants.py'  # relative to ROOT, where main.py runs
PART1 = ['paper', 'gqa', 'rotary', 't5_bias', 'pre_rmsnorm', 'swiglu']
GQA = {'heads8_kv8': 0, 'heads8_kv2': 2, 'heads8_kv1': 1}  # name -> --config.num_kv_heads
REFERENCE = 'heads8_kv8'
STEPS, SMOKE_STEPS = 1300, 20
# A tiny model for the smoke test; max_len 64 keeps the export at 4 buckets, a short
# max_decode_extra the untrained decodes short.
SMOKE = ['--config.vocab_size=400', '--config.vocab_sample_sentences=5000',
         '--config.d_model=32', '--config.d_ff=64', '--config.num_layers=1',
         '--config.warmup_steps=10', '--config.log_every_steps=10',
         '--config.checkpoint_every_steps=20', '--config.eval_bleu_sentences=8',
         '--config.max_len=64', '--config.max_decode_extra=8']
DEV_SET = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es', 'dev.{}.gz')
INCREMENTAL_PAIRS, INCREMENTAL_TOKENS, BEAM = 16, 64, 4


def short_run(steps: int) -> List[str]:
  return [f'--config.num_train_steps={steps}', f'--config.eval_every_steps={steps}',
          '--config.final_eval_split=']


def command(name: str, root: str, smoke: bool) -> List[str]:
  """The main.py command line that trains `name` into ROOT/NAME."""
  argv = [sys.executable, os.path.join(ROOT, 'main.py'), f'--workdir={os.path.join(root, name)}',
          *short_run(SMOKE_STEPS if smoke else STEPS), *(SMOKE if smoke else [])]
  if name in GQA:
    argv += ['--config.num_heads=8', f'--config.num_kv_heads={GQA[name]}']
  elif name != 'paper':
    argv.append(f'--config.model={VARIANTS_FILE}:{name}')
  return argv


def user_code(factory: str, path: str = os.path.join(ROOT, VARIANTS_FILE)) -> Dict[str, Any]:
  """{'lines': non-blank, non-comment lines, 'parts': names}: the top-level function
  `factory` of `path` and every top-level function or class it names, transitively
  (decorators included; '' or 'paper': no user code)."""
  if factory in ('', 'paper'):
    return {'lines': 0, 'parts': []}
  with open(path, encoding='utf-8') as f:
    text = f.read()
  defs = {n.name: n for n in ast.parse(text).body
          if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
  if factory not in defs:
    raise ValueError(f'{path} has no top-level function {factory!r}')
  todo, used = [factory], []
  while todo:
    name = todo.pop()
    if name in used or name not in defs:
      continue
    used.append(name)
    todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)]
  lines, count = text.splitlines(), 0
  for name in used:
    node = defs[name]
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    count += sum(1 for line in lines[start - 1:node.end_lineno]
                 if line.strip() and not line.strip().startswith('#'))
  return {'lines': count, 'parts': sorted(used)}


def train_metrics(workdir: str, steps: int) -> Optional[Dict[str, Any]]:
  """Train loss and seconds, dev BLEU and NLL at `steps`; None while the run is unfinished."""
  from benchmarks.studies import table3_small
  final = table3_small.final_eval(workdir, steps)
  if final is None:
    return None
  records = table3_small._records(workdir)  # pylint: disable=protected-access
  train = [r for r in records if 'loss' in r]
  return {'steps': steps, 'train_loss': train[-1]['loss'] if train else None,
          'train_seconds': train[-1]['elapsed_s'] if train else None,
          'dev_bleu': final['eval_dev/bleu'], 'dev_nll': final['eval_dev/nll']}


def train_all(names: List[str], root: str, smoke: bool, cores: List[str]) -> Dict[str, str]:
  """Trains the unfinished runs; {name: end of its log} for each that did not finish."""
  steps = SMOKE_STEPS if smoke else STEPS
  todo = [n for n in names if train_metrics(os.path.join(root, n), steps) is None]
  print(f'{len(todo)} of {len(names)} runs to train: {todo}', flush=True)
  jobs = [(command(n, root, smoke), os.path.join(root, f'{n}.log')) for n in todo]
  common.run_pinned(jobs, cores, cwd=ROOT)
  failed = {}
  for name in todo:
    if train_metrics(os.path.join(root, name), steps) is None:
      with open(os.path.join(root, f'{name}.log'), encoding='utf-8', errors='replace') as f:
        failed[name] = ''.join(f.readlines()[-15:])
  return failed


def read_lines(pattern: str, lang: str, limit: Optional[int]) -> List[str]:
  with gzip.open(pattern.format(lang), 'rt', encoding='utf-8') as f:
    lines = [line.rstrip('\n') for line in f]
  return lines[:limit] if limit else lines


def incremental_gap(translator) -> Dict[str, Any]:
  """`check_incremental` of the run's model and parameters on the first dev pairs."""
  import numpy as np
  from t2t_jax.model import incremental
  from t2t_jax.model.transformer import EOS_ID
  tok = translator.tokenizer

  def ids(lines):
    rows = [tok.encode(s)[:INCREMENTAL_TOKENS - 1] + [EOS_ID] for s in lines]
    out = np.zeros((len(rows), max(map(len, rows))), np.int32)
    for i, row in enumerate(rows):
      out[i, :len(row)] = row
    return out
  inputs = ids(read_lines(DEV_SET, 'en', INCREMENTAL_PAIRS))
  targets = ids(read_lines(DEV_SET, 'es', INCREMENTAL_PAIRS))
  params, result = translator.params, {'incremental_pairs': len(inputs)}
  try:
    result['incremental_gap'] = incremental.check_incremental(translator.model, params, inputs,
                                                              targets)
    result['incremental_ok'] = True
  except ValueError as e:  # over atol: record the gap and the message
    result['incremental_error'] = str(e)
    result['incremental_ok'] = False
    result['incremental_gap'] = incremental.check_incremental(
        translator.model, params, inputs, targets, atol=float('inf'))
  return result


def export_check(workdir: str, translator, sentences: List[str]) -> Dict[str, Any]:
  """Exports the run (once) and decodes `sentences` with the artifact and the Translator."""
  from t2t_jax.inference.portable import ExportedTranslator
  path = os.path.join(workdir, 'export')
  argv = [sys.executable, os.path.join(ROOT, 'main.py'), f'--workdir={workdir}',
          '--mode=export', '--format=stablehlo', f'--output={path}']
  if not os.path.isdir(path):
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
      return {'export_identical': None, 'export_command': ' '.join(argv[1:]),
              'export_error': done.stderr[-3000:]}
  ours = translator.translate(sentences)
  theirs = ExportedTranslator(path).translate(sentences)
  differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
  return {'export_identical': not differ and len(ours) == len(theirs),
          'export_sentences': len(sentences), 'export_mismatches': len(differ),
          'export_examples': [{'line': i + 1, 'translator': ours[i], 'export': theirs[i]}
                              for i in differ[:3]]}


def test_bleu(translator, sources: List[str], references: List[str]) -> Dict[str, Any]:
  """Test BLEU of the Translator's outputs, as --mode=eval scores them, and the decode time."""
  from t2t_jax.inference import evaluate
  hypotheses, seconds = harness.time_call(translator.translate, sources)
  scores = evaluate.decoded_bleu_of(hypotheses, references, 'es')
  return {'test_bleu': scores['bleu'], 'test_tokenized_bleu': scores['tokenized_bleu'],
          'test_sentences': len(sources), 'test_decode_s': seconds}


def count_params(translator) -> int:
  from t2t_jax.model.transformer import count_params as count
  return count(translator.params)


def measure_variant(name: str, root: str, steps: int, sources, references,
                    export_sentences: int) -> Dict[str, Any]:
  """Part 1's record of one trained model."""
  from t2t_jax.inference import translate
  workdir = os.path.join(root, name)
  code = user_code(name)
  record = {'name': 'variants', 'part': 'variant_table', 'variant': name,
            'model': '' if name == 'paper' else f'{VARIANTS_FILE}:{name}',
            'user_code_lines': code['lines'], 'user_code_parts': code['parts'],
            'command': ' '.join(command(name, root, steps == SMOKE_STEPS)[1:]),
            **train_metrics(workdir, steps)}
  translator = translate.Translator.from_workdir(workdir)
  record['params'] = count_params(translator)
  record.update(incremental_gap(translator))
  record.update(test_bleu(translator, sources, references))
  record.update(export_check(workdir, translator, sources[:export_sentences]))
  return record


def cache_bytes(translator, sources: List[str]) -> Dict[str, Any]:
  """Decode-cache bytes per sentence at the longest source, from the caches' shapes."""
  import jax
  import jax.numpy as jnp
  from t2t_jax.model import incremental
  longest = max(len(translator.tokenizer.encode(s)) + 1 for s in sources)  # with EOS
  src_len = min(longest, translator.cfg.max_len)
  decode_len = min(longest + translator.max_decode_extra, translator.cfg.max_len)
  nbytes = lambda leaves: sum(x.size * x.dtype.itemsize for x in leaves)  # noqa: E731
  cache = jax.eval_shape(lambda: incremental.init_cache(translator.model, BEAM, decode_len))
  self_bytes = nbytes(x for path, x in jax.tree_util.tree_leaves_with_path(cache)
                      if getattr(path[-1], 'key', None) in ('cached_key', 'cached_value'))
  encoded = jax.ShapeDtypeStruct((1, src_len, translator.cfg.d_model), jnp.float32)
  cross = jax.eval_shape(lambda p, e: incremental.cross_key_values(translator.model, p, e),
                         translator.params, encoded)
  cross_bytes = nbytes(jax.tree_util.tree_leaves(cross))
  return {'cache_source_len': src_len, 'cache_decode_len': decode_len, 'cache_beam': BEAM,
          'self_cache_bytes': self_bytes, 'cross_kv_bytes': cross_bytes,
          'cache_bytes_per_sentence': self_bytes + cross_bytes}


def measure_gqa(names: List[str], root: str, steps: int, sources, references,
                rounds: int) -> Dict[str, Any]:
  """Part 2's record: the models' sizes, caches, test BLEU and interleaved decode speed."""
  from t2t_jax.inference import evaluate, translate
  models, calls = {}, {}
  for name in names:
    workdir = os.path.join(root, name)
    tr = translate.Translator.from_workdir(workdir)
    ids, warm_s = harness.time_call(tr.translate_ids, sources)  # compiles every shape
    hypotheses = [tr.tokenizer.decode(row) for row in ids]
    models[name] = {'num_heads': tr.cfg.num_heads,
                    'num_kv_heads': tr.cfg.num_kv_heads or tr.cfg.num_heads,
                    **train_metrics(workdir, steps), 'params': count_params(tr),
                    **cache_bytes(tr, sources), 'warmup_decode_s': warm_s,
                    'target_tokens': sum(map(len, ids)),
                    'test_bleu': evaluate.decoded_bleu_of(hypotheses, references, 'es')['bleu'],
                    'command': ' '.join(command(name, root, steps == SMOKE_STEPS)[1:])}
    calls[name] = lambda tr=tr: tr.translate(sources)
  times = harness.interleave(calls, rounds, warmup=0)
  for name, summary in harness.summaries(times).items():
    m = models[name]
    m['decode'] = summary
    m['sentences_per_s'] = len(sources) / summary['median_s']
    m['target_tokens_per_s'] = m['target_tokens'] / summary['median_s']
  return {'name': 'variants', 'part': 'gqa', 'test_sentences': len(sources), 'beam_size': BEAM,
          'rounds': rounds, 'models': models, 'times': times,
          'vs_8_8': ratios(models, times)}


def ratios(models: Dict[str, Dict[str, Any]], times) -> Dict[str, Dict[str, Any]]:
  """Each model against REFERENCE: params, cache bytes, speed (x) and test BLEU (difference)."""
  if REFERENCE not in models:
    return {}
  ref, speed = models[REFERENCE], harness.speedups(times, REFERENCE)
  return {name: {'params': harness.ratio(m['params'], ref['params']),
                 'cache_bytes': harness.ratio(m['cache_bytes_per_sentence'],
                                              ref['cache_bytes_per_sentence']),
                 'decode_speed': speed[name],
                 'test_bleu_diff': m['test_bleu'] - ref['test_bleu']}
          for name, m in models.items()}


def failure(name: str, part: str, root: str, smoke: bool, error: str) -> Dict[str, Any]:
  return {'name': 'variants', 'part': part, 'variant': name, 'error': error,
          'command': ' '.join(command(name, root, smoke)[1:])}


def measure_all(args, names: List[str], failed: Dict[str, str], emit) -> None:
  """Part 1's records, then Part 2's; a model that failed is recorded with its error."""
  steps = SMOKE_STEPS if args.smoke else STEPS
  limit = args.test_sentences or (8 if args.smoke else None)
  sources = serving_common.test_set('en', limit)
  references = serving_common.test_set('es', limit)
  for name in [n for n in names if n in PART1]:
    if name in failed:
      emit(failure(name, 'variant_table', args.root, args.smoke, failed[name]))
      continue
    try:
      emit(measure_variant(name, args.root, steps, sources, references, args.export_sentences))
    except Exception:  # noqa: BLE001 - one model's failure is recorded, the others go on
      traceback.print_exc()
      emit(failure(name, 'variant_table', args.root, args.smoke, traceback.format_exc(-3)))
  gqa = [n for n in names if n in GQA]
  for name in [n for n in gqa if n in failed]:
    emit(failure(name, 'gqa', args.root, args.smoke, failed[name]))
  gqa = [n for n in gqa if n not in failed]
  if gqa:
    emit(measure_gqa(gqa, args.root, steps, sources, references, args.rounds))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--root', required=True, help='folder of the workdirs (outside the repo)')
  parser.add_argument('--only', default=','.join(PART1 + list(GQA)),
                      help=f'comma-separated models: {", ".join(PART1 + list(GQA))}')
  parser.add_argument('--cores', default='', help='e.g. "0,1": one training run per core')
  parser.add_argument('--rounds', type=int, default=3, help='Part 2: timed decode passes each')
  parser.add_argument('--test-sentences', type=int, default=0,
                      help='first N test sentences (0: all; --smoke: 8)')
  parser.add_argument('--export-sentences', type=int, default=32)
  parser.add_argument('--smoke', action='store_true',
                      help=f'a tiny model, {SMOKE_STEPS} steps, 8 test sentences')
  harness.add_out_argument(parser)
  args = parser.parse_args()
  names = [n for n in args.only.split(',') if n]
  unknown = [n for n in names if n not in PART1 and n not in GQA]
  if unknown:
    sys.exit(f'error: unknown models {unknown}; known: {PART1 + list(GQA)}')
  args.root = os.path.abspath(args.root)
  if args.root == ROOT or args.root.startswith(ROOT + os.sep):
    sys.exit('error: --root must be outside the repository')
  os.makedirs(args.root, exist_ok=True)
  os.chdir(ROOT)  # the runs name their factory relative to the repository root
  with harness.timed() as total:
    failed = train_all(names, args.root, args.smoke, args.cores.split(',') if args.cores
                       else [''])
    harness.start_jax()
    emit = harness.Emitter(args.out)
    measure_all(args, names, failed, emit)
  emit({'name': 'variants', 'part': 'total', 'models': names, 'smoke': args.smoke,
        'seconds': total.seconds})


if __name__ == '__main__':
  main()
