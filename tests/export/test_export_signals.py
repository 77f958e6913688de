"""An export never takes its output's name after SIGTERM or Ctrl-C (issue 51 c7): the
signal's KeyboardInterrupt may have been swallowed on the way (by a finalizer: jax's gc
callback), so `common.new_directory` asks `interruptible.raise_if_signalled` before its
rename, and removes a directory renamed just as the signal came.

Many deliveries at random times, against finalizers: tests/runtime/test_interruptible.py."""

import os
import signal

import pytest

from t2t_jax.export import common
from t2t_jax.runtime import interruptible


@pytest.fixture
def signals(monkeypatch):
  """This test's own signal state (no handler installed): set `.signum` to receive one."""
  state = interruptible._Signals()  # pylint: disable=protected-access
  monkeypatch.setattr(interruptible, '_state', state)
  return state


def _export(output: str) -> None:
  with common.new_directory(output) as temp:
    with open(os.path.join(temp, 'model.bin'), 'w', encoding='utf-8') as f:
      f.write('weights\n')


def test_without_a_signal_the_directory_takes_its_name(tmp_path, signals):
  del signals
  _export(str(tmp_path / 'out'))
  assert os.listdir(tmp_path) == ['out']
  assert (tmp_path / 'out' / 'model.bin').read_text() == 'weights\n'


@pytest.mark.parametrize('sig,message', [(signal.SIGTERM, '^SIGTERM$'), (signal.SIGINT, '^$')])
def test_a_signal_received_during_the_export_publishes_nothing(tmp_path, signals, sig,
                                                              message):
  signals.signum = sig  # received, its KeyboardInterrupt swallowed somewhere
  with pytest.raises(KeyboardInterrupt, match=message):
    _export(str(tmp_path / 'out'))
  assert os.listdir(tmp_path) == []  # neither the output nor the temporary directory


def test_a_directory_renamed_as_the_signal_came_is_removed(tmp_path, signals, monkeypatch):
  """The handler's KeyboardInterrupt comes after the next bytecode: right after the rename
  returned, before anything else ran."""
  del signals
  rename = os.rename

  def rename_then_interrupt(source, target):
    rename(source, target)
    raise interruptible.interrupt(signal.SIGTERM)

  monkeypatch.setattr(common.os, 'rename', rename_then_interrupt)
  with pytest.raises(KeyboardInterrupt, match='^SIGTERM$'):
    _export(str(tmp_path / 'out'))
  monkeypatch.undo()
  assert os.listdir(tmp_path) == []
