"""`python main.py ARGS` for the tests without paying the interpreter's imports each time: a
process that imports what main.py imports once, then forks one child per command (the
zygote of Android's app starts and of Chromium's renderers).

Measured on the full suite (2026-12-06, 2-core AMD EPYC, empty cache): 274 main.py children
used 1104 of the suite's 2740 CPU seconds, each at least 1.25 (the imports, ~1.3 s: jax 0.86,
ml_dtypes 0.4). A forked child starts with them done.

A child is `python main.py ARGS` in every way a test can observe: its own process, its
`sys.argv`, environment, working directory, umask, standard streams (files) and exit status; main.py
itself runs in it from the start (its flags are defined there, not here), and the interpreter
exits normally, running atexit and joining threads. What it shares with the zygote is only
what importing did, which a fresh process does identically, with one condition the client
checks (`Client.run`): the environment variables read at import time (`IMPORT_TIME`) and the
umask (`t2t_jax.storage.paths` reads it then) must be the zygote's, else the command runs as
a plain subprocess. jax's backends are never
started here (`serve` checks), so no thread of theirs is forked.

Protocol (one JSON line each way, on the pipes named by argv[1:3]): the client sends
{args, env, cwd, umask, stdin, stdout, stderr} (the last three file paths); the zygote answers
{"pid": N} once forked and {"status": exit code, negative for a signal} when it ends.
"""

import atexit
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, 'main.py')
# Variables read while importing (by jax's config, Python, the BLAS and XLA's logging): a
# request that changes one runs as a subprocess instead.
IMPORT_TIME = ('JAX_', 'PYTHON', 'TF_', 'LD_', 'OMP_', 'OPENBLAS', 'MKL_', 'TPU_', 'LIBTPU',
               'CUDA', 'T2T_TEST_XLA')


def forkable(env: dict, zygote_env: dict) -> bool:
  """Whether a command with environment `env` may run in a child of a zygote started with
  `zygote_env`: no variable read at import time differs."""
  keys = set(env) | set(zygote_env)
  return all(env.get(k) == zygote_env.get(k) for k in keys if k.startswith(IMPORT_TIME))


def _imports() -> None:
  """main.py's imports (not main.py: its flags are defined once per process, in the child)."""
  sys.path[0] = ROOT  # as `python main.py` has it: the checkout, not tests/
  # pylint: disable=import-outside-toplevel,unused-import
  from absl import app, flags, logging  # noqa: F401
  from ml_collections import config_flags  # noqa: F401
  import t2t_jax.cli, t2t_jax.config, t2t_jax.errors, t2t_jax.key_table  # noqa: F401,E401
  import t2t_jax.export.formats, t2t_jax.inference.checkpoint_choice  # noqa: F401,E401
  import t2t_jax.inference.modes, t2t_jax.inference.score_mode  # noqa: F401,E401
  import t2t_jax.inspect.attention_mode, t2t_jax.configs.quickstart  # noqa: F401,E401
  import t2t_jax.model.info, t2t_jax.plan.mode, t2t_jax.runtime.interruptible  # noqa: F401,E401
  import t2t_jax.runtime.resolution, t2t_jax.storage.workdir  # noqa: F401,E401
  import t2t_jax.training.mesh_info, t2t_jax.training.optim  # noqa: F401,E401
  import t2t_jax.training.plots, t2t_jax.training.summary, t2t_jax.training.train  # noqa: F401,E401
  from jax._src import xla_bridge
  assert not xla_bridge._backends, 'the zygote must not start a jax backend'  # pylint: disable=protected-access


