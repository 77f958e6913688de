"""paths: atomic writes, appends and moves, local and on the offline GCS emulator."""

import os
import stat

import pytest
from etils import epath

from t2t_jax.storage import paths


def test_is_local_and_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert paths.is_local('run') and not paths.is_local('gs://b/run')
  assert paths.absolute('run') == os.path.join(str(tmp_path), 'run')
  assert paths.absolute('gs://b/run/') == 'gs://b/run'  # never os.path.abspath'd


def test_local_write_keeps_the_umask_mode_and_refuses_existing(tmp_path):
  path = str(tmp_path / 'sub' / 'out.txt')
  paths.write_atomic(path, b'one\n')
  umask = os.umask(0o022)
  os.umask(umask)
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
  with pytest.raises(FileExistsError, match=f'^{path} already exists'):
    paths.write_atomic(path, b'two\n')
  paths.write_atomic(path, b'three\n', overwrite=True)
  assert open(path, 'rb').read() == b'three\n'
  assert os.listdir(tmp_path / 'sub') == ['out.txt']  # no temporary file left


def test_remote_write_refuses_existing_and_overwrites_when_asked(gcs_dir):
  path = f'{gcs_dir}/out.txt'
  paths.write_atomic(path, b'one\n')
  assert epath.Path(path).read_bytes() == b'one\n'
  with pytest.raises(FileExistsError, match=f'^{path} already exists'):
    paths.write_atomic(path, b'two\n')
  assert paths.read_bytes(path) == b'one\n'
  paths.write_atomic(path, b'three\n', overwrite=True)
  assert paths.read_bytes(path) == b'three\n'


@pytest.mark.parametrize('where', ['local', 'remote'])
def test_append_file_keeps_what_was_there(where, tmp_path, request):
  folder = str(tmp_path) if where == 'local' else request.getfixturevalue('gcs_dir')
  path = f'{folder}/log.jsonl'
  epath.Path(path).write_text('old\n')
  log = paths.AppendFile(path)
  log.write('a\n')
  assert paths.read_bytes(path) == b'old\na\n'  # readable complete after each write
  log.write('b\n')
  log.close()
  assert paths.read_bytes(path) == b'old\na\nb\n'


@pytest.mark.parametrize('where', ['local', 'remote'])
def test_append_file_never_continues_an_unterminated_last_line(where, tmp_path, request):
  folder = str(tmp_path) if where == 'local' else request.getfixturevalue('gcs_dir')
  whole = lambda line: line.endswith('}')
  for old, kept, torn in [('{"a": 1}\n{"b": 2', '{"a": 1}\n', '{"b": 2'),  # cut off
                          ('{"a": 1}\n{"b": 2}', '{"a": 1}\n{"b": 2}\n', None),  # ended
                          ('{"b": 2', '', '{"b": 2'),
                          ('{"a": 1}\n', '{"a": 1}\n', None)]:
    path = f'{folder}/log{len(old)}.jsonl'
    epath.Path(path).write_text(old)
    log = paths.AppendFile(path, whole)
    assert log.torn == torn
    log.write('{"c": 3}\n')
    log.close()
    assert paths.read_bytes(path).decode() == kept + '{"c": 3}\n'
  path = f'{folder}/plain.txt'
  epath.Path(path).write_text('kept\nno newline')
  log = paths.AppendFile(path)  # without a judge, nothing is cut
  log.write('next\n')
  log.close()
  assert (log.torn, paths.read_bytes(path)) == (None, b'kept\nno newline\nnext\n')


def test_remote_move_of_a_folder(gcs_dir):
  for name in ('state/a', 'state/b', 'config'):
    epath.Path(f'{gcs_dir}/ckpt/7/{name}').write_text(name)
  paths.move(f'{gcs_dir}/ckpt/7', f'{gcs_dir}/aside/7-1')
  paths.forget(f'{gcs_dir}/ckpt/7')
  assert not epath.Path(f'{gcs_dir}/ckpt/7').exists()
  assert epath.Path(f'{gcs_dir}/aside/7-1/state/b').read_text() == 'state/b'
  assert epath.Path(f'{gcs_dir}/aside/7-1/config').read_text() == 'config'


def test_read_bytes_sees_another_writer(gcs_dir):
  """A listing cached by gcsfs must not hide a file rewritten by someone else."""
  path = f'{gcs_dir}/vocab.bin'
  epath.Path(path).write_bytes(b'short')
  assert [p.name for p in epath.Path(gcs_dir).iterdir()] == ['vocab.bin']  # fills the cache
  import gcsfs
  other = gcsfs.GCSFileSystem(skip_instance_cache=True)  # another host, in effect
  with other.open(path, 'wb') as f:
    f.write(b'a longer content')
  assert paths.read_bytes(path) == b'a longer content'


def test_upload_directory_copies_every_file_or_nothing(gcs_dir, tmp_path, monkeypatch):
  local = tmp_path / 'artifact'
  (local / 'sub').mkdir(parents=True)
  for name in ('a.bin', 'b.json', 'sub/c.txt'):
    (local / name).write_text(name)
  paths.upload_directory(str(local), f'{gcs_dir}/out')
  fs = paths._filesystem(gcs_dir)
  assert sorted(fs.find(f'{gcs_dir}/out')) == [
      f'{gcs_dir[len("gs://"):]}/out/{name}' for name in ('a.bin', 'b.json', 'sub/c.txt')]
  assert epath.Path(f'{gcs_dir}/out/sub/c.txt').read_text() == 'sub/c.txt'

  put_file = fs.put_file

  def failing_on_the_second(local_path, remote_path, **kwargs):
    if local_path.endswith('b.json'):
      raise OSError('connection reset')
    return put_file(local_path, remote_path, **kwargs)

  monkeypatch.setattr(fs, 'put_file', failing_on_the_second)
  with pytest.raises(OSError, match='connection reset'):
    paths.upload_directory(str(local), f'{gcs_dir}/failed')
  paths.forget(f'{gcs_dir}/failed')
  assert not epath.Path(f'{gcs_dir}/failed').exists()  # a.bin was removed again
