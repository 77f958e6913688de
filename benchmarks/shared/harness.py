"""The benchmarks' one harness: timing, same-run interleaving, the machine, JSON-lines records.

This is the only module under benchmarks/ and tours/ that reads a clock or describes the
machine (tests/benchmarks/shared/test_harness.py checks that no other one calls
time.perf_counter & co.):

  * `Stopwatch` / `timed()` / `time_call()`: wall seconds of a block or a call, from
    `time.perf_counter` (monotonic, the finest resolution, counts time asleep or waiting for
    the machine), plus the CPU seconds of this process and of its finished children;
  * `median_time`, `summarize`: repeated calls of one function and the summary every record
    uses ({median_s, min_s, max_s, n});
  * `interleave`: several systems timed round by round in the same run, so a change of
    machine load hits all of them alike; `summaries` and `speedups` over its result;
  * `machine()`: CPU, cores, memory, platform, library versions, jax devices, environment;
  * `Emitter`: one JSON object per line to stdout and (with --out) appended to a file, each
    with its date, the machine description and the load average when it was written.

`python -m benchmarks.shared.harness` prints a record with no numbers, {'name': 'machine'} plus
the date, the machine and the load, as one JSON line (benchmarks/run_all.sh, before and
after its benchmarks).
"""

import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

# Modules whose versions a record names, when the benchmark has imported them (importing
# them here would cost seconds and change what the benchmark's process holds).
LIBRARIES = ('jax', 'jaxlib', 'flax', 'optax', 'numpy', 'torch', 'ctranslate2')
# Environment variables that change what the libraries do with the machine.
ENV_VARS = ('XLA_FLAGS', 'OMP_NUM_THREADS', 'JAX_PLATFORMS', 'CUDA_VISIBLE_DEVICES')


def load_average() -> Optional[List[float]]:
  """The 1, 5 and 15-minute load averages (None where the OS has none)."""
  try:
    return [round(x, 2) for x in os.getloadavg()]
  except OSError:
    return None


# Every wall-clock reading of the benchmarks (a name of its own, so that tests can put a fake
# clock in its place).
_wall_clock = time.perf_counter

# The load when the benchmark's process started measuring (imported this module): a record
# written at the end of a long run still tells how busy the machine was when it began.
_LOAD_AT_START = load_average()


class Stopwatch:
  """Accumulates the seconds of the intervals it runs: `with sw:` (or start()/stop()).

  `seconds`: wall-clock seconds (time.perf_counter) summed over the intervals, the running
  one included; `cpu_seconds`: user + system CPU seconds of this process over them (all its
  threads); `children_cpu_seconds`: those of child processes that finished and were waited
  for meanwhile. On a shared machine the wall time depends on the other jobs, CPU time less.
  """

  def __init__(self):
    self._wall = self._cpu = self._children = 0.0
    self._started: Optional[Tuple[float, os.times_result]] = None

  def start(self) -> 'Stopwatch':
    if self._started is not None:
      raise RuntimeError('the stopwatch is already running')
    self._started = (_wall_clock(), os.times())
    return self

  def stop(self) -> 'Stopwatch':
    if self._started is None:
      raise RuntimeError('the stopwatch is not running')
    wall, cpu, children = self._since_start()
    self._wall, self._cpu, self._children = (self._wall + wall, self._cpu + cpu,
                                             self._children + children)
    self._started = None
    return self

  def _since_start(self) -> Tuple[float, float, float]:
    if self._started is None:
      return 0.0, 0.0, 0.0
    wall, before = _wall_clock() - self._started[0], self._started[1]
    now = os.times()
    return (wall, now.user - before.user + now.system - before.system,
            now.children_user - before.children_user
            + now.children_system - before.children_system)

  @property
  def seconds(self) -> float:
    return self._wall + self._since_start()[0]

  @property
  def cpu_seconds(self) -> float:
    return self._cpu + self._since_start()[1]

  @property
  def children_cpu_seconds(self) -> float:
    return self._children + self._since_start()[2]

  def __enter__(self) -> 'Stopwatch':
    return self.start()

  def __exit__(self, *exc) -> None:
    self.stop()


def peak_rss() -> Dict[str, float]:
  """Peak resident memory (GB, 1e9 bytes) of this process and of its largest finished child
  (getrusage, like the CPU times of `Stopwatch`; Linux reports KiB)."""
  import resource  # pylint: disable=import-outside-toplevel (POSIX only)
  to_gb = lambda usage: round(usage.ru_maxrss * 1024 / 1e9, 3)  # noqa: E731
  return {'peak_rss_gb': to_gb(resource.getrusage(resource.RUSAGE_SELF)),
          'children_peak_rss_gb': to_gb(resource.getrusage(resource.RUSAGE_CHILDREN))}


def timed() -> Stopwatch:
  """A new stopwatch, for `with timed() as t: ...` then `t.seconds`."""
  return Stopwatch()


