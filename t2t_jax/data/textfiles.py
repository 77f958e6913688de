"""Local parallel text files: finding a corpus folder's splits, reading and checking them.

Per split, `<split>.<source_lang>` / `<split>.<target_lang>` (two aligned files) or one
`<split>.tsv` (`source<TAB>target`), each optionally gzip-compressed (`.gz`). Every error
names the file, and the line where there is one. `corpora.py` builds TFDS datasets on top.
The folder may be local or remote (gs://...): files are read through etils.epath.
"""

import dataclasses
import gzip
import itertools
import os
import zlib
from typing import Iterator, Optional

from etils import epath

from t2t_jax.config import SPLITS as LOCAL_SPLITS


class DataError(ValueError):
  """Bad or missing corpus data; the message names the file (and line)."""


class MissingDataError(DataError):
  """Expected data files (or a split) do not exist."""


class LineCountError(DataError):
  """Aligned source and target files have different numbers of lines."""


class EncodingError(DataError):
  """A line is not valid UTF-8."""


class TsvFormatError(DataError):
  """A TSV line does not have exactly one tab."""


@dataclasses.dataclass(frozen=True)
class SplitFiles:
  """The files of one split: two aligned files, or one TSV (`target_path` None)."""
  split: str
  source_path: str
  target_path: Optional[str] = None

  @property
  def paths(self) -> tuple[str, ...]:
    return tuple(p for p in (self.source_path, self.target_path) if p)


def _existing(path: str) -> Optional[str]:
  """`path` or `path.gz`, whichever exists (error if both: ambiguous, or a folder)."""
  for p in (path, path + '.gz'):
    if epath.Path(p).is_dir():
      raise DataError(f'{p} is a folder; expected a corpus file (UTF-8 text, one sentence '
                      'or tab-separated pair per line, optionally .gz)')
  found = [p for p in (path, path + '.gz') if epath.Path(p).is_file()]
  if len(found) > 1:
    raise DataError(f'Both {found[0]} and {found[1]} exist; keep only one of them.')
  return found[0] if found else None


def find_split_files(corpus_dir: str, split: str, source_lang: str,
                     target_lang: str) -> Optional[SplitFiles]:
  """The files of `split` in `corpus_dir`, or None when the split has no file at all.

  Raises MissingDataError when only one of the two aligned files exists, and DataError when
  both the aligned files and a TSV exist (it is not clear which one is meant).
  """
  base = os.path.join(corpus_dir, split)
  src, tgt = _existing(f'{base}.{source_lang}'), _existing(f'{base}.{target_lang}')
  tsv = _existing(f'{base}.tsv')
  if (src or tgt) and tsv:
    raise DataError(f'Split {split!r} of {corpus_dir} has both aligned files '
                    f'({src or tgt}) and a TSV ({tsv}); keep one format.')
  if tsv:
    return SplitFiles(split, tsv)
  if src and tgt:
    return SplitFiles(split, src, tgt)
  if src or tgt:
    missing = f'{base}.{target_lang}' if src else f'{base}.{source_lang}'
    raise MissingDataError(f'{src or tgt} exists but its counterpart {missing}[.gz] '
                           'does not.')
  return None


def expected_paths(corpus_dir: str, split: str, source_lang: str, target_lang: str) -> str:
  """The files a split may consist of, for error messages."""
  base = os.path.join(corpus_dir, split)
  return (f'{base}.{source_lang}[.gz] and {base}.{target_lang}[.gz], or {base}.tsv[.gz]')


def discover_splits(corpus_dir: str, source_lang: str,
                    target_lang: str) -> dict[str, SplitFiles]:
  """All splits present in `corpus_dir`; `train` is required."""
  if not epath.Path(corpus_dir).is_dir():
    raise MissingDataError(f'Corpus folder {corpus_dir} does not exist (expected '
                           f'{expected_paths(corpus_dir, "train", source_lang, target_lang)}).')
  if source_lang == target_lang:
    raise DataError(f'source_lang and target_lang are both {source_lang!r}.')
  splits = {}
  for split in LOCAL_SPLITS:
    files = find_split_files(corpus_dir, split, source_lang, target_lang)
    if files is not None:
      splits[split] = files
  if 'train' not in splits:
    raise MissingDataError('No training data: expected '
                           f'{expected_paths(corpus_dir, "train", source_lang, target_lang)}.')
  return splits


GZIP_MAGIC = b'\x1f\x8b'  # the first two bytes of every gzip file


class ReadError(DataError):
  """A corpus file that cannot be read to its end: a folder in its place, an I/O error, gzip
  data that is truncated or damaged, or a name that says the opposite of its compression."""


