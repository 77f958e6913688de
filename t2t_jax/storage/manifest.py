"""Size and crc32 of the files of a derived folder, to tell an intact copy from a damaged one.

A folder that is rebuilt when damaged (the token store, a prepared corpus; `layout.DERIVED`)
records `{file name: {'bytes': n, 'crc32': c}}` once it is complete, and checks it before every
use: a missing, truncated or garbled file then costs one warning and a rebuild, never a
traceback from deep inside a reader or, worse, silently wrong data. Reading is local (both
folders live on the host that uses them); crc32 runs at about 4 GB/s, so checking a 1.5 GB
corpus costs well under a second when the files are in the page cache.
"""

import os
import zlib
from typing import Dict, Iterable, Optional

Files = Dict[str, Dict[str, int]]


def crc32(path: str) -> int:
  """The crc32 of a file's bytes, read in 16 MiB blocks."""
  crc = 0
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 24), b''):
      crc = zlib.crc32(block, crc)
  return crc


def describe(folder: str, names: Iterable[str]) -> Files:
  """`{name: {'bytes', 'crc32'}}` of the files `names` of `folder`."""
  result = {}
  for name in names:
    path = os.path.join(folder, name)
    result[name] = {'bytes': os.path.getsize(path), 'crc32': crc32(path)}
  return result


def problem(folder: str, files: Files, crc: bool = True) -> Optional[str]:
  """What is wrong with `folder` against its recorded `files` (the first difference, e.g.
  'x has 10 bytes, not 20'), or None when every file is there with its size and crc32
  (with crc=False: its size only).

  Raises:
    KeyError, TypeError: `files` is not what `describe` returns (a garbled record).
  """
  for name, want in files.items():
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
      return f'{name} is missing'
    size = os.path.getsize(path)
    if size != want['bytes']:
      return f'{name} has {size} bytes, not {want["bytes"]}'
    if crc and crc32(path) != want['crc32']:
      return f'{name} fails its crc32 check'
  return None
