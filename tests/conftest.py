"""Test setup: 8 simulated CPU devices, set before jax is imported anywhere."""

import atexit
import os
import shutil
import sys
import tempfile

os.environ['XLA_FLAGS'] = (
    os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8').strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# main.py subprocesses share one compilation cache for the session (never the user's ~/.cache).
_COMPILATION_CACHE = tempfile.mkdtemp(prefix='t2t_jax_xla_cache_')
os.environ['T2T_COMPILATION_CACHE_DIR'] = _COMPILATION_CACHE
atexit.register(shutil.rmtree, _COMPILATION_CACHE, ignore_errors=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import gzip  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

BUNDLED = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es')

# A model and data small enough for a few dozen CPU steps in seconds (end-to-end tests).
TINY = ['--config=configs/quickstart.py', '--config.vocab_size=400',
        '--config.vocab_sample_sentences=1200', '--config.d_model=32', '--config.d_ff=64',
        '--config.num_heads=4', '--config.num_layers=1', '--config.max_len=64',
        '--config.max_length=32', '--config.bucket_lengths=(16,32)',
        '--config.tokens_per_batch=2048', '--config.warmup_steps=10',
        '--config.learning_rate_scale=4.0', '--config.dropout_rate=0.0',
        '--config.checkpoint_every_steps=10', '--config.log_every_steps=10',
        '--config.eval_every_steps=30', '--config.keep_checkpoints=10',
        '--config.eval_bleu_sentences=0', '--config.final_eval_split=']


@pytest.fixture(scope='session')
def corpus(tmp_path_factory):
  """The first lines of the bundled corpus as a local corpus folder."""
  folder = tmp_path_factory.mktemp('corpus')
  for split, lines in (('train', 1200), ('dev', 64), ('test', 64)):
    for lang in ('en', 'es'):
      with gzip.open(os.path.join(BUNDLED, f'{split}.{lang}.gz'), 'rt', encoding='utf-8') as f:
        text = [next(f) for _ in range(lines)]
      with open(os.path.join(folder, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.write(''.join(text))
  return str(folder)


@pytest.fixture(scope='session')
def tiny_workdir(corpus, tmp_path_factory):
  """A workdir with a TINY model trained for 10 steps (checkpoints, vocabulary), shared by
  the tests of modes that only read one (attention, export): do not write into it."""
  path = str(tmp_path_factory.mktemp('tiny') / 'run')
  result = run_main(f'--workdir={path}', f'--config.local_corpus_dir={corpus}', *TINY,
                    '--config.num_train_steps=10', '--config.eval_every_steps=0')
  assert result.returncode == 0, result.stderr[-3000:]
  return path


def main_command(*args):
  """`python main.py ARGS` with --config first (config_flags needs it before overrides)."""
  args = sorted(args, key=lambda a: not a.startswith('--config='))
  return [sys.executable, os.path.join(ROOT, 'main.py'), *args]


def run_main(*args, timeout=600, env=None, input=None):
  return subprocess.run(main_command(*args), cwd=ROOT, capture_output=True, text=True,
                        timeout=timeout, env=env, input=input)


def read_metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]