def read_error(path: str, error: BaseException, lines_read: int) -> ReadError:
  """The one-line ReadError for `error`, raised reading `path` after `lines_read` whole
  lines (what every reader of corpus files raises: plain text, .gz, TSV, treebank)."""
  where = f'{path}:{lines_read + 1}'
  if isinstance(error, IsADirectoryError):
    return ReadError(f'{path} is a folder; expected a text file.')
  if isinstance(error, gzip.BadGzipFile) and lines_read == 0 and 'Not a gzipped' in str(error):
    return ReadError(f'{path} is not gzip-compressed although its name ends in .gz; '
                     f'compress it (gzip {path[:-3]}) or remove .gz from its name.')
  if isinstance(error, EOFError):
    return ReadError(f'{where}: the gzip file ends early (it is truncated: no end-of-stream '
                     f'marker after line {lines_read}); copy or compress it again.')
  if isinstance(error, (gzip.BadGzipFile, zlib.error)):
    return ReadError(f'{where}: damaged gzip data ({error}); copy or compress the file '
                     'again.')
  if isinstance(error, OSError):
    return ReadError(f'{path}: cannot read: {error.strerror or error}.')
  raise TypeError(f'not a read error: {error!r}')


def not_gzip_data(path: str, head: bytes, what_to_do: str = '') -> None:
  """ReadError when `head` (the first bytes of `path`, a file read as plain text) is gzip;
  `what_to_do` replaces the advice to add .gz to its name."""
  if head.startswith(GZIP_MAGIC):
    raise ReadError(f'{path} is gzip-compressed data but read as plain text: '
                    f'{what_to_do or f"name it {path}.gz (or decompress it)"}.')


def _raw_lines(path: str) -> Iterator[bytes]:
  """Lines split on b'\\n' only (str.splitlines would also split on U+2028 and the like,
  which would break the alignment), without the line terminator. ReadError (one line, the
  file and line) when the file cannot be read to its end."""
  compressed, lines_read = path.endswith('.gz'), 0
  try:
    with epath.Path(path).open('rb') as raw_file:
      with (gzip.GzipFile(fileobj=raw_file) if compressed else raw_file) as f:
        for raw in f:
          if lines_read == 0 and not compressed:
            not_gzip_data(path, raw)
          lines_read += 1
          yield raw.rstrip(b'\r\n')
  except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
    raise read_error(path, e, lines_read) from None


def _decode(raw: bytes, path: str, lineno: int) -> str:
  try:
    text = raw.decode('utf-8')
  except UnicodeDecodeError as e:
    raise EncodingError(f'{path}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start} '
                        'of the line).') from None
  if lineno == 1:
    text = text.lstrip('\ufeff')  # a byte-order mark is not text
  return text


def iter_pairs(files: SplitFiles) -> Iterator[tuple[int, str, str]]:
  """Yields (1-based line number, source, target) for every line, empty sides included.

  Raises DataError subclasses naming the file and line: invalid UTF-8, a TSV line without
  exactly one tab, aligned files of different lengths (after reading both to the end, so
  the message has both counts). A blank TSV line counts as an empty pair.
  """
  if files.target_path is None:
    for lineno, raw in enumerate(_raw_lines(files.source_path), 1):
      text = _decode(raw, files.source_path, lineno)
      if not text.strip():
        yield lineno, '', ''  # a blank line: an empty pair, dropped and counted
        continue
      num_tabs = text.count('\t')
      if num_tabs != 1:
        raise TsvFormatError(f'{files.source_path}:{lineno}: expected exactly one tab '
                             f'(source<TAB>target), found {num_tabs}.')
      src, tgt = text.split('\t')
      yield lineno, src.strip(), tgt.strip()
    return
  missing = object()
  src_lines, tgt_lines = _raw_lines(files.source_path), _raw_lines(files.target_path)
  for lineno, (s, t) in enumerate(itertools.zip_longest(src_lines, tgt_lines,
                                                        fillvalue=missing), 1):
    if s is missing or t is missing:
      # Count the rest of the longer file so the message carries both counts.
      rest = sum(1 for _ in (tgt_lines if s is missing else src_lines))
      n_src = lineno - 1 if s is missing else lineno + rest
      n_tgt = lineno - 1 if t is missing else lineno + rest
      raise LineCountError(f'{files.source_path} has {n_src} lines but '
                           f'{files.target_path} has {n_tgt} lines.')
    yield (lineno, _decode(s, files.source_path, lineno).strip(),
           _decode(t, files.target_path, lineno).strip())


def check_split(files: SplitFiles) -> tuple[int, int]:
  """Reads a split once, raising DataError on bad input. Returns (pairs kept, pairs
  dropped because a side is empty)."""
  kept = dropped = 0
  for _, src, tgt in iter_pairs(files):
    if src and tgt:
      kept += 1
    else:
      dropped += 1
  return kept, dropped


def has_pair(files: SplitFiles) -> bool:
  """Whether a split holds a pair with both sides non-empty; reads up to the first one."""
  return any(src and tgt for _, src, tgt in iter_pairs(files))
