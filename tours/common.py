"""What the damage tours share (tours/files_tour.py and the tries it runs, and
tours/variants_and_tools_tries.py): the small model every try copies, running main.py and
classifying what the user sees, read-only and full mounts, damaging files, and the tries'
helpers (a main.py in a session of its own, a local corpus, the training command).
The outcome classes are files_tour.py's; the tries import this module, never each other or
the tour runner.
"""

import collections
import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.shared import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, 'main.py')


# A small model on the bundled corpus: quick to compile, so the tour takes minutes.
SMALL = ['--config.vocab_size=400', '--config.vocab_sample_sentences=1200', '--config.d_model=32',
         '--config.d_ff=64', '--config.num_heads=4', '--config.num_layers=1',
         '--config.max_len=64', '--config.max_length=32', '--config.bucket_lengths=(16,32)',
         '--config.tokens_per_batch=2048', '--config.checkpoint_every_steps=10',
         '--config.eval_every_steps=0', '--config.final_eval_split=']


def main_py(*args, stdin=None, env=None, timeout=900):
  command = [sys.executable, os.path.join(ROOT, 'main.py'), *args]
  return harness.time_call(subprocess.run, command, capture_output=True, text=True,
                           input=stdin, cwd=ROOT, timeout=timeout,
                           env=dict(os.environ, **(env or {})))


def classify(result, damaged=None, expect_output=None):
  errors = [line for line in result.stderr.splitlines() if line.startswith('error:')]
  if 'Traceback (most recent call last)' in result.stderr:
    return 'traceback'
  if result.returncode != 0:
    return 'one-line error' if len(errors) == 1 and result.stderr.rstrip().endswith(
        errors[0]) else 'other failure'
  if expect_output is not None and not expect_output(result):
    return 'wrong'
  if damaged and any(damaged in line for line in result.stderr.splitlines()
                     if 'WARNING' in line or line.startswith('W')):
    return 'warned'
  return 'ok'


@contextlib.contextmanager
def mounted(kind, source=None, size_mb=4):
  """A read-only bind mount of `source`, or a tmpfs of `size_mb`; None when mounting is
  refused."""
  point = tempfile.mkdtemp(prefix=f'tour-{kind}-')
  steps = ([['mount', '--bind', source, point], ['mount', '-o', 'remount,bind,ro', point]]
           if kind == 'ro' else
           [['mount', '-t', 'tmpfs', '-o', f'size={size_mb}m', 'tmpfs', point]])
  try:
    for step in steps:
      if subprocess.run(step, capture_output=True).returncode != 0:
        yield None
        return
    yield point
  finally:
    subprocess.run(['umount', point], capture_output=True)
    os.rmdir(point)


class Tour:

  def __init__(self, trained, scratch, out):
    self.trained, self.scratch, self.out = trained, scratch, out
    self.counts = collections.Counter()
    self.by_expected = collections.Counter()
    self.n = 0
    self.tour = time.strftime('%Y-%m-%dT%H:%M:%S')

  def copy(self):
    self.n += 1
    path = os.path.join(self.scratch, f'w{self.n}')
    shutil.copytree(self.trained, path)
    os.remove(os.path.join(path, '.t2t_jax.lock')) if os.path.exists(
        os.path.join(path, '.t2t_jax.lock')) else None
    return path

  def record(self, name, outcome, result=None, seconds=None, expected=None):
    self.counts[outcome] += 1
    self.by_expected[(expected, outcome)] += 1
    line = {'try': name, 'outcome': outcome, 'expected': expected, 'seconds': seconds,
            'stderr_tail': (result.stderr.strip().splitlines() or [''])[-1][:300]
            if result else '', 'rc': result.returncode if result else None, 'tour': self.tour}
    if result is not None and outcome != expected:
      line['stderr_last_lines'] = result.stderr.strip().splitlines()[-8:]
    print(json.dumps(line), flush=True)
    with open(self.out, 'a', encoding='utf-8') as f:
      f.write(json.dumps(line) + '\n')

  def run(self, name, args, expected, damaged=None, expect_output=None, stdin=None,
          check=None):
    """`check(result)` classifies instead of `classify` when given."""
    result, seconds = main_py(*args, stdin=stdin)
    outcome = check(result) if check else classify(result, damaged, expect_output)
    self.record(name, outcome, result, round(seconds, 1), expected)
    return result


