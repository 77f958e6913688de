"""Parallel corpora as TFDS datasets in the array_record format, read by random access.

Three kinds of data set:

* WMT'14 from the TFDS catalogue (`wmt14_translate/de-en`, `wmt14_translate/fr-en`),
  downloaded and prepared by TFDS's builder with our TensorFlow-free extraction (`wmt.py`:
  what is downloaded, where it goes).
* Any local parallel corpus (`config.dataset = 'local'`), prepared by the
  `LocalParallelCorpus` builder from `config.local_corpus_dir`, which holds per split either
  two aligned plain-text files `<split>.<source_lang>` / `<split>.<target_lang>` or one
  `<split>.tsv` (`source<TAB>target`), each optionally gzip-compressed (`.gz`). Splits are
  `train` (required), `dev` and `test`. An empty `local_corpus_dir` means the bundled
  KJV / Reina-Valera 1909 English-Spanish Bible (`t2t_jax/data/bible_en_es`).
* A treebank (`config.dataset = 'treebank'`): (sentence, linearized tree) pairs prepared the
  same way from `config.treebank_dir` (`t2t_jax/parsing/treebank.py`).

Each local corpus gets its own builder config, named after the folder, the language pair and
a sha256 of the folder path and the raw bytes of its data files, so two corpora never share a
preparation and an edited file leads to a fresh one instead of a stale reuse.
Files are checked (missing files, line counts, UTF-8, TSV tabs; `textfiles.py`) before
anything is written. Lines are split on b'\\n' only and stripped of surrounding whitespace;
pairs with an empty side are dropped and counted.

`load_split` returns a `ParallelTextSource`: `len()` and random access to
`{'source': str, 'target': str}`, the input of `tokenizer.py` and `pipeline.py`.
"""

import dataclasses
import functools
import hashlib
import os
import re
from typing import Any, Iterator, Optional, Sequence

from absl import logging
from etils import epath
import tensorflow_datasets as tfds

from t2t_jax.storage import layout, paths, textio
from t2t_jax.data import mixture, prepared, tasks, textfiles, wmt
from t2t_jax.data.tfds_prepare import download_and_prepare
from t2t_jax.data.textfiles import (LOCAL_SPLITS, DataError, MissingDataError, SplitFiles,
                                    check_split, discover_splits, iter_pairs)
# Re-exported: callers catch every data error from this module.
from t2t_jax.data.textfiles import EncodingError, LineCountError, TsvFormatError  # noqa: F401

BUNDLED_CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'bible_en_es')
BUNDLED_LANGUAGES = ('en', 'es')
# TFDS name -> the two languages of its Translation feature.
WMT_DATASETS = {
    'wmt14_translate/de-en': ('de', 'en'),
    'wmt14_translate/fr-en': ('fr', 'en'),
}
# Prepared from the user's own files into <workdir>/tfds (treebank: t2t_jax/parsing).
LOCAL_DATASETS = ('local', 'treebank')
SPLIT_ALIASES = {'validation': 'dev'}  # local corpora call it dev
_WMT_SPLITS = {'dev': 'validation'}     # WMT calls it validation


def _fingerprint(corpus_dir: str, splits: dict[str, SplitFiles], source_lang: str,
                 target_lang: str) -> str:
  """sha256 of the folder path, the language pair and the raw bytes of every data file."""
  return file_digests(corpus_dir, splits, source_lang, target_lang)[0]


def file_digests(corpus_dir: str, splits: dict[str, SplitFiles], source_lang: str,
                 target_lang: str) -> tuple[str, dict[str, dict[str, str]]]:
  """(the corpus sha256 of `_fingerprint`, {split: {file name: sha256 of its bytes}}).

  Every file is read once for both. The result is remembered for the files' current (path,
  size, mtime), so the data fingerprint of a run and its preparation share one hashing pass.
  """
  stats = tuple((split, path, *_size_and_mtime(path))
                for split in sorted(splits) for path in splits[split].paths)
  folder = os.path.realpath(corpus_dir) if paths.is_local(corpus_dir) else corpus_dir
  combined, files = _hash_files(folder, source_lang, target_lang, stats)
  return combined, {split: dict(names) for split, names in files.items()}  # cached: a copy


def _size_and_mtime(path: str) -> tuple[int, float]:
  """(size, modification time) of a local or remote file: what tells a changed file."""
  if paths.is_local(path):
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns
  st = epath.Path(path).stat()
  return st.length, st.mtime


