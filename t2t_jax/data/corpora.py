"""Parallel corpora as TFDS datasets in the array_record format, read by random access.

Two kinds of data set:

* WMT'14 from the TFDS catalogue (`wmt14_translate/de-en`, `wmt14_translate/fr-en`),
  downloaded and prepared by TFDS.
* Any local parallel corpus (`config.dataset = 'local'`), prepared by the
  `LocalParallelCorpus` builder from `config.local_corpus_dir`, which holds per split either
  two aligned plain-text files `<split>.<source_lang>` / `<split>.<target_lang>` or one
  `<split>.tsv` (`source<TAB>target`), each optionally gzip-compressed (`.gz`). Splits are
  `train` (required), `dev` and `test`. An empty `local_corpus_dir` means the bundled
  KJV / Reina-Valera 1909 English-Spanish Bible (`t2t_jax/data/bible_en_es`).

Each local corpus gets its own builder config, named after the folder, the language pair and
a sha256 of the folder path and the raw bytes of its data files, so two corpora never share a
preparation and an edited file leads to a fresh one instead of a stale reuse.
Files are checked (missing files, line counts, UTF-8, TSV tabs) before anything is written.
Lines are split on b'\\n' only and stripped of surrounding whitespace; pairs with an empty
side are dropped and counted.

`load_split` returns a `ParallelTextSource`: `len()` and random access to
`{'source': str, 'target': str}`, the input of `tokenizer.py` and `pipeline.py`.
"""

import dataclasses
import gzip
import hashlib
import itertools
import os
import re
import time
from typing import Any, Callable, Iterator, Optional, Sequence

from absl import logging
import tensorflow_datasets as tfds
# The translate builders register themselves on import; without TensorFlow the TFDS
# package does not import them, so `tfds.builder('wmt14_translate/...')` needs this.
import tensorflow_datasets.translate.wmt14  # pylint: disable=unused-import

BUNDLED_CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'bible_en_es')
BUNDLED_LANGUAGES = ('en', 'es')
# TFDS name -> the two languages of its Translation feature.
WMT_DATASETS = {
    'wmt14_translate/de-en': ('de', 'en'),
    'wmt14_translate/fr-en': ('fr', 'en'),
}
LOCAL_SPLITS = ('train', 'dev', 'test')
_SPLIT_ALIASES = {'validation': 'dev'}  # local corpora call it dev
_WMT_SPLITS = {'dev': 'validation'}     # WMT calls it validation


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
  """`path` or `path.gz`, whichever exists (error if both: ambiguous)."""
  found = [p for p in (path, path + '.gz') if os.path.isfile(p)]
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


def _expected_paths(corpus_dir: str, split: str, source_lang: str, target_lang: str) -> str:
  base = os.path.join(corpus_dir, split)
  return (f'{base}.{source_lang}[.gz] and {base}.{target_lang}[.gz], or {base}.tsv[.gz]')


def discover_splits(corpus_dir: str, source_lang: str,
                    target_lang: str) -> dict[str, SplitFiles]:
  """All splits present in `corpus_dir`; `train` is required."""
  if not os.path.isdir(corpus_dir):
    raise MissingDataError(f'Corpus folder {corpus_dir} does not exist (expected '
                           f'{_expected_paths(corpus_dir, "train", source_lang, target_lang)}).')
  if source_lang == target_lang:
    raise DataError(f'source_lang and target_lang are both {source_lang!r}.')
  splits = {}
  for split in LOCAL_SPLITS:
    files = find_split_files(corpus_dir, split, source_lang, target_lang)
    if files is not None:
      splits[split] = files
  if 'train' not in splits:
    raise MissingDataError('No training data: expected '
                           f'{_expected_paths(corpus_dir, "train", source_lang, target_lang)}.')
  return splits


