"""End to end: main.py trains a tiny model on CPU, checkpoints, resumes, and learns."""

import gzip
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUNDLED = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es')

TINY = ['--config=configs/quickstart.py', '--config.vocab_size=400',
        '--config.vocab_sample_sentences=1200', '--config.d_model=32', '--config.d_ff=64',
        '--config.num_heads=4', '--config.num_layers=1', '--config.max_len=64',
        '--config.max_length=32', '--config.bucket_lengths=(16,32)',
        '--config.tokens_per_batch=2048', '--config.warmup_steps=10',
        '--config.learning_rate_scale=4.0', '--config.dropout_rate=0.0',
        '--config.checkpoint_every_steps=10', '--config.log_every_steps=10',
        '--config.eval_every_steps=30', '--config.keep_checkpoints=10']


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """The first lines of the bundled corpus as a local corpus folder."""
  folder = tmp_path_factory.mktemp('corpus')
  for split, lines in (('train', 1200), ('dev', 64), ('test', 64)):
    for lang in ('en', 'es'):
      with gzip.open(os.path.join(BUNDLED, f'{split}.{lang}.gz'), 'rt', encoding='utf-8') as f:
        text = [next(f) for _ in range(lines)]
      (folder / f'{split}.{lang}').write_text(''.join(text), encoding='utf-8')
  return str(folder)


def run_main(*args, timeout=600):
  # config_flags needs --config before any --config.KEY override.
  args = sorted(args, key=lambda a: not a.startswith('--config='))
  return subprocess.run([sys.executable, os.path.join(ROOT, 'main.py'), *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout)


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def test_train_checkpoint_resume_and_learn(corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  first = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}',
                   '--config.num_train_steps=30', *TINY)
  assert first.returncode == 0, first.stderr[-3000:]
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['10', '20', '30']
  assert os.path.isfile(os.path.join(workdir, 'vocab', 'spm.model'))
  assert any(n.startswith('events') for n in os.listdir(os.path.join(workdir, 'tensorboard')))
  assert 'tok/s ETA' in first.stderr

  second = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}',
                    '--config.num_train_steps=60', *TINY)
  assert second.returncode == 0, second.stderr[-3000:]
  assert 'resumed from step 30' in second.stderr
  assert 'Reusing the vocabulary' in second.stderr
  assert sorted(int(s) for s in os.listdir(os.path.join(workdir, 'checkpoints'))) == \
      [10, 20, 30, 40, 50, 60]
  records = _metrics(workdir)
  train_steps = [r['step'] for r in records if 'loss' in r]
  assert train_steps == [10, 20, 30, 40, 50, 60]  # the resumed run continues, no repeats
  loss = {r['step']: r['loss'] for r in records if 'loss' in r}
  assert loss[60] < loss[10] - 0.5, loss
  dev = {r['step']: r['eval_dev/loss'] for r in records if 'eval_dev/loss' in r}
  assert sorted(dev) == [0, 30, 60]
  assert dev[60] < dev[0] - 0.5, dev

  # A different model on the same workdir is refused, naming the key; nothing is touched.
  before = {n: os.path.getmtime(os.path.join(workdir, 'checkpoints', n))
            for n in os.listdir(os.path.join(workdir, 'checkpoints'))}
  clash = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}',
                   '--config.num_train_steps=70', *TINY, '--config.d_model=64')
  assert clash.returncode != 0
  assert "d_model: checkpoint has 32, config has 64" in clash.stderr
  after = {n: os.path.getmtime(os.path.join(workdir, 'checkpoints', n))
           for n in os.listdir(os.path.join(workdir, 'checkpoints'))}
  assert before == after


def test_unwritable_workdir_and_missing_data_fail_before_training(corpus, tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  result = run_main(f'--workdir={blocker}/run', f'--config.local_corpus_dir={corpus}', *TINY)
  assert result.returncode != 0
  assert f'workdir {blocker}/run is not writable' in result.stderr
  empty = tmp_path / 'empty_corpus'
  empty.mkdir()
  result = run_main(f'--workdir={tmp_path}/run2', f'--config.local_corpus_dir={empty}', *TINY)
  assert result.returncode != 0
  assert 'error:' in result.stderr and str(empty) in result.stderr and 'train.en' in result.stderr