@functools.lru_cache(maxsize=16)
def _hash_files(real_dir: str, source_lang: str, target_lang: str,
                stats: tuple[tuple[str, str, int, float], ...]
                ) -> tuple[str, dict[str, dict[str, str]]]:
  h = hashlib.sha256()
  h.update(f'v1\0{real_dir}\0{source_lang}\0{target_lang}\0'.encode())
  files: dict[str, dict[str, str]] = {}
  for split, path, _, _ in stats:
    one = hashlib.sha256()
    h.update(f'{split}\0{os.path.basename(path)}\0'.encode())
    with epath.Path(path).open('rb') as f:
      for chunk in iter(lambda: f.read(1 << 20), b''):  # pylint: disable=cell-var-from-loop
        h.update(chunk)
        one.update(chunk)
    h.update(b'\0')
    files.setdefault(split, {})[os.path.basename(path)] = one.hexdigest()
  return h.hexdigest(), files


class LocalDatasetInfo(tfds.core.DatasetInfo):
  """The DatasetInfo of a local builder, whose data is never on TFDS's bucket: TFDS's
  `initialize_from_bucket` makes an empty temp folder (and leaks it) for every builder made
  before its data is prepared (tensorflow-datasets 4.9.10), a few thousand in a test run."""

  def initialize_from_bucket(self) -> None:
    pass


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
  # Splits without a non-empty pair, left out of the preparation: refused when a run loads
  # one (`load_split`), not when it uses only the others.
  empty_splits: tuple[str, ...] = dataclasses.field(default=(), repr=False)


class LocalParallelCorpus(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """TFDS builder for a folder of parallel text; create it with `local_corpus_builder`."""

  VERSION = tfds.core.Version('1.0.0')

  def _info(self) -> tfds.core.DatasetInfo:
    cfg = self.builder_config
    return LocalDatasetInfo(
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
                                        dropped_empty=dict(cfg.dropped_empty or {}),
                                        empty_splits=list(cfg.empty_splits)),
    )

  def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
    del dl_manager  # nothing to download
    return {f.split: self._generate_examples(f) for f in self.builder_config.split_files}

  def _generate_examples(self, files: SplitFiles) -> Iterator[tuple[int, dict[str, str]]]:
    for lineno, src, tgt in iter_pairs(files):
      if src and tgt:
        yield lineno, {'source': src, 'target': tgt}


def local_corpus_builder(corpus_dir: str, source_lang: str, target_lang: str,
                         data_dir: str, *, process_index: int = 0, timeout_s: float = 3600.0,
                         poll_s: float = 1.0, per_host: bool = False) -> LocalParallelCorpus:
  """Checks the corpus and prepares it (array_record) under `data_dir` unless a
  preparation of exactly these files exists. Only process 0 prepares; the others check
  the files too (to fail as fast) and then wait up to `timeout_s` for the preparation.
  With `per_host` (`data_dir` is local to each host, see `prepared_per_host`) every process
  takes its host's lock and prepares unless another process of the host did already.
  Returns the prepared builder; its `info.metadata['dropped_empty']` maps split -> pairs
  dropped because a side was empty."""
  if per_host:
    with prepared.host_lock(data_dir):
      return local_corpus_builder(corpus_dir, source_lang, target_lang, data_dir)
  corpus_dir = paths.absolute(corpus_dir)
  splits = discover_splits(corpus_dir, source_lang, target_lang)
  sha = _fingerprint(corpus_dir, splits, source_lang, target_lang)
  slug = re.sub(r'[^a-z0-9]+', '_', os.path.basename(corpus_dir).lower()).strip('_') or 'corpus'
  cfg = LocalCorpusConfig(
      name=f'{slug}-{source_lang}-{target_lang}-{sha[:16]}', version='1.0.0',
      description=f'{corpus_dir} {source_lang}->{target_lang} sha256 {sha}',
      corpus_dir=corpus_dir, source_lang=source_lang, target_lang=target_lang,
      split_files=tuple(splits[s] for s in LOCAL_SPLITS if s in splits), sha256=sha)

  def check() -> tuple[dict[str, int], tuple[str, ...]]:
    dropped, empty = {}, []
    for split, files in splits.items():
      kept, dropped[split] = check_split(files)
      if kept == 0 and split == 'train':
        raise DataError(_no_pair(split, files))
      if kept == 0:  # a run that uses it is refused by split_check or load_split
        empty.append(split)
      logging.log(logging.WARNING if dropped[split] or not kept else logging.INFO,
                  'Corpus %s split %s: %d pairs, %d dropped (empty source or target).',
                  ', '.join(files.paths), split, kept, dropped[split])
    return dropped, tuple(empty)

  def make(checked):
    if checked is None:  # opening a preparation
      return LocalParallelCorpus(config=cfg, data_dir=data_dir)
    dropped, empty = checked
    return LocalParallelCorpus(config=dataclasses.replace(
        cfg, dropped_empty=dropped, empty_splits=empty,
        split_files=tuple(f for f in cfg.split_files if f.split not in empty)), data_dir=data_dir)

  return prepared.prepare_once(
      make,
      sha, check, folder=prepared.folder_of(LocalParallelCorpus, cfg, data_dir),
      process_index=process_index, timeout_s=timeout_s, poll_s=poll_s)


