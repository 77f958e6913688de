"""Test setup: 8 simulated CPU devices, set before jax is imported anywhere."""

import atexit
import ctypes
import fcntl
from importlib import metadata
import os
import re
import shutil
import sys
import tempfile

# XLA_FLAGS as the user set them: the flags added below come out again, since pytest-xdist's
# workers and the tests' children inherit them from this process.
_OURS = ('--xla_force_host_platform_device_count=', '--xla_backend_optimization_level=',
         '--xla_cpu_use_fusion_emitters=')
_USER_XLA_FLAGS = ' '.join(f for f in os.environ.get('XLA_FLAGS', '').split()
                           if not f.startswith(_OURS))
# LLVM at -O0 for the tests' programs (T2T_TEST_XLA_OPT=default: XLA's own level). The suite
# is mostly compiling, and -O0 halves a compile (13.9 -> 6.4 s, test_stack's slowest case):
# from an empty cache on 2 workers the whole suite took 24.3 min instead of 31.0-33.5, the
# fast tier 618 s instead of 813 (docs/install.md). It changes float rounding, not what a
# program computes, so the records made bit for bit at XLA's default level run in a child at
# that level (`at_default_xla_optimization`). The one worker crash seen at -O0 (2026-11-29,
# in XLA's cache write) came before the mapped-regions bound below, and crashed workers were
# seen at the default level too (tests/worker_crash.py reruns their test once). With it, XLA's
# older LLVM IR fusion emitters instead of the MLIR ones where jaxlib still has them (before
# 0.11, whose XLA aborts on the flag): another third off the compiles (tests/model/test_stack,
# test_compaction and test_beam_decode from an empty cache: 47.1 s -> 31.9 s on the 2-core
# EPYC, 2026-12-06), again rounding only.
XLA_TEST_OPT = os.environ.get('T2T_TEST_XLA_OPT', '0')
_OLD_EMITTERS = tuple(int(x) for x in re.findall(r'\d+', metadata.version('jaxlib'))[:2]) < (0, 11)
os.environ['XLA_FLAGS'] = (_USER_XLA_FLAGS + ' --xla_force_host_platform_device_count=8' + (
    '' if XLA_TEST_OPT == 'default' else f' --xla_backend_optimization_level={XLA_TEST_OPT}'
    + (' --xla_cpu_use_fusion_emitters=false' if _OLD_EMITTERS else ''))).strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# One persistent XLA compilation cache for the tests, this process, xdist's workers and the
# main.py children, kept between runs: most of the suite is compiling, and an edit-test loop
# recompiles only what changed (model, inference, export, inspect tests: 148 s cold, 64 s
# warm). Never the user's ~/.cache/t2t_jax/xla; T2T_TEST_XLA_CACHE='' gives the session a
# fresh one, empty as on a new machine, which the workers (started after this) inherit.
_XLA_CACHE = os.environ.get('T2T_TEST_XLA_CACHE',
                            os.path.join(os.path.expanduser('~'), '.cache', 't2t_jax', 'test-xla'))
if not _XLA_CACHE:
  _XLA_CACHE = tempfile.mkdtemp(prefix='t2t_jax_xla_cache_')
  atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
  os.environ['T2T_TEST_XLA_CACHE'] = _XLA_CACHE
os.environ['JAX_COMPILATION_CACHE_DIR'] = _XLA_CACHE
os.environ['T2T_COMPILATION_CACHE_DIR'] = _XLA_CACHE
os.environ['T2T_CPU_PEAK_CACHE'] = os.path.join(_XLA_CACHE, 'cpu_peak.json')  # not the user's
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
os.environ['JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES'] = '0'
# Huge pages for malloc in workers and main.py children, as the command gives itself: no re-exec.
from t2t_jax.runtime import huge_pages  # noqa: E402  (no jax: the package is lazy)
if huge_pages.wanted(os.environ):
  os.environ['GLIBC_TUNABLES'] = huge_pages.tunables(os.environ)
