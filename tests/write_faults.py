"""`python main.py` on a read-only or full file system, simulated: a test helper.

`command('ENOSPC', PREFIX, *flags)` is the argv of `python main.py FLAGS` with the writes under
PREFIX (a path; a string prefix, so `<workdir>/checkpoints/20` also covers orbax's
`20.orbax-checkpoint-tmp`) failing the way the kernel fails them:

- EROFS (read-only): opening a file to write, creating, renaming, linking or removing an
  entry raise OSError(EROFS) at once.
- ENOSPC, EDQUOT (full disk, quota): files and folders are still created, but writing bytes
  into a file raises OSError(ENOSPC) (as on a full tmpfs: an empty file fits).

Arrays orbax writes through tensorstore (C++, out of Python's reach) into PREFIX fail too, in
orbax's background threads as on a full disk, with tensorstore's text (recorded on a full
tmpfs, orbax-checkpoint 0.12.8, tensorstore 0.1.86): "RESOURCE_EXHAUSTED: Error writing ...
No space left on device [os_error_code='28']".

Why simulated: the tests run as root, for whom `chmod -R a-w` refuses nothing, and a small
file system needs mount rights that test machines do not give.
"""

import builtins
import errno
import io
import json
import os

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def command(code: str, prefix: str, *args: str):
  """The argv of `python main.py ARGS` with writes under `prefix` failing with the errno
  named `code` ('EROFS', 'ENOSPC', 'EDQUOT')."""
  from conftest import main_command_with  # in the test process only, not in the child
  tests = os.path.dirname(os.path.abspath(__file__))
  return main_command_with(f'import sys\nsys.path.insert(0, {tests!r})\nimport write_faults\n'
                           f'write_faults.install({code!r}, {prefix!r})', *args)


def run(code: str, prefix: str, *args: str, timeout: float = 600):
  """`python main.py ARGS` run to its end with writes under `prefix` failing (`command`);
  the CompletedProcess, text captured."""
  import subprocess
  from conftest import ROOT
  return subprocess.run(command(code, prefix, *args), cwd=ROOT, capture_output=True, text=True,
                        timeout=timeout, env=dict(os.environ, JAX_PLATFORMS='cpu'))


def install(code_name: str, prefix: str) -> None:
  """Makes this process's writes under `prefix` fail with errno `code_name` (module doc)."""
  code, prefix = getattr(errno, code_name), os.path.abspath(prefix)
  refuse_now = code == errno.EROFS

  def under(path) -> bool:
    if isinstance(path, int):  # a file descriptor: the file it is open on
      try:
        path = os.readlink(f'/proc/self/fd/{path}')
      except OSError:
        return False
    if not isinstance(path, (str, bytes, os.PathLike)):
      return False
    return os.path.abspath(os.fsdecode(path)).startswith(prefix)

  def fail(path):
    raise OSError(code, os.strerror(code), os.fsdecode(path) if not isinstance(path, int)
                  else path)

  class FullFile:
    """A file open to write on a full disk: every non-empty write fails."""

    def __init__(self, f, path):
      self._f, self._path = f, path

    def write(self, data):
      if data:
        fail(self._path)
      return 0

    def writelines(self, lines):
      for line in lines:
        self.write(line)

    def __getattr__(self, name):
      return getattr(self._f, name)

    def __iter__(self):
      return iter(self._f)

    def __enter__(self):
      return self

    def __exit__(self, *exc):
      self._f.close()

  real_open = builtins.open

  def patched_open(file, mode='r', *args, **kwargs):
    if any(c in mode for c in 'wax+') and under(file):
      if refuse_now:
        fail(file)
      return FullFile(real_open(file, mode, *args, **kwargs), file)
    return real_open(file, mode, *args, **kwargs)

  builtins.open = io.open = patched_open

  def refusing(name, *, always=False, path_args=(0,)):
    real = getattr(os, name)

    def patched(*args, **kwargs):
      if (refuse_now or always) and any(under(args[i]) for i in path_args if i < len(args)):
        fail(args[path_args[0]])
      return real(*args, **kwargs)

    setattr(os, name, patched)

  for name in ('mkdir', 'remove', 'unlink', 'rmdir', 'truncate'):
    refusing(name)
  for name in ('rename', 'replace', 'link', 'symlink'):
    refusing(name, path_args=(0, 1))

  real_os_open, real_write = os.open, os.write

  def patched_os_open(path, flags, *args, **kwargs):
    if refuse_now and flags & _WRITE_FLAGS and under(path):
      fail(path)
    return real_os_open(path, flags, *args, **kwargs)

  def patched_write(fd, data):
    if data and under(fd):
      fail(fd)
    return real_write(fd, data)

  os.open, os.write = patched_os_open, patched_write

  from orbax.checkpoint._src.serialization import serialization
  real_serialize = serialization.async_serialize_from_host

  async def serialize(rslices_on_host, tensorstore_spec, *args, **kwargs):
    if prefix in json.dumps(tensorstore_spec, default=str):
      raise ValueError(f'RESOURCE_EXHAUSTED: Error writing in OCDBT database at local file '
                       f'"{prefix}": Failed to write bytes to file: {os.strerror(code)} '
                       f"[os_error_code='{code}']")
    return await real_serialize(rslices_on_host, tensorstore_spec, *args, **kwargs)

  serialization.async_serialize_from_host = serialize