def _no_pair(split: str, files: SplitFiles) -> str:
  return f'Split {split!r} ({", ".join(files.paths)}) has no non-empty pair.'


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
    return self.__getitems__([index])[0]

  def __getitems__(self, indices: Sequence[int]) -> list[dict[str, str]]:
    getitems = getattr(self._ds, '__getitems__', None)
    try:
      items = getitems(list(indices)) if getitems else [self._ds[i] for i in indices]
    except RuntimeError as e:  # array_record: "Corrupted Riegeli/records file", ...
      raise DataError(f'{self.name}: its prepared records do not read ({textio.one_line(e)}); '
                      'the prepared folder is damaged: delete it to prepare it again') from None
    return [self._convert(ex) for ex in items]

  def __repr__(self) -> str:
    return f'ParallelTextSource({self.name}, {len(self)} pairs)'


def local_corpus_location(config: Any) -> tuple[str, str, str]:
  """(corpus_dir, source_lang, target_lang) of `config.dataset == 'local'`: of a mixture
  (`config.corpora`), its primary entry's, whose dev and test splits are the run's."""
  if config.get('corpora'):
    entry = mixture.primary(config)
    return entry.folder, entry.source_lang, entry.target_lang
  src, tgt = config.source_lang, config.target_lang
  if config.local_corpus_dir:
    return config.local_corpus_dir, src, tgt
  if {src, tgt} != set(BUNDLED_LANGUAGES):
    raise DataError(
        f'The bundled corpus {BUNDLED_CORPUS_DIR} is English-Spanish, but the config asks '
        f'for {src}->{tgt}; set source_lang=en and target_lang=es (or es/en), or '
        'local_corpus_dir.')
  return BUNDLED_CORPUS_DIR, src, tgt


def host_cache_dir() -> str:
  """This host's folder for prepared local corpora of remote workdirs:
  `$T2T_DATA_CACHE_DIR`, else `~/.cache/t2t_jax/tfds`."""
  return os.path.expanduser(os.environ.get('T2T_DATA_CACHE_DIR')
                            or os.path.join('~', '.cache', 't2t_jax', 'tfds'))


def prepared_per_host(config: Any, workdir: str) -> bool:
  """Whether each host prepares its own copy of the data (`default_data_dir` is local to
  the host): a local corpus, a remote workdir and no `config.data_dir`."""
  return (config.dataset in LOCAL_DATASETS and not config.data_dir
          and not paths.is_local(workdir))


def default_data_dir(config: Any, workdir: str) -> Optional[str]:
  """Where prepared data lives: `config.data_dir`, else `<workdir>/tfds` for local
  corpora and treebanks, and TFDS's own default (None) for WMT, which is large and worth
  sharing.

  A local corpus of a remote workdir (gs://...) is prepared in `host_cache_dir()` instead:
  TFDS writes array_record files with a writer for local files only. The preparation is
  keyed by the corpus's sha256 (its builder config name), so runs share it safely. A remote
  `config.data_dir` can be read (array_record reads gs://) once prepared elsewhere and copied
  there."""
  if config.data_dir:
    return config.data_dir
  if prepared_per_host(config, workdir):
    return host_cache_dir()
  return layout.of(workdir).tfds if config.dataset in LOCAL_DATASETS else None