def damage_file(path, how):
  if how == 'missing':
    (shutil.rmtree if os.path.isdir(path) else os.remove)(path)
    return
  files = [path] if os.path.isfile(path) else [
      os.path.join(d, n) for d, _, names in os.walk(path) for n in names]
  for name in files:
    with open(name, 'r+b') as f:
      data = f.read()
      if how == 'truncated':
        f.truncate(len(data) // 2)
      else:
        f.seek(len(data) // 2)
        f.write(b'\xff{junk\x00' * 4)


def fill(folder, keep=0):
  """Fills the file system of `folder`, leaving about `keep` bytes."""
  free = shutil.disk_usage(folder).free - keep
  with open(os.path.join(folder, 'filler'), 'wb') as f:
    try:
      while free > 0:
        block = min(free, 1 << 20)
        f.write(b'\0' * block)
        f.flush()
        free -= block
    except OSError:
      pass  # full


def latest_step(workdir):
  return max(int(n) for n in os.listdir(os.path.join(workdir, 'checkpoints')) if n.isdigit())


def start(*args):
  """main.py in a session of its own (a signal reaches it and what it started, as Ctrl-C
  would), its output in files."""
  err = tempfile.TemporaryFile('w+')  # pylint: disable=consider-using-with
  process = subprocess.Popen([sys.executable, MAIN, *args], stdout=subprocess.PIPE, stderr=err,
                             text=True, cwd=ROOT, start_new_session=True)
  process.err_file = err
  return process


def finish(process, timeout=600):
  """(CompletedProcess, timed out) of `start`'s process."""
  try:
    stdout, _ = process.communicate(timeout=timeout)
    hung = False
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    stdout, _ = process.communicate()
    hung = True
  process.err_file.seek(0)
  stderr = process.err_file.read()
  process.err_file.close()  # a TemporaryFile: gone once closed
  return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), hung


def wait_for(predicate, timeout=300, poll=0.05):
  clock = harness.timed().start()
  while not predicate():
    if clock.seconds > timeout:
      return False
    time.sleep(poll)
  return True


def error_line(result):
  return next((l for l in result.stderr.splitlines() if l.startswith('error:')), '')


def checked(result, says=None, not_says=None, left=None):
  """classify(), with a one-line error that must (not) say something ('misleading'
  otherwise) and paths that must not be left behind ('wrong' otherwise)."""
  outcome = classify(result)
  line = error_line(result)
  if outcome == 'one-line error' and ((says and not any(s in line for s in says)) or
                                      (not_says and not_says in line)):
    return 'misleading'
  if left and any(os.path.exists(p) for p in left):
    return 'wrong'
  return outcome


def corpus(folder, n_train=3000, n_dev=200):
  """A small local corpus of the bundled one's first lines: plain train/dev/test files."""
  os.makedirs(folder)
  bundled = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es')
  for split, n in (('train', n_train), ('dev', n_dev), ('test', n_dev)):
    for lang in ('en', 'es'):
      with gzip.open(os.path.join(bundled, f'{split}.{lang}.gz'), 'rt', encoding='utf-8') as f:
        lines = [next(f) for _ in range(n)]
      with open(os.path.join(folder, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.writelines(lines)
  return folder


def train_args(workdir, corpus_dir, steps=20, *extra):
  return ['--mode=train', f'--workdir={workdir}', *SMALL, f'--config.local_corpus_dir={corpus_dir}',
          f'--config.num_train_steps={steps}', *extra]