def _raw_lines(path: str) -> Iterator[bytes]:
  """Lines split on b'\\n' only (str.splitlines would also split on U+2028 and the like,
  which would break the alignment), without the line terminator."""
  with (gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')) as f:
    for raw in f:
      yield raw.rstrip(b'\r\n')


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


def _fingerprint(corpus_dir: str, splits: dict[str, SplitFiles], source_lang: str,
                 target_lang: str) -> str:
  """sha256 of the folder path, the language pair and the raw bytes of every data file."""
  h = hashlib.sha256()
  h.update(f'v1\0{os.path.realpath(corpus_dir)}\0{source_lang}\0{target_lang}\0'.encode())
  for split in sorted(splits):
    for path in splits[split].paths:
      h.update(f'{split}\0{os.path.basename(path)}\0'.encode())
      with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):  # pylint: disable=cell-var-from-loop
          h.update(chunk)
      h.update(b'\0')
  return h.hexdigest()


@dataclasses.dataclass(eq=False)
class LocalCorpusConfig(tfds.core.BuilderConfig):
  """One local corpus + language pair; `sha256` identifies the file contents."""
  corpus_dir: str = ''
  source_lang: str = ''
  target_lang: str = ''
  # repr=False keeps TFDS's "Using custom data configuration" log line short.
  split_files: tuple[SplitFiles, ...] = dataclasses.field(default=(), repr=False)
  sha256: str = dataclasses.field(default='', repr=False)
  # Pairs dropped per split (empty side), filled in by the check before preparing.
  dropped_empty: Optional[dict[str, int]] = dataclasses.field(default=None, repr=False)