def time_call(fn: Callable[..., Any], *args, **kwargs) -> Tuple[Any, float]:
  """(fn(*args, **kwargs), its wall seconds). `fn` must block until its work is done (e.g.
  jax.block_until_ready, torch.cuda.synchronize): asynchronous work is not waited for."""
  with timed() as t:
    result = fn(*args, **kwargs)
  return result, t.seconds


def now() -> float:
  """Seconds since the epoch (time.time): a deadline that several processes share."""
  return time.time()


def timestamp(compact: bool = False) -> str:
  """The local date and time to the second: ISO 8601 ('2026-11-22T15:15:41+00:00', what
  records carry), or with `compact` a file-name part ('20261122T151541')."""
  now = datetime.datetime.now().astimezone()
  return now.strftime('%Y%m%dT%H%M%S') if compact else now.isoformat(timespec='seconds')


def summarize(times: List[float]) -> Dict[str, float]:
  """{median_s, min_s, max_s, n} of a non-empty list of seconds (the median of an even
  count is the mean of the middle two)."""
  return {'median_s': statistics.median(times), 'min_s': min(times), 'max_s': max(times),
          'n': len(times)}


@dataclasses.dataclass(frozen=True)
class Measured:
  """What a system given to `interleave` returns when it timed itself (with this harness,
  e.g. in a child process whose pipe round trip must not count): those seconds are recorded
  instead of the call's own."""
  seconds: float


class ChildProcess:
  """A benchmark system in a process of its own (`python -m MODULE FLAG`, run from the
  repository root), driven over a pipe: `call(message)` writes one JSON line to its stdin
  and returns the JSON line it answers. The first message is usually its spec. The child
  side: `child_protocol()`."""

  def __init__(self, module: str, flag: str, what: str):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    self.what = what
    self.proc = subprocess.Popen([sys.executable, '-m', module, flag], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=root)

  def call(self, message: Any) -> Any:
    self.proc.stdin.write(json.dumps(message) + '\n')
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line:
      raise RuntimeError(f'the {self.what} process exited with {self.proc.wait()} (see stderr)')
    return json.loads(line)

  def close(self) -> None:
    self.proc.stdin.close()
    self.proc.wait(timeout=60)


def child_protocol():
  """Child side of `ChildProcess`: (the spec, `reply(obj)`); then iterate `requests`.
  Anything the libraries print goes to stderr, not into the protocol."""
  out = os.fdopen(os.dup(1), 'w')
  os.dup2(2, 1)

  def reply(obj: Any) -> None:
    out.write(json.dumps(obj) + '\n')
    out.flush()
  return json.loads(sys.stdin.readline()), reply


def requests():
  """The requests a `child_protocol` child receives, decoded, until its parent closes."""
  for line in sys.stdin:
    yield json.loads(line)


def interleave(systems: Mapping[str, Callable[[], Any]], rounds: int, warmup: int = 1,
               repeats: Union[int, Mapping[str, int]] = 1) -> Dict[str, List[float]]:
  """Times `systems` ({name: call}) alternately in one run, so a change of machine load hits
  all of them alike.

  First `warmup` untimed calls of each, alternating in the given order. Then `rounds`
  rounds: round r runs the systems in the given order rotated left by r mod n (with a, b, c:
  round 0 a b c, round 1 b c a, round 2 c a b, ...), so each leads a round equally often and
  the one after each system stays the same. In its turn a system is called `repeats` times
  back to back (one count for all, or {name: count}, 1 for a name not in it), each call
  timed alone; a call returning `Measured` is recorded with its seconds.
  Returns {name: [seconds of each timed call, in call order]}, in the order of `systems`.
  """
  names = list(systems)
  counts = {n: repeats.get(n, 1) if isinstance(repeats, Mapping) else repeats for n in names}
  for _ in range(warmup):
    for name in names:
      systems[name]()
  times: Dict[str, List[float]] = {name: [] for name in names}
  for r in range(rounds):
    shift = r % len(names) if names else 0
    for name in names[shift:] + names[:shift]:
      for _ in range(counts[name]):
        result, seconds = time_call(systems[name])
        times[name].append(result.seconds if isinstance(result, Measured) else seconds)
  return times