def _wmt_source(config: Any, split: str, data_dir: Optional[str], process_index: int,
                timeout_s: float, poll_s: float) -> ParallelTextSource:
  langs = WMT_DATASETS[config.dataset]
  if config.source_lang not in langs or config.target_lang not in langs or (
      config.source_lang == config.target_lang):
    raise DataError(f'{config.dataset} has languages {langs}; the config asks for '
                    f'{config.source_lang}->{config.target_lang}.')
  make_builder = lambda: wmt.wmt_builder(config.dataset, data_dir)
  builder, damage = prepared.open_checked(make_builder)
  if damage:  # preparing again needs the network: the user decides
    where = builder.data_dir if builder else os.path.join(
        data_dir or tfds.core.constants.DATA_DIR, config.dataset)
    raise DataError(f'The prepared {config.dataset} in {where} is damaged ({damage}); delete '
                    'that folder to prepare it again (TFDS downloads it again if its '
                    'downloads folder is gone).')
  if process_index == 0:
    download_and_prepare(builder)  # a no-op when already prepared; needs the network otherwise
  else:
    builder = prepared.wait_until_prepared(make_builder, builder.data_dir, process_index, timeout_s,
                                   poll_s)
  tfds_split = _WMT_SPLITS.get(split, split)
  if tfds_split not in builder.info.splits:
    raise MissingDataError(f'{config.dataset} has no split {tfds_split!r} (has '
                           f'{sorted(builder.info.splits)}) in {builder.data_dir}.')
  return ParallelTextSource(builder.as_data_source(split=tfds_split), config.source_lang,
                            config.target_lang,
                            name=f'{config.dataset}:{tfds_split}:{config.source_lang}-'
                                 f'{config.target_lang}')


def load_split(config: Any, split: str, data_dir: Optional[str], *, process_index: int = 0,
               timeout_s: float = 3600.0, poll_s: float = 1.0,
               per_host: bool = False) -> ParallelTextSource:
  """Prepares (once) and opens one split: 'train', 'dev' or 'test'.

  Args:
    config: uses `dataset`, `source_lang`, `target_lang`, `local_corpus_dir`.
    split: 'dev' is WMT's 'validation' ('validation' is accepted for local corpora too).
    data_dir: TFDS data dir (see `default_data_dir`); None means TFDS's default.
    process_index: `jax.process_index()`. Only process 0 prepares data; the others wait
      for it (up to `timeout_s`, looking every `poll_s` seconds), so processes that share
      a file system never prepare the same folder at once.
    per_host: `data_dir` is local to each host (`prepared_per_host`): see
      `local_corpus_builder`.

  Returns:
    A random-access source of `{'source': str, 'target': str}` with `len()`.
  """
  if config.dataset in WMT_DATASETS:
    return _wmt_source(config, split, data_dir, process_index, timeout_s, poll_s)
  if config.dataset not in LOCAL_DATASETS:
    raise DataError(f'Unknown dataset {config.dataset!r}; expected one of '
                    f'{sorted(WMT_DATASETS)}, "local" or "treebank".')
  if not data_dir:
    raise DataError('A local corpus needs a data_dir to prepare into '
                    '(see corpora.default_data_dir).')
  task = tasks.get(config.dataset)  # a treebank: t2t_jax/parsing/task.py
  if task is not None:
    return task.load_split(config, split, data_dir, process_index=process_index,
                           timeout_s=timeout_s, poll_s=poll_s, per_host=per_host)
  if config.get('corpora'):  # each entry read as a local corpus of its own, by this function
    return mixture.load_split(config, split, data_dir, load_split, process_index=process_index,
                              timeout_s=timeout_s, poll_s=poll_s, per_host=per_host)
  corpus_dir, src, tgt = local_corpus_location(config)
  builder = local_corpus_builder(corpus_dir, src, tgt, data_dir, process_index=process_index,
                                 timeout_s=timeout_s, poll_s=poll_s, per_host=per_host)
  local_split = SPLIT_ALIASES.get(split, split)
  if local_split in (builder.info.metadata or {}).get('empty_splits', ()):
    raise DataError(_no_pair(local_split, textfiles.find_split_files(corpus_dir, local_split,
                                                                     src, tgt)))
  if local_split not in builder.info.splits:
    raise MissingDataError(f'No {local_split!r} split: expected '
                           f'{textfiles.expected_paths(corpus_dir, local_split, src, tgt)}.')
  dropped = builder.info.metadata.get('dropped_empty', {}).get(local_split, 0)
  return ParallelTextSource(builder.as_data_source(split=local_split), 'source', 'target',
                            name=f'{builder.builder_config.name}:{local_split}',
                            num_dropped_empty=int(dropped))