# No JAX_COMPILATION_CACHE_MAX_SIZE: JAX's LRU eviction locks and touches a file per entry on
# every read and write (cold test_multi_head_attention + test_depth_embeddings 74-110 s, not
# 55 s; 2026-11-27). The bound is kept here, once a session: past 2 GiB, down to 1.5 GiB.
_XLA_CACHE_BOUND = (2 << 30, 3 << 29)


def _prune_xla_cache(folder, bound=_XLA_CACHE_BOUND):
  """Deletes the least recently modified files of `folder` until it holds at most bound[1]
  bytes, when it holds more than bound[0]. Returns the bytes deleted."""
  try:
    entries = [e for e in os.scandir(folder) if e.is_file(follow_symlinks=False)]
  except OSError:
    return 0
  sizes = {e.path: e.stat() for e in entries}
  total = sum(st.st_size for st in sizes.values())
  if total <= bound[0]:
    return 0
  deleted = 0
  for path, st in sorted(sizes.items(), key=lambda item: item[1].st_mtime):
    if total - deleted <= bound[1]:
      break
    try:
      os.remove(path)
      deleted += st.st_size
    except OSError:
      pass
  return deleted


def _cache_entries(folder):
  try:
    return sum(1 for e in os.scandir(folder) if e.is_file(follow_symlinks=False))
  except OSError:
    return 0


if 'PYTEST_XDIST_WORKER' not in os.environ:  # the controller (or a run without workers)
  _prune_xla_cache(_XLA_CACHE)
_XLA_CACHE_AT_START = _cache_entries(_XLA_CACHE)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import gzip  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

# Defined here once: a session fixture imported into several test modules is one fixture per
# module, each starting its own emulator and pointing the environment at the newest, so a
# test could upload to one emulator and hand its child process the other's address.
from gcs_emulator import gcs, gcs_dir  # noqa: E402,F401  (fixtures)
import main_zygote  # noqa: E402

BUNDLED = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es')

# A model and data small enough for a few dozen CPU steps in seconds (end-to-end tests).
TINY = ['--config=configs/quickstart.py', '--config.vocab_size=400',
        '--config.vocab_sample_sentences=1200', '--config.d_model=32', '--config.d_ff=64',
        '--config.num_heads=4', '--config.num_layers=1', '--config.lr_schedule=rsqrt',
        '--config.max_len=64', '--config.max_length=32', '--config.bucket_lengths=(16,32)',
        '--config.tokens_per_batch=2048', '--config.warmup_steps=10',
        '--config.learning_rate_scale=4.0', '--config.dropout_rate=0.0',
        '--config.checkpoint_every_steps=10', '--config.log_every_steps=10',
        '--config.eval_every_steps=30', '--config.keep_checkpoints=10',
        '--config.eval_bleu_sentences=0', '--config.final_eval_split=']