class LocalParallelCorpus(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """TFDS builder for a folder of parallel text; create it with `local_corpus_builder`."""

  VERSION = tfds.core.Version('1.0.0')

  def _info(self) -> tfds.core.DatasetInfo:
    cfg = self.builder_config
    return tfds.core.DatasetInfo(
        builder=self,
        description=(f'Parallel text {cfg.source_lang}->{cfg.target_lang} from '
                     f'{cfg.corpus_dir} (sha256 {cfg.sha256}).'),
        features=tfds.features.FeaturesDict({
            'source': tfds.features.Text(),
            'target': tfds.features.Text(),
        }),
        supervised_keys=('source', 'target'),
        # Keep file order: dev/test references are compared line by line.
        disable_shuffling=True,
        metadata=tfds.core.MetadataDict(sha256=cfg.sha256,
                                        dropped_empty=dict(cfg.dropped_empty or {})),
    )

  def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
    del dl_manager  # nothing to download
    return {f.split: self._generate_examples(f) for f in self.builder_config.split_files}

  def _generate_examples(self, files: SplitFiles) -> Iterator[tuple[int, dict[str, str]]]:
    for lineno, src, tgt in iter_pairs(files):
      if src and tgt:
        yield lineno, {'source': src, 'target': tgt}


def _wait_until_prepared(builder: Any, make_builder: Callable[[], Any], process_index: int,
                         timeout_s: float, poll_s: float) -> Any:
  """Processes other than 0 wait for process 0's preparation. TFDS writes into a temp
  folder and renames it, so a folder that exists is complete."""
  deadline = time.monotonic() + timeout_s
  while not builder.is_prepared():
    if time.monotonic() > deadline:
      raise DataError(f'Process {process_index} waited {timeout_s:g} s for process 0 to '
                      f'prepare {builder.data_dir}; it did not appear.')
    time.sleep(poll_s)
  return make_builder()  # reads the info of the prepared folder


def local_corpus_builder(corpus_dir: str, source_lang: str, target_lang: str,
                         data_dir: str, *, process_index: int = 0, timeout_s: float = 3600.0,
                         poll_s: float = 1.0) -> LocalParallelCorpus:
  """Checks the corpus and prepares it (array_record) under `data_dir` unless a
  preparation of exactly these files exists. Only process 0 prepares; the others check
  the files too (to fail as fast) and then wait up to `timeout_s` for the preparation.
  Returns the prepared builder; its `info.metadata['dropped_empty']` maps split -> pairs
  dropped because a side was empty."""
  corpus_dir = os.path.abspath(corpus_dir)
  splits = discover_splits(corpus_dir, source_lang, target_lang)
  sha = _fingerprint(corpus_dir, splits, source_lang, target_lang)
  slug = re.sub(r'[^a-z0-9]+', '_', os.path.basename(corpus_dir).lower()).strip('_') or 'corpus'
  cfg = LocalCorpusConfig(
      name=f'{slug}-{source_lang}-{target_lang}-{sha[:16]}', version='1.0.0',
      description=f'{corpus_dir} {source_lang}->{target_lang} sha256 {sha}',
      corpus_dir=corpus_dir, source_lang=source_lang, target_lang=target_lang,
      split_files=tuple(splits[s] for s in LOCAL_SPLITS if s in splits), sha256=sha)
  builder = LocalParallelCorpus(config=cfg, data_dir=data_dir)
  if builder.is_prepared():
    stored = builder.info.metadata.get('sha256') if builder.info.metadata else None
    if stored != sha:
      raise DataError(f'{builder.data_dir} was prepared from other files (sha256 {stored}, '
                      f'now {sha}); delete that folder to prepare it again.')
    logging.info('Reusing the prepared corpus %s', builder.data_dir)
    return builder
  dropped = {}
  for split, files in splits.items():
    kept, dropped[split] = check_split(files)
    if kept == 0:
      raise DataError(f'Split {split!r} ({", ".join(files.paths)}) has no non-empty pair.')
    logging.log(logging.WARNING if dropped[split] else logging.INFO,
                'Corpus %s split %s: %d pairs, %d dropped (empty source or target).',
                ', '.join(files.paths), split, kept, dropped[split])
  if process_index != 0:
    return _wait_until_prepared(
        builder, lambda: LocalParallelCorpus(config=cfg, data_dir=data_dir), process_index,
        timeout_s, poll_s)
  builder = LocalParallelCorpus(config=dataclasses.replace(cfg, dropped_empty=dropped),
                                data_dir=data_dir)
  builder.download_and_prepare(file_format='array_record')
  return builder


def _to_str(value: Any) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


class ParallelTextSource:
  """Random-access view `{'source': str, 'target': str}` over a TFDS data source.

  Attributes: `name` (dataset and split), `num_dropped_empty` (pairs of this split dropped
  at preparation because a side was empty; 0 for WMT, taken as TFDS provides it).
  """

  def __init__(self, data_source: Any, source_key: str, target_key: str, *, name: str,
               num_dropped_empty: int = 0):
    self._ds = data_source
    self._keys = (source_key, target_key)
    self.name = name
    self.num_dropped_empty = num_dropped_empty

  def __len__(self) -> int:
    return len(self._ds)

  def _convert(self, ex: dict[str, Any]) -> dict[str, str]:
    return {'source': _to_str(ex[self._keys[0]]), 'target': _to_str(ex[self._keys[1]])}

  def __getitem__(self, index: int) -> dict[str, str]:
    return self._convert(self._ds[index])

  def __getitems__(self, indices: Sequence[int]) -> list[dict[str, str]]:
    getitems = getattr(self._ds, '__getitems__', None)
    items = getitems(list(indices)) if getitems else [self._ds[i] for i in indices]
    return [self._convert(ex) for ex in items]

  def __repr__(self) -> str:
    return f'ParallelTextSource({self.name}, {len(self)} pairs)'


def local_corpus_location(config: Any) -> tuple[str, str, str]:
  """(corpus_dir, source_lang, target_lang) of `config.dataset == 'local'`."""
  src, tgt = config.source_lang, config.target_lang
  if config.local_corpus_dir:
    return config.local_corpus_dir, src, tgt
  if {src, tgt} != set(BUNDLED_LANGUAGES):
    raise DataError(
        f'The bundled corpus {BUNDLED_CORPUS_DIR} is English-Spanish, but the config asks '
        f'for {src}->{tgt}; set source_lang=en and target_lang=es (or es/en), or '
        'local_corpus_dir.')
  return BUNDLED_CORPUS_DIR, src, tgt


def default_data_dir(config: Any, workdir: str) -> Optional[str]:
  """Where prepared data lives: `config.data_dir`, else `<workdir>/tfds` for local
  corpora and TFDS's own default (None) for WMT, which is large and worth sharing."""
  if config.data_dir:
    return config.data_dir
  return os.path.join(workdir, 'tfds') if config.dataset == 'local' else None


def _wmt_source(config: Any, split: str, data_dir: Optional[str], process_index: int,
                timeout_s: float, poll_s: float) -> ParallelTextSource:
  langs = WMT_DATASETS[config.dataset]
  if config.source_lang not in langs or config.target_lang not in langs or (
      config.source_lang == config.target_lang):
    raise DataError(f'{config.dataset} has languages {langs}; the config asks for '
                    f'{config.source_lang}->{config.target_lang}.')
  make_builder = lambda: tfds.builder(config.dataset, data_dir=data_dir or None)
  builder = make_builder()
  if process_index == 0:
    # A no-op when already prepared; needs the network otherwise.
    builder.download_and_prepare(file_format='array_record')
  else:
    builder = _wait_until_prepared(builder, make_builder, process_index, timeout_s, poll_s)
  tfds_split = _WMT_SPLITS.get(split, split)
  if tfds_split not in builder.info.splits:
    raise MissingDataError(f'{config.dataset} has no split {tfds_split!r} (has '
                           f'{sorted(builder.info.splits)}) in {builder.data_dir}.')
  return ParallelTextSource(builder.as_data_source(split=tfds_split), config.source_lang,
                            config.target_lang,
                            name=f'{config.dataset}:{tfds_split}:{config.source_lang}-'
                                 f'{config.target_lang}')


def load_split(config: Any, split: str, data_dir: Optional[str], *, process_index: int = 0,
               timeout_s: float = 3600.0, poll_s: float = 1.0) -> ParallelTextSource:
  """Prepares (once) and opens one split: 'train', 'dev' or 'test'.

  Args:
    config: uses `dataset`, `source_lang`, `target_lang`, `local_corpus_dir`.
    split: 'dev' is WMT's 'validation' ('validation' is accepted for local corpora too).
    data_dir: TFDS data dir (see `default_data_dir`); None means TFDS's default.
    process_index: `jax.process_index()`. Only process 0 prepares data; the others wait
      for it (up to `timeout_s`, looking every `poll_s` seconds), so processes that share
      a file system never prepare the same folder at once.

  Returns:
    A random-access source of `{'source': str, 'target': str}` with `len()`.
  """
  if config.dataset in WMT_DATASETS:
    return _wmt_source(config, split, data_dir, process_index, timeout_s, poll_s)
  if config.dataset != 'local':
    raise DataError(f'Unknown dataset {config.dataset!r}; expected one of '
                    f'{sorted(WMT_DATASETS)} or "local".')
  if not data_dir:
    raise DataError('A local corpus needs a data_dir to prepare into '
                    '(see corpora.default_data_dir).')
  corpus_dir, src, tgt = local_corpus_location(config)
  builder = local_corpus_builder(corpus_dir, src, tgt, data_dir, process_index=process_index,
                                 timeout_s=timeout_s, poll_s=poll_s)
  local_split = _SPLIT_ALIASES.get(split, split)
  if local_split not in builder.info.splits:
    raise MissingDataError(f'No {local_split!r} split: expected '
                           f'{_expected_paths(corpus_dir, local_split, src, tgt)}.')
  dropped = builder.info.metadata.get('dropped_empty', {}).get(local_split, 0)
  return ParallelTextSource(builder.as_data_source(split=local_split), 'source', 'target',
                            name=f'{builder.builder_config.name}:{local_split}',
                            num_dropped_empty=int(dropped))
