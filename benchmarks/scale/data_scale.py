"""The data path at the paper's scale: preparation, vocabulary, token store and the training
iterator on a corpus of WMT14 EN-DE's size (issue 29), on this machine's CPU.

The benchmark builds its own corpus in a temp folder: the bundled Bible train split (29,528
pairs) repeated until `--pairs`, each copy's lines tagged with the copy's number so no two
pairs are equal (4.5M pairs: about 1.2 GB of text), and deletes it at the end. Then, each
stage in a child process of its own (so its peak RSS and start-up are its own), with
`configs/wmt_base.py` on that corpus (`dataset=local`, EN->ES, 37000 pieces sampled from 1M
sentences per language, 25,000-token batches, rows a multiple of 8 devices):

  startup    first run on an empty workdir: preparation (TFDS, array_record, no TensorFlow),
             vocabulary, token store, first bucketed batch; seconds of each, peak RSS of the
             process and of its encoding children;
  rerun      the same on the same workdir (everything reused), to the first batch;
  iterate    real target tokens/s of the training iterator, bucketed and packed, with 1 and 2
             grain threads (after the plan of the epoch exists: `plan_s` is its cost).

  python -m benchmarks.scale.data_scale --pairs 4500000 --out benchmarks/results/data_scale.jsonl
"""

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict

import numpy as np

from benchmarks.shared import common, harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es')