def shared_once(tmp_path_factory, name, make):
  """`<session temp>/<name>`, made by `make(path)` once per test session: under pytest-xdist
  the workers share it too (their base temp dirs have one parent), the first to arrive makes
  it under a file lock while the others wait. A failed `make` leaves nothing marked done, so
  the next worker tries again and fails the same way."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    root = root.parent
  path, done = root / name, root / f'{name}.done'
  with open(root / f'{name}.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not done.exists():
      shutil.rmtree(path, ignore_errors=True)  # a failed attempt's leftovers
      make(str(path))
      done.touch()
  return str(path)


def _write_corpus(folder):
  os.makedirs(folder)
  for split, lines in (('train', 1200), ('dev', 64), ('test', 64)):
    for lang in ('en', 'es'):
      with gzip.open(os.path.join(BUNDLED, f'{split}.{lang}.gz'), 'rt', encoding='utf-8') as f:
        text = [next(f) for _ in range(lines)]
      with open(os.path.join(folder, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.write(''.join(text))


def short_corpus(corpus, folder, count=8, words=10):
  """A corpus folder at `folder`: `corpus`, with dev and test the bundled splits' first `count`
  pairs of at most `words` words a side: for a test that evaluates a split through main.py to
  check something else than scores, a few short sentences to compile and decode, not 64 long
  ones (measured: a cold --mode=eval of a TINY run, 14 -> 8.5 CPU s)."""
  shutil.copytree(corpus, folder)
  for split in ('dev', 'test'):
    with gzip.open(os.path.join(BUNDLED, f'{split}.en.gz'), 'rt', encoding='utf-8') as en, \
         gzip.open(os.path.join(BUNDLED, f'{split}.es.gz'), 'rt', encoding='utf-8') as es:
      short = (pair for pair in zip(en, es) if max(len(s.split()) for s in pair) <= words)
      pairs = [next(short) for _ in range(count)]
    for lang, side in zip(('en', 'es'), zip(*pairs)):
      with open(os.path.join(folder, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.write(''.join(side))
  return str(folder)


@pytest.fixture(scope='session')
def corpus(tmp_path_factory):
  """The first lines of the bundled corpus as a local corpus folder (read-only)."""
  return shared_once(tmp_path_factory, 'corpus', _write_corpus)


@pytest.fixture(scope='session')
def tiny_workdir(corpus, tmp_path_factory):
  """A workdir with a TINY model trained for 10 steps (checkpoints, vocabulary), shared by
  the tests of modes that only read one (attention, export): do not write into it."""
  def train(path):
    result = run_main(f'--workdir={path}', f'--config.local_corpus_dir={corpus}', *TINY,
                      '--config.num_train_steps=10', '--config.eval_every_steps=0')
    assert result.returncode == 0, result.stderr[-3000:]
  path = shared_once(tmp_path_factory, 'tiny_run', train)
  before = _listing(path)
  yield path
  # A test that wrote into it changes what later tests see, by their order (an eval JSON left
  # there once renamed another test's output): fail the session's last user instead.
  added = sorted(set(_listing(path)) - set(before))
  assert not added, f'a test wrote into the shared tiny_workdir: {added[:5]}'


def _listing(path):
  return [os.path.relpath(os.path.join(d, n), path) for d, _, names in os.walk(path)
          for n in names]


def main_command(*args):
  """`python main.py ARGS` with --config first (config_flags needs it before overrides)."""
  args = sorted(args, key=lambda a: not a.startswith('--config='))
  return [sys.executable, os.path.join(ROOT, 'main.py'), *args]


def main_command_with(prelude, *args):
  """`main_command(*args)` with the Python source `prelude` run first in the same process:
  a test's seam (a fake clock, a pause at a step) inside a run it starts as a child."""
  python, main, *rest = main_command(*args)
  run = f'import runpy, sys\nsys.argv[0] = {main!r}\nrunpy.run_path({main!r}, run_name="__main__")'
  return [python, '-c', prelude + '\n' + run, *rest]


run_main_argv = main_zygote.run  # `python main.py` with exactly these arguments


def run_main(*args, timeout=600, env=None, input=None, cwd=ROOT):
  """`python main.py ARGS` (`main_command`: --config first) run in `cwd`, its output
  captured as text (forked from a zygote where it can be: tests/main_zygote.py)."""
  return run_main_argv(main_command(*args)[2:], timeout=timeout, env=env, input=input, cwd=cwd)


def at_default_xla_optimization(test):
  """`test` (taking no fixtures) run in a pytest child whose programs compile at XLA's
  default optimization level, for a record made bit for bit at that level; as it is where the
  session compiles there too (T2T_TEST_XLA_OPT=default)."""
  if XLA_TEST_OPT == 'default':
    return test
  import functools
  import inspect

  @functools.wraps(test)
  def in_child():
    node = f'{inspect.getsourcefile(test)}::{test.__name__}'
    env = dict(os.environ, T2T_TEST_XLA_OPT='default', XLA_FLAGS=_USER_XLA_FLAGS)
    child = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-n', '0', '-p',
                            'no:cacheprovider', node], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    if ' skipped' in child.stdout and ' passed' not in child.stdout:
      pytest.skip(f'skipped at the default level: {child.stdout.strip().splitlines()[-1]}')
  return in_child