def median_time(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> Dict[str, float]:
  """`summarize` of `repeats` timed calls of `fn` after `warmup` untimed ones (`fn` must
  block until its work is done)."""
  return summarize(interleave({'fn': fn}, repeats, warmup)['fn'])


def summaries(times: Mapping[str, List[float]]) -> Dict[str, Dict[str, float]]:
  """`summarize` of each system's times ({name: [seconds]}, as `interleave` returns)."""
  return {name: summarize(ts) for name, ts in times.items()}


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
  """a / b, or None when either is missing or b is 0."""
  if a is None or b is None or b == 0:
    return None
  return a / b


def speedups(times: Mapping[str, List[float]], reference: str) -> Dict[str, Optional[float]]:
  """{name: median seconds of `reference` / median seconds of name}: how many times faster
  than the reference each system is (> 1 faster; the reference itself 1.0)."""
  ref = statistics.median(times[reference])
  return {name: ratio(ref, statistics.median(ts)) for name, ts in times.items()}


def _cpu_model() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor()


def _memory() -> Dict[str, Optional[int]]:
  """Total and available bytes (/proc/meminfo on Linux; the total from sysconf elsewhere)."""
  info = {}
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        key, _, value = line.partition(':')
        if key in ('MemTotal', 'MemAvailable'):
          info[key] = int(value.split()[0]) * 1024
  except OSError:
    pass
  if 'MemTotal' not in info and hasattr(os, 'sysconf'):
    try:
      info['MemTotal'] = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
    except (ValueError, OSError):
      pass
  return {'total_bytes': info.get('MemTotal'), 'available_bytes': info.get('MemAvailable')}


def _jax_devices() -> Optional[Dict[str, Any]]:
  """The default backend's devices, if the benchmark has imported jax and started its
  backends; None otherwise (starting them would change the process being described: seconds
  and memory, and a TPU or GPU runtime's messages, in a benchmark that does not use jax)."""
  jax = sys.modules.get('jax')
  if jax is None or not hasattr(jax, 'devices'):
    return None
  try:
    from jax._src import xla_bridge  # pylint: disable=import-outside-toplevel
    started = getattr(xla_bridge, 'backends_are_initialized', lambda: True)()
  except ImportError:  # a jax without it: ask for the devices anyway
    started = True
  if not started:
    return None
  try:
    devices = jax.devices()
  except Exception as e:  # noqa: BLE001 - a record says why instead of failing the run
    return {'error': f'{type(e).__name__}: {e}'.splitlines()[0][:200]}
  return {'platform': devices[0].platform, 'kind': devices[0].device_kind,
          'count': len(devices)}


def machine() -> Dict[str, Any]:
  """This machine and process as a JSON-able dict: CPU model, cores (all, and those this
  process may run on), memory, platform, python and the versions of the LIBRARIES imported
  so far, jax's devices (if jax has started its backends), the ENV_VARS that are set, and
  the load average when this module was imported (the start of the benchmark)."""
  try:
    usable = len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    usable = os.cpu_count()
  versions = {'python': platform.python_version()}
  for name in LIBRARIES:
    if name in sys.modules:
      versions[name] = getattr(sys.modules[name], '__version__', '?')
  return {'cpu_model': _cpu_model(), 'cpu_count': os.cpu_count(), 'cpu_usable': usable,
          'memory': _memory(), 'platform': platform.platform(), 'arch': platform.machine(),
          'versions': versions, 'jax_devices': _jax_devices(),
          'env': {k: os.environ[k] for k in ENV_VARS if k in os.environ},
          'load_average_at_start': _LOAD_AT_START}


def start_jax() -> None:
  """Starts jax's backends as main.py does (`t2t_jax.cli.start_backends`): on a machine with
  libtpu installed but no TPU (requirements-dev.txt installs it for --mode=plan), libtpu's
  start-up warnings go to the debug log instead of into the benchmark's output. Call it after
  parsing the arguments (so --help starts nothing) and before anything asks jax for devices."""
  from t2t_jax import cli  # pylint: disable=import-outside-toplevel
  cli.start_backends()


def add_out_argument(parser):
  """The --out option every benchmark takes (where its Emitter appends), refused at once in
  one line where a file cannot be written (`scripts.unwritable`), not after the measuring."""
  from benchmarks.shared import scripts  # pylint: disable=import-outside-toplevel
  parser.add_argument('--out', default=None, type=scripts.writable_file,
                      help='append the JSON lines to this file')
  return parser


class Emitter:
  """Writes records: `emit(record)` prints it as one JSON line (flushed) and appends the line
  to `path` (if given), after adding, unless the record has them, `date` (`timestamp()`),
  `machine` (`machine()`, as of this record) and `load_average` (when written). Values JSON
  cannot hold are written as floats if they convert, else as strings. Returns the record
  with the added fields."""

  def __init__(self, path: Optional[str]):
    self.path = path
    if path:
      os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

  def __call__(self, record: Dict[str, Any]) -> Dict[str, Any]:
    record = dict(record)
    record.setdefault('date', timestamp())
    record.setdefault('machine', machine())
    record.setdefault('load_average', load_average())
    line = json.dumps(record, default=_json_default)
    print(line, flush=True)
    if self.path:
      with open(self.path, 'a') as f:
        f.write(line + '\n')
    return record


def _json_default(x):
  try:
    return float(x)
  except (TypeError, ValueError):
    return str(x)


if __name__ == '__main__':
  Emitter(None)({'name': 'machine'})
