"""A treebank folder as a dataset of (sentence, linearized tree) pairs (`dataset='treebank'`).

`config.treebank_dir` holds one of two layouts:

* split files: `train.trees` (required), `dev.trees` and `test.trees`, each any number of
  bracketed trees, one per line or over several lines (e.g. renamed copies of the usual
  `02-21.10way.clean`, `22.auto.clean`, `23.auto.clean`; `grammar.py` writes this layout);
* WSJ sections: the folders `02` ... `23` of LDC's Penn Treebank 3 with their `.mrg` files,
  found in `treebank_dir` itself, in `treebank_dir/wsj` or in `treebank_dir/parsed/mrg/wsj`
  (the LDC99T42 root): sections 02-21 are `train`, 22 `dev`, 23 `test`.

Every tree is cleaned (`trees.clean`) and becomes the pair {'source': its words joined by
spaces, 'target': its linearization (`linearize.to_pair`)}, in file order. All files are read
and checked before anything is written (a malformed tree stops with one line naming the file,
the tree number and its line); the pairs are then prepared like a local parallel corpus
(TFDS, array_record, under `data_dir`, per host for a remote workdir), named after a sha256
of the files, so train, eval, decode and average read them exactly as they read translation
data. The folder may be on an object store (gs://...): files are read through etils.epath. The gold tree of a pair
is `linearize.delinearize(target, source.split())`: the linearization loses nothing.
"""

import dataclasses
import os
import re
from typing import Any, Iterator, Optional

from absl import logging
from etils import epath

from t2t_jax.storage import paths
from t2t_jax.data import corpora, prepared
from t2t_jax.data.textfiles import (DataError, EncodingError, MissingDataError,
                                    not_gzip_data, read_error)
from t2t_jax.parsing import linearize, trees

SPLIT_FILE_SUFFIX = '.trees'
WSJ_SECTIONS = {'train': tuple(f'{s:02d}' for s in range(2, 22)), 'dev': ('22',),
                'test': ('23',)}
WSJ_FOLDERS = ('', 'wsj', os.path.join('parsed', 'mrg', 'wsj'))
# The "languages" of the pairs, in the builder's name and the fingerprint.
SOURCE_NAME, TARGET_NAME = 'words', 'tree'
_SECTION = re.compile(r'\d\d')


class LayoutError(MissingDataError):
  """A treebank folder in neither of the known layouts."""


@dataclasses.dataclass(frozen=True)
class TreebankSplit:
  """The files of one split, read in this order."""
  split: str
  paths: tuple[str, ...]


def _layouts_help(treebank_dir: str) -> str:
  return (f'expected {os.path.join(treebank_dir, "train" + SPLIT_FILE_SUFFIX)} (and dev'
          f'{SPLIT_FILE_SUFFIX}, test{SPLIT_FILE_SUFFIX}), or the WSJ section folders 02-23 '
          'of .mrg files in it, in its wsj/ or in its parsed/mrg/wsj/')


def _sections_dir(treebank_dir: str) -> Optional[str]:
  """The first of WSJ_FOLDERS under `treebank_dir` that holds two-digit folders."""
  for sub in WSJ_FOLDERS:
    folder = os.path.join(treebank_dir, sub).rstrip('/')
    if epath.Path(folder).is_dir() and any(_SECTION.fullmatch(p.name) and p.is_dir()
                                           for p in epath.Path(folder).iterdir()):
      return folder
  return None


def find_splits(treebank_dir: str) -> dict[str, TreebankSplit]:
  """The splits of `treebank_dir` (module doc); `train` is always there.

  Raises:
    MissingDataError: no such folder, a WSJ section without .mrg files.
    LayoutError: neither layout, or both.
  """
  if not epath.Path(treebank_dir).is_dir():
    raise MissingDataError(f'Treebank folder {treebank_dir} does not exist '
                           f'({_layouts_help(treebank_dir)}).')
  split_files = {split: os.path.join(treebank_dir, split + SPLIT_FILE_SUFFIX)
                 for split in WSJ_SECTIONS}
  for path in split_files.values():
    if epath.Path(path).is_dir():
      raise LayoutError(f'{path} is a folder; expected a file of bracketed trees.')
  sections = _sections_dir(treebank_dir)
  present = {split: path for split, path in split_files.items() if epath.Path(path).is_file()}
  if 'train' in present:
    if sections:
      raise LayoutError(f'{treebank_dir} has both {split_files["train"]} and WSJ section '
                        f'folders in {sections}; keep one layout.')
    return {split: TreebankSplit(split, (path,)) for split, path in present.items()}
  if sections is None:
    entries = sorted(p.name for p in epath.Path(treebank_dir).iterdir())
    shown = ', '.join(entries[:8]) + (f' and {len(entries) - 8} more' if len(entries) > 8
                                      else '') if entries else 'nothing'
    raise LayoutError(f'{treebank_dir}: unknown treebank layout (it has {shown}); '
                      f'{_layouts_help(treebank_dir)}.')
  splits = {}
  for split, numbers in WSJ_SECTIONS.items():
    paths = []
    for number in numbers:
      folder = os.path.join(sections, number)
      found = sorted(os.path.join(folder, p.name) for p in epath.Path(folder).iterdir()
                     if p.name.endswith('.mrg')) if epath.Path(folder).is_dir() else []
      if not found:
        raise MissingDataError(f'WSJ section {number} ({split}) has no .mrg files: expected '
                               f'{folder}/wsj_{number}NN.mrg.')
      paths += found
    splits[split] = TreebankSplit(split, tuple(paths))
  return splits


