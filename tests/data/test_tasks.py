"""Task lookup (t2t_jax/data/tasks.py): a task that ships with t2t_jax is found by every caller,
whatever the program imported before, without t2t_jax.data importing its package."""

import os
import subprocess
import sys

from conftest import ROOT

_LOOKUP = '''
import sys
from t2t_jax.data import tasks
assert 't2t_jax.parsing' not in sys.modules  # nothing imported it yet
assert tasks.get('local') is None and 't2t_jax.parsing' not in sys.modules  # translation
task = tasks.get('treebank')
from t2t_jax.parsing import task as parsing_task
assert task is parsing_task.TREEBANK, task
assert tasks.get('treebank') is task
print('ok')
'''


def test_a_builtin_task_is_imported_when_looked_up(tmp_path):
  # A fresh process: in this one, some other test has imported t2t_jax.parsing already.
  result = subprocess.run([sys.executable, '-c', _LOOKUP], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, 'PYTHONPATH': ROOT}, timeout=120)
  assert result.returncode == 0 and result.stdout.split() == ['ok'], result.stderr[-3000:]


def test_a_registered_task_is_found_and_other_datasets_are_translation(monkeypatch):
  from t2t_jax.data import tasks  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(tasks, '_TASKS', {})
  mine = tasks.Task(*[lambda *args, **kwargs: None] * 7)
  tasks.register('my_task', mine)
  assert tasks.get('my_task') is mine
  assert tasks.get('wmt14_translate/de-en') is None and tasks.get('local') is None