def read_metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def pytest_collection_finish(session):
  """Python's cycle collector, tuned for a process that holds jax's caches all session.

  Freezes what collecting imported (jax, flax, every test module: alive all session), so full
  collections stop walking it (main.py does the same), and collects less often: each full
  collection walks the executables and trace caches the tests accumulate (~0.4 s each late
  in the model tests). Measured on the fast tier of tests/model and tests/runtime (warm
  cache, 2 workers): the workers spent 8-13% of their time collecting with the defaults and
  the freeze alone, 4-8% with these thresholds; the run took 82 -> 66-71 s, peak RSS the same
  (4.9 / 2.7 GB)."""
  import gc
  gc.freeze()
  gc.set_threshold(50_000, 20, 20)  # Python's defaults: 700, 10, 10


# A worker's memory-mapped regions, bounded below the kernel's vm.max_map_count (65,530 by
# default): each XLA:CPU executable maps its code, and past the limit the next one to load
# from the compilation cache segfaults inside XLA (`deserialize_executable`). Measured on
# 2026-11-29: a worker reached 64,826 regions after ~550 tests and crashed there, on CI and
# in 3 of 3 local runs. Between test modules, past the bound, jax's caches are dropped.
# 30,000 since 2026-12-06: at 40,000 a worker aborted in XLA twice (2026-12-06 12:02 and 14:19)
# inside one module (tests/runtime/test_parallel.py, ZeRO's eager sums of sharded gradients)
# that it had entered below the bound.
_MAPPED_REGIONS_BOUND = 30_000


def _mapped_regions() -> int:
  try:
    with open('/proc/self/maps', 'rb') as f:
      return sum(1 for _ in f)
  except OSError:  # not Linux: no such limit to keep below
    return 0


def pytest_runtest_teardown(item, nextitem):
  """At the end of a test module, drops jax's compiled programs if the process holds more
  than `_MAPPED_REGIONS_BOUND` mapped regions (the next module recompiles or loads from the
  persistent cache what it needs)."""
  if (nextitem is None or nextitem.module is not item.module) and (
      _mapped_regions() > _MAPPED_REGIONS_BOUND):
    import jax
    jax.clear_caches()


def pytest_collection_modifyitems(items):
  """The slow tests first: with pytest-xdist's workers, long jobs started early and short ones
  filling the gaps end the run sooner than a long test started last (longest first)."""
  items.sort(key=lambda item: item.get_closest_marker('slow') is None)


def pytest_terminal_summary(terminalreporter):
  """Whether this run's time is from an empty compilation cache (docs/install.md's budget):
  CI's log then says what its time measured."""
  if 'PYTEST_XDIST_WORKER' not in os.environ:
    terminalreporter.write_line(
        f'test compilation cache {_XLA_CACHE}: {_XLA_CACHE_AT_START} entries at the start '
        f'({"empty" if not _XLA_CACHE_AT_START else "warm"}), {_cache_entries(_XLA_CACHE)} '
        'at the end')


# The transformers models tests/pretrained/ shares, as fixtures (tests/pretrained_fixtures.py).
pytest_plugins = ['pretrained_fixtures']


def pytest_configure(config):
  """A test skipped because a package of requirements-dev.txt fails to import fails the run
  (tests/skip_guard.py); other skips (no GPU, no C compiler) stay skips. A test whose
  pytest-xdist worker crashes runs once more (tests/worker_crash.py)."""
  import skip_guard  # noqa: E402 - tests/ is on the path (pyproject.toml: pythonpath)
  import worker_crash  # noqa: E402
  # T2T_TEST_REQUIREMENTS: another set's file (.ci/run's Python 3.12 leg, which installs no
  # torch: its only wheel there brings CUDA's libraries, gigabytes).
  skip_guard.register(config, os.environ.get('T2T_TEST_REQUIREMENTS')
                      or os.path.join(ROOT, 'requirements-dev.txt'))
  worker_crash.register(config)


