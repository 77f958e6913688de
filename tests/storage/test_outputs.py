"""`outputs.check_writable`: the folder of an `--output` is a folder and can be written."""

import errno
import os

import pytest

from t2t_jax.storage import outputs


def test_a_new_output_in_a_writable_folder_passes_and_leaves_nothing(tmp_path):
  assert outputs.check_writable(str(tmp_path / 'a' / 'b' / 'out.txt')) == str(
      tmp_path / 'a' / 'b' / 'out.txt')  # missing folders: the nearest existing one probed
  assert outputs.check_writable(str(tmp_path)) == str(tmp_path)  # an existing (empty) folder
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('below', ['x.txt', 'sub/x.txt'])
def test_an_output_under_a_file_names_the_file(tmp_path, below):
  blocker = tmp_path / 'file'
  blocker.write_text('keep me\n')
  with pytest.raises(outputs.OutputError, match=(
      f'^--output={blocker}/{below}: {blocker} is a file, not a folder; the output must go '
      'into a folder$')):
    outputs.check_writable(f'{blocker}/{below}')
  assert blocker.read_text() == 'keep me\n'


@pytest.mark.parametrize('code,reason', [
    (errno.ENOSPC, 'No space left on device; free space'),
    (errno.EROFS, 'Read-only file system; make it writable'),
    (errno.EACCES, 'Permission denied')])
def test_an_unwritable_folder_is_one_line_and_no_probe_is_left(tmp_path, monkeypatch, code,
                                                               reason):
  def refuse(fd, data):
    raise OSError(code, os.strerror(code))
  monkeypatch.setattr(os, 'write', refuse)  # the probe file is created, its bytes refused
  with pytest.raises(outputs.OutputError, match=(
      f'^--plan={tmp_path}/out.json: cannot write into {tmp_path}: {reason}$')):
    outputs.check_writable(f'{tmp_path}/out.json', flag='--plan')
  monkeypatch.undo()
  assert os.listdir(tmp_path) == []


def test_a_remote_output_is_not_probed():
  assert outputs.check_writable('gs://bucket/run/out') == 'gs://bucket/run/out'