def _read_text(path: str) -> str:
  try:
    raw = epath.Path(path).read_bytes()
  except OSError as e:  # a folder in its place, an I/O error
    raise read_error(path, e, 0) from None
  not_gzip_data(path, raw[:2], 'decompress it (tree files are read as plain text)')
  try:
    return raw.decode('utf-8').lstrip('\ufeff')
  except UnicodeDecodeError as e:
    line = raw.count(b'\n', 0, e.start) + 1
    raise EncodingError(f'{path}:{line}: invalid UTF-8 ({e.reason}).') from None


def iter_trees(files: TreebankSplit) -> Iterator[trees.Tree]:
  """The cleaned trees of a split, in file order; TreeError on the first bad one."""
  for path in files.paths:
    for number, line, tree in trees.read_trees(_read_text(path), path):
      yield trees.clean(tree, path, number, line)


class TreebankCorpus(corpora.LocalParallelCorpus, skip_registration=True):
  """TFDS builder of the (sentence, linearized tree) pairs; create it with `builder`."""

  def _generate_examples(self, files: TreebankSplit) -> Iterator[tuple[int, dict[str, str]]]:
    for index, tree in enumerate(iter_trees(files)):
      sentence, target = linearize.to_pair(tree)
      yield index, {'source': sentence, 'target': target}


def treebank_dir(config: Any) -> str:
  """The absolute `config.treebank_dir`; DataError naming the key when it is empty."""
  if not config.treebank_dir:
    raise DataError("config key 'treebank_dir' is empty: dataset='treebank' reads its trees "
                    'from that folder (train.trees, dev.trees, test.trees, or the WSJ '
                    'sections 02-23 of .mrg files).')
  return paths.absolute(config.treebank_dir)


def locate(config: Any) -> tuple[str, dict[str, TreebankSplit], str, dict[str, dict[str, str]]]:
  """(treebank folder, its splits, sha256 of all its tree files, {split: {file path relative
  to the folder: sha256}}); the fingerprint of a run and its preparation share one hashing
  pass."""
  folder = treebank_dir(config)
  splits = find_splits(folder)
  combined, by_name = corpora.file_digests(folder, splits, SOURCE_NAME, TARGET_NAME)
  # file_digests keys files by their names, which are unique within a split (wsj_0201.mrg).
  files = {split: {os.path.relpath(path, folder): by_name[split][os.path.basename(path)]
                   for path in splits[split].paths} for split in by_name}
  return folder, splits, combined, files


def builder(config: Any, data_dir: str, *, process_index: int = 0, timeout_s: float = 3600.0,
            poll_s: float = 1.0, per_host: bool = False) -> TreebankCorpus:
  """The treebank of `config`, checked and prepared once under `data_dir` (module doc); with
  `per_host` (`corpora.prepared_per_host`) once per host, its processes taking turns."""
  if per_host:
    with prepared.host_lock(data_dir):
      return builder(config, data_dir)
  folder, splits, sha, _ = locate(config)
  slug = re.sub(r'[^a-z0-9]+', '_', os.path.basename(folder).lower()).strip('_') or 'treebank'
  cfg = corpora.LocalCorpusConfig(
      name=f'{slug}-{sha[:16]}', version='1.0.0', description=f'{folder} sha256 {sha}',
      corpus_dir=folder, source_lang=SOURCE_NAME, target_lang=TARGET_NAME,
      split_files=tuple(splits.values()), sha256=sha)

  def check() -> dict[str, int]:
    for split, files in splits.items():
      count = sum(1 for _ in iter_trees(files))
      if count == 0:
        raise DataError(f'Split {split!r} ({", ".join(files.paths[:3])}'
                        f'{" ..." if len(files.paths) > 3 else ""}) has no tree.')
      logging.info('Treebank %s split %s: %d trees in %d files.', folder, split, count,
                   len(files.paths))
    return {split: 0 for split in splits}  # nothing is dropped

  return prepared.prepare_once(
      lambda dropped: TreebankCorpus(config=dataclasses.replace(cfg, dropped_empty=dropped),
                                     data_dir=data_dir),
      sha, check, folder=prepared.folder_of(TreebankCorpus, cfg, data_dir),
      process_index=process_index, timeout_s=timeout_s, poll_s=poll_s)


def expected_files(config: Any, split: str) -> str:
  """The file a split of the treebank is read from, for error messages."""
  return f'{os.path.join(treebank_dir(config), split)}{SPLIT_FILE_SUFFIX}'


def load_split(config: Any, split: str, data_dir: str, *, process_index: int = 0,
               timeout_s: float = 3600.0, poll_s: float = 1.0,
               per_host: bool = False) -> corpora.ParallelTextSource:
  """One split ('train', 'dev' or 'test') as {'source': sentence, 'target': linearized}."""
  prepared = builder(config, data_dir, process_index=process_index, timeout_s=timeout_s,
                     poll_s=poll_s, per_host=per_host)
  split = 'dev' if split == 'validation' else split
  if split not in prepared.info.splits:
    raise MissingDataError(f'The treebank {treebank_dir(config)} has no {split!r} split: '
                           f'expected {expected_files(config, split)}.')
  return corpora.ParallelTextSource(prepared.as_data_source(split=split), 'source', 'target',
                                    name=f'{prepared.builder_config.name}:{split}')