@pytest.fixture(autouse=True)
def _fresh_write_failure_state(monkeypatch):
  """Each test starts as a fresh process would: no write failure reported yet
  (`storage.workdir.report_write_failure` counts them and quiets later reports of the same
  condition through the thread and unraisable hooks)."""
  import threading
  from t2t_jax.storage import workdir
  monkeypatch.setattr(workdir, '_reported', [0])
  monkeypatch.setattr(threading, 'excepthook', threading.excepthook)
  monkeypatch.setattr(sys, 'unraisablehook', sys.unraisablehook)


class _SigAction(ctypes.Structure):
  """Linux's struct sigaction (x86-64 and arm64 lay it out alike up to the handler)."""
  _fields_ = [('handler', ctypes.c_void_p), ('mask', ctypes.c_ulong * 16),
              ('flags', ctypes.c_int), ('restorer', ctypes.c_void_p)]


def _signal_state():
  """SIGINT's and SIGTERM's Python handlers, the native handler the kernel calls (a native
  library can replace Python's without Python knowing), and whether the kernel ignores or
  blocks them for this process's main thread (a child process inherits those)."""
  import signal
  state = {s.name: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  if not sys.platform.startswith('linux'):
    return state
  libc = ctypes.CDLL(None)
  with open('/proc/self/status', encoding='ascii') as f:
    fields = dict(line.split(':', 1) for line in f if ':' in line)
  for s in (signal.SIGINT, signal.SIGTERM):
    action = _SigAction()
    libc.sigaction(int(s), None, ctypes.byref(action))
    state[f'{s.name} native handler'] = action.handler
    for field in ('SigIgn', 'SigBlk'):
      state[f'{s.name} {field}'] = bool(int(fields[field], 16) >> (s - 1) & 1)
  return state


def _ctrl_c_as_from_a_terminal():
  """A shell without job control starts a background command (`pytest ... &`, nohup) with
  SIGINT ignored, and every child inherits that: the tests of Ctrl-C would then wait for
  work that no Ctrl-C stops. The suite runs as from a terminal, wherever it is started."""
  import signal
  if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


_ctrl_c_as_from_a_terminal()
_SIGNALS_AT_START = _signal_state()  # this worker's, before any test


@pytest.fixture(autouse=True)
def _signals_as_at_start(request):
  """A test after which SIGINT or SIGTERM is handled, ignored or blocked otherwise than when
  this process started fails, named, and the start's state is put back: a later test on the
  same worker that relies on Ctrl-C (tests/runtime/test_interruptible.py,
  tests/plan/test_plan_interrupt.py) would otherwise fail far from the cause. (Against the
  start, not the test's own start: a module fixture's change shows after its first test.)"""
  import signal
  yield
  after = _signal_state()
  changed = {k: (v, after.get(k)) for k, v in _SIGNALS_AT_START.items() if after.get(k) != v}
  if not changed:
    return
  # libtpu's initialisation (tests/plan: compiling for TPU topologies) installs a native
  # SIGTERM handler of its own; put back, not a fault of the test.
  faults = {k: v for k, v in changed.items() if k != 'SIGTERM native handler'}
  for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, _SIGNALS_AT_START[s.name])  # reinstalls Python's native handler too
  signal.pthread_sigmask(signal.SIG_UNBLOCK, [s for s in (signal.SIGINT, signal.SIGTERM)
                                              if not _SIGNALS_AT_START.get(f'{s.name} SigBlk')])
  if faults:
    raise AssertionError(f'{request.node.nodeid} left signals changed (at start, now): {faults}')