def _become(request: dict) -> None:
  """In the child: the command's process state, then main.py as `__main__`."""
  os.chdir(request['cwd'])
  os.umask(request['umask'])
  os.environ.clear()
  os.environ.update(request['env'])
  for fd, path, flags in ((0, request['stdin'], os.O_RDONLY),
                          (1, request['stdout'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                          (2, request['stderr'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)
  sys.argv = [MAIN, *request['args']]
  runpy.run_path(MAIN, run_name='__main__')  # main.py ends in sys.exit: the child exits


def serve(requests_fd: int, replies_fd: int) -> None:
  """Forks a child per request until the client closes the pipe. Returns only in a child."""
  _imports()
  requests = os.fdopen(requests_fd, 'r', encoding='utf-8')
  replies = os.fdopen(replies_fd, 'w', encoding='utf-8')
  for line in requests:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      requests.close()
      replies.close()
      _become(request)
      return
    replies.write(json.dumps({'pid': pid}) + '\n')
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({'status': os.waitstatus_to_exitcode(status)}) + '\n')
    replies.flush()


def _umask() -> int:
  """This process's umask (reading it means setting it)."""
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


class Client:
  """The test process's side: `run(args, env, input, timeout)` is `subprocess.run(main_command(
  *args), capture_output=True, text=True, ...)`'s result, or None where the command must run as
  a plain subprocess (`forkable`; another thread already waiting on the zygote)."""

  def __init__(self):
    self._process = None
    self._lock = threading.Lock()
    self._broken = False  # the zygote could not start (then every command is a subprocess)

  def _start(self) -> None:
    requests_read, self._requests = os.pipe()
    self._replies, replies_write = os.pipe()
    self._env, self._umask = dict(os.environ), _umask()
    self._process = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(requests_read), str(replies_write)],
        pass_fds=(requests_read, replies_write), cwd=ROOT, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(requests_read)
    os.close(replies_write)
    self._buffer = b''
    atexit.register(self.close)

  def close(self) -> None:
    if self._process is not None and self._process.poll() is None:
      os.close(self._requests)  # the zygote's loop ends
      self._process.wait(timeout=30)

  def _reply(self, deadline: float):
    while b'\n' not in self._buffer:
      remaining = deadline - time.monotonic()
      if remaining <= 0 or not select.select([self._replies], [], [], remaining)[0]:
        return None
      chunk = os.read(self._replies, 65536)
      if not chunk:
        raise RuntimeError('the main.py zygote ended')
      self._buffer += chunk
    line, self._buffer = self._buffer.split(b'\n', 1)
    return json.loads(line)

  def run(self, args, env=None, input=None, timeout=600, cwd=ROOT):
    env = dict(os.environ if env is None else env)
    if self._broken or not self._lock.acquire(blocking=False):
      return None
    try:
      if self._process is None or self._process.poll() is not None:
        self._start()
      if not forkable(env, self._env) or _umask() != self._umask:
        return None  # (t2t_jax.storage.paths reads the umask once, at import)
      with tempfile.TemporaryDirectory(prefix='t2t_main_') as folder:
        files = {name: os.path.join(folder, name) for name in ('stdin', 'stdout', 'stderr')}
        with open(files['stdin'], 'w', encoding='utf-8') as f:
          f.write(input or '')
        deadline = time.monotonic() + timeout
        try:
          os.write(self._requests, (json.dumps(dict(args=list(args), env=env, cwd=str(cwd),
                                                    umask=self._umask, **files)) + '\n').encode())
          started = self._reply(time.monotonic() + 60)
        except (RuntimeError, OSError):  # it died importing (a new jax starting a backend?)
          started = None
        if started is None:
          self._broken = True
          return None
        pid = started['pid']
        done = self._reply(deadline)
        if done is None:  # as subprocess.run: the child killed, TimeoutExpired raised
          os.kill(pid, signal.SIGKILL)
          self._reply(time.monotonic() + 60)
        # A child killed before it opened its streams (a loaded machine) wrote nothing.
        out, err = (open(files[n], encoding='utf-8', errors='replace').read()
                    if os.path.exists(files[n]) else '' for n in ('stdout', 'stderr'))
        command = [sys.executable, MAIN, *args]
        if done is None:
          raise subprocess.TimeoutExpired(command, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(command, done['status'], out, err)
    finally:
      self._lock.release()


# One per test process; T2T_TEST_ZYGOTE=0: every command a plain `python main.py`.
_CLIENT = Client() if os.environ.get('T2T_TEST_ZYGOTE', '1') != '0' else None


def run(argv, timeout=600, env=None, input=None, cwd=ROOT):
  """`python main.py` with exactly the arguments `argv`, run in `cwd`, its output captured as
  text (`subprocess.run`'s result): forked from this process's zygote where `Client.run` can,
  else a plain subprocess."""
  if _CLIENT is not None:
    result = _CLIENT.run(argv, env=env, input=input, timeout=timeout, cwd=cwd)
    if result is not None:
      return result
  return subprocess.run([sys.executable, MAIN, *argv], cwd=cwd, capture_output=True, text=True,
                        timeout=timeout, env=env, input=input)


if __name__ == '__main__':
  serve(int(sys.argv[1]), int(sys.argv[2]))