def make_corpus(folder: str, pairs: int) -> Dict[str, Any]:
  """Writes train.en / train.es of `pairs` tagged pairs (and the bundled dev/test)."""
  os.makedirs(folder, exist_ok=True)
  sides = {}
  for lang in ('en', 'es'):
    with gzip.open(os.path.join(BUNDLED, f'train.{lang}.gz'), 'rt', encoding='utf-8') as f:
      sides[lang] = [line.rstrip('\n') for line in f]
  n = len(sides['en'])
  for lang in ('en', 'es'):
    with open(os.path.join(folder, f'train.{lang}'), 'w', encoding='utf-8') as f:
      for copy in range(-(-pairs // n)):
        count = min(n, pairs - copy * n)
        f.write(''.join(f'{line} {copy}\n' for line in sides[lang][:count]))
    for split in ('dev', 'test'):
      shutil.copy(os.path.join(BUNDLED, f'{split}.{lang}.gz'), folder)
  size = sum(os.path.getsize(os.path.join(folder, f'train.{x}')) for x in ('en', 'es'))
  return {'pairs': pairs, 'text_bytes': size}


def _config(corpus: str):
  sys.path.insert(0, ROOT)
  from configs import wmt_base  # pylint: disable=import-outside-toplevel
  c = wmt_base.get_config()
  c.dataset, c.local_corpus_dir, c.target_lang = 'local', corpus, 'es'
  # The start-up stage times the first bucketed batch, as it did before wmt_base packed;
  # the iterate stage sets each layout itself.
  c.pack_examples, c.bucket_lengths = False, (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
  return c


def stage_startup(corpus: str, workdir: str) -> Dict[str, Any]:
  """Preparation, vocabulary, token store and the first batch, each timed."""
  from t2t_jax.data import corpora, pipeline, tokenizer  # pylint: disable=import-outside-toplevel
  config = _config(corpus)
  out: Dict[str, Any] = {}
  total = harness.Stopwatch().start()
  with harness.timed() as sw:
    source = corpora.load_split(config, 'train', corpora.default_data_dir(config, workdir))
  out['prepare_s'] = sw.seconds
  with harness.timed() as sw:
    tok = tokenizer.load_or_train(config, workdir, lambda: tokenizer.sample_sentences(
        source, config.vocab_sample_sentences))
  out['vocabulary_s'] = sw.seconds
  with harness.timed() as sw:
    it = pipeline.make_train_iterator(config, source, tok, rows_multiple=8,
                                      cache_dir=os.path.join(workdir, 'data_cache'))
  out['token_store_and_plan_s'] = sw.seconds
  with harness.timed() as sw:
    next(it)
  out['first_batch_s'] = sw.seconds
  total.stop()
  it.close()
  out.update(total_s=total.seconds, pairs=len(source), **harness.peak_rss())
  return out


def stage_iterate(corpus: str, workdir: str, batches: int) -> Dict[str, Any]:
  """Real target tokens/s of the iterator over `batches` batches, per setting."""
  from t2t_jax.data import corpora, pipeline, tokenizer  # pylint: disable=import-outside-toplevel
  from t2t_jax.runtime import first_fit  # pylint: disable=import-outside-toplevel
  config = _config(corpus)
  source = corpora.load_split(config, 'train', corpora.default_data_dir(config, workdir))
  tok = tokenizer.load_or_train(config, workdir, lambda: [])
  out: Dict[str, Any] = {}
  for mixed, packed, threads in ((False, False, 1), (False, False, 2), (False, True, 1),
                                 (False, True, 2), (True, False, 2), (True, True, 2)):
    config.pack_examples = packed
    with harness.timed() as plan:
      it = pipeline.make_train_iterator(config, _ThreeWay(source) if mixed else source, tok,
                                        rows_multiple=8,
                                        cache_dir=os.path.join(workdir, 'data_cache'),
                                        num_threads=threads, row_ids=first_fit.row_ids)
      first = next(it)  # the epoch's plan is made here
    real = padded = 0
    with harness.timed() as sw:
      for _ in range(batches):
        batch = next(it)
        real += int(np.count_nonzero(batch['targets']))
        padded += batch['targets'].size
    it.close()
    del first
    name = f'{"mixture_" if mixed else ""}{"packed" if packed else "bucketed"}_{threads}t'
    out[name] = {'real_target_tokens_per_s': real / sw.seconds,
                 'padded_target_tokens_per_s': padded / sw.seconds,
                 'cpu_cores_busy': sw.cpu_seconds / sw.seconds, 'batches': batches,
                 'plan_s': plan.seconds}
  out.update(harness.peak_rss())
  return out


class _ThreeWay:
  """`source` read as the mixture `a:2,b:1,c:1` of its thirds (`mixture.MixedSource`'s
  interface, no tags), under its own name: the token store of `source` is reused."""

  def __init__(self, source: Any):
    from t2t_jax import corpora_spec  # pylint: disable=import-outside-toplevel
    n = len(source)
    self._source, self.name = source, source.name
    self.entries = corpora_spec.parse('a:2,b:1,c:1', 'en', 'es')
    self.boundaries = np.array([0, n // 3, 2 * n // 3, n], np.int64)

  def __len__(self) -> int:
    return len(self._source)

  def __getitem__(self, index: int) -> Any:
    return self._source[index]

  def __getitems__(self, indices: Any) -> Any:
    return self._source.__getitems__(indices)


def _child(stage: str, args: argparse.Namespace, corpus: str, workdir: str) -> Dict[str, Any]:
  return common.run_stage('benchmarks.scale.data_scale', stage, dict(
      corpus=corpus, workdir=workdir, batches=args.batches), ROOT)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--pairs', type=int, default=4_500_000)
  parser.add_argument('--batches', type=int, default=400)
  parser.add_argument('--stage', choices=('startup', 'iterate'))
  parser.add_argument('--corpus')
  parser.add_argument('--workdir')
  parser.add_argument('--scratch', default=None, help='temp folder (default: $TMPDIR)')
  harness.add_out_argument(parser)
  args = parser.parse_args()
  if args.stage == 'startup':
    print(json.dumps(stage_startup(args.corpus, args.workdir)))
    return
  if args.stage == 'iterate':
    print(json.dumps(stage_iterate(args.corpus, args.workdir, args.batches)))
    return
  emit = harness.Emitter(args.out)
  scratch = tempfile.mkdtemp(prefix='t2t_jax-data-scale-', dir=args.scratch)
  try:
    corpus, workdir = os.path.join(scratch, 'corpus'), os.path.join(scratch, 'run')
    made = make_corpus(corpus, args.pairs)
    base = {'name': 'data_scale', **made}
    emit({**base, 'stage': 'startup', **_child('startup', args, corpus, workdir)})
    emit({**base, 'stage': 'rerun', **_child('startup', args, corpus, workdir)})
    emit({**base, 'stage': 'iterate', **_child('iterate', args, corpus, workdir)})
    store = os.path.join(workdir, 'data_cache')
    emit({**base, 'stage': 'sizes', 'workdir_bytes': {
        name: sum(os.path.getsize(os.path.join(d, f)) for d, _, files in
                  os.walk(os.path.join(workdir, name)) for f in files)
        for name in os.listdir(workdir)}, 'token_store': store})
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
  main()
