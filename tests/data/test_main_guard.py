"""A script that calls the library at its top level, without a main guard, while the token
store is encoded in spawned processes: each of them imports the script again, and used to
wait for ever on the lock its parent holds (the parent waiting for them). It must stop at once
with a line that says to add the guard; the same script with the guard builds the store.

The scripts run as real subprocesses with the parallel threshold lowered inside them, in a
session of their own that is killed whole if it hangs (a regression fails, it does not hang).
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = '''
import sys
from t2t_jax.data import token_store

class Source(list):
  name = 'eight-pairs'

class Chars:
  fingerprint, vocab_size = 'chars', 300
  def encode_batch(self, texts):
    return [[ord(c) % 200 + 2 for c in text] for text in texts]

def build():
  token_store.PARALLEL_MIN_PAIRS = 1  # encoded in spawned processes, 2 pairs a chunk
  token_store.CHUNK_PAIRS = 2
  pairs = Source({'source': f'a{i}', 'target': f'b{i}'} for i in range(8))
  store = token_store.load_or_build(pairs, Chars(), sys.argv[1], num_workers=2)
  print('built', len(store), store.ids('target', 7).tolist())
'''


def _run(script, cache):
  process = subprocess.Popen([sys.executable, script, cache], cwd=os.path.dirname(script),
                             env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    out, err = process.communicate(timeout=120)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)  # the script and the processes it started
    process.communicate()
    pytest.fail(f'{script} hung: its encoding processes wait for the lock its parent holds')
  return process.returncode, out, err


@pytest.mark.parametrize('guarded', [False, True], ids=['no-main-guard', 'main-guard'])
def test_a_script_without_a_main_guard_stops_at_once_instead_of_hanging(tmp_path, guarded):
  script = tmp_path / 'script.py'
  ending = "if __name__ == '__main__':\n  build()\n" if guarded else 'build()\n'
  script.write_text(textwrap.dedent(SCRIPT) + ending)
  code, out, err = _run(str(script), str(tmp_path / 'cache'))
  if guarded:
    assert code == 0 and out == f'built 8 {[ord(c) % 200 + 2 for c in "b7"]}\n', err
    return
  assert code == 1 and 'built' not in out
  told = (f"error: {script} calls t2t_jax at its top level, so every process that "
          'multiprocessing starts for it (the token store is encoded in several) runs it '
          "again: put its calls under if __name__ == '__main__':")
  lines = err.splitlines()
  assert told in lines and 'Traceback' not in err.split(told)[0], err  # each child: one line
  assert lines[-1].startswith('t2t_jax.data.token_store.TokenStoreError: The processes '
                              'encoding the token store ') and lines[-1].endswith(
      f"stopped before they finished: each runs {script} again, so its calls of t2t_jax "
      "belong under if __name__ == '__main__':; or one was killed (out of memory?). The "
      'chunks encoded so far are kept.'), err
