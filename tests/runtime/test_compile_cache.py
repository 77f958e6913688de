"""The persistent compilation cache: on where asked, off with '', harmless when unusable."""

import os
import subprocess
import sys
import textwrap

from t2t_jax.runtime import compile_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository

# Compiles one small function twice, in two processes, and reports what the cache saw.
_SNIPPET = textwrap.dedent('''
    import logging, sys
    import jax, jax.numpy as jnp
    from t2t_jax.runtime import compile_cache
    records = []
    class Keep(logging.Handler):
      def emit(self, record):
        records.append(record.getMessage())
    logging.getLogger('jax._src.compiler').addHandler(Keep())
    logging.getLogger('jax._src.compiler').setLevel(logging.DEBUG)
    used = compile_cache.enable(sys.argv[1])
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)
    print('used', used)
    print(float(jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((8, 8)))[0, 0]))
    print('hit', any('cache hit' in r for r in records))
''')


def _run(path):
  env = dict(os.environ)
  env.pop('JAX_COMPILATION_CACHE_DIR', None)
  out = subprocess.run([sys.executable, '-c', _SNIPPET, path], cwd=ROOT, capture_output=True,
                       text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  return out.stdout.split('\n')


def test_second_process_loads_the_compiled_program_from_the_cache(tmp_path):
  cache = str(tmp_path / 'xla')
  first = _run(cache)
  assert first[0] == f'used {cache}' and first[2] == 'hit False'
  assert any(name.startswith('jit_') for name in os.listdir(cache))
  second = _run(cache)
  assert second[1] == first[1] and second[2] == 'hit True'


def test_empty_path_turns_the_cache_off(tmp_path, monkeypatch):
  assert _run('')[0] == 'used None'
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR')  # the tests' own cache (conftest.py) wins
  assert compile_cache.enable('') is None and compile_cache.enable(None) is None


def test_unusable_directory_warns_and_runs_without_a_cache(tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('not a directory')
  out = _run(str(blocker / 'xla'))
  assert out[0] == 'used None' and out[2] == 'hit False'


def test_default_dir_follows_the_environment(monkeypatch):
  monkeypatch.setenv(compile_cache.ENV_VAR, '/some/where')
  assert compile_cache.default_dir() == '/some/where'
  monkeypatch.delenv(compile_cache.ENV_VAR)
  assert compile_cache.default_dir() == os.path.join('~', '.cache', 't2t_jax', 'xla')


def _threshold_after_enable(path, env_threshold=None):
  env = dict(os.environ)
  env.pop('JAX_COMPILATION_CACHE_DIR', None)
  env.pop('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', None)
  if env_threshold is not None:
    env['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = env_threshold
  code = ('import sys, jax; from t2t_jax.runtime import compile_cache; '
          'compile_cache.enable(sys.argv[1]); '
          'print(jax.config.jax_persistent_cache_min_compile_time_secs)')
  out = subprocess.run([sys.executable, '-c', code, path], cwd=ROOT, capture_output=True,
                       text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  return float(out.stdout.split()[-1])


def test_short_compilations_are_kept_unless_jax_is_told_otherwise(tmp_path):
  # The small model's decode programs compile in well under JAX's default 1 s.
  assert _threshold_after_enable(str(tmp_path / 'xla')) == compile_cache.MIN_COMPILE_SECONDS
  assert _threshold_after_enable(str(tmp_path / 'xla'), '2.5') == 2.5
