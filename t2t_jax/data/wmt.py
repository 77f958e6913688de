"""WMT'14 (`wmt14_translate/de-en`, `wmt14_translate/fr-en`) prepared without TensorFlow.

TFDS's own `wmt14_translate` builder downloads its archives with `requests` but extracts
them through `tf.io.gfile`, so without TensorFlow its preparation stops at the first
archive ("No module named 'tensorflow'"). `Wmt14Translate` here is a thin subclass of it:
the same name, configs, version, URLs, checksum verification (TFDS's registered sizes and
sha256), parsers and examples. Only the extraction is ours: Python's `tarfile` reads each
downloaded archive once, in order, and writes out just the member files the language pair
uses (`extract_members`), e.g. Europarl v7's de-en files and not its cs, es and fr ones.

What `de-en` downloads (~1.7 GB, into `<data_dir>/downloads/wmt14_translate/`):
  train       europarl_v7 (training-parallel-europarl-v7.tgz, 658 MB), commoncrawl
              (training-parallel-commoncrawl.tgz, 918 MB), newscommentary_v9
              (training-parallel-nc-v9.tgz, 80 MB): aligned plain-text files
  validation  newstest2013 (dev.tgz, 39 MB): aligned plain-text files
  test        newstest2014 (the same dev.tgz): SGML, `newstest2014-deen-{src.de,ref.en}.sgm`
`fr-en` also downloads multiun (training-parallel-un.tgz, 2.4 GB) and gigafren
(training-giga-fren.tar, 2.6 GB; gzip files inside), ~6.7 GB in all. The extracted files go
to `<data_dir>/downloads/extracted/MEMBERS.<archive>/`.

A failed download (no network, an HTTP error, a file unlike the one TFDS recorded) is a
one-line DataError naming the URL; TFDS retries a refused connection 10 times first
(minutes).

The prepared folder is `<data_dir>/wmt14_translate/<pair>/1.0.0`, where TFDS's builder
(with TensorFlow) writes the same examples under the same keys: either preparation is
reused by the other.
"""

import itertools
import os
import posixpath
import shutil
import tarfile
import uuid
from typing import Any, Iterable

from etils import epath
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import download_manager as tfds_download_manager
from tensorflow_datasets.core.download import util as tfds_download_util
from tensorflow_datasets.translate import wmt as tfds_wmt
from tensorflow_datasets.translate import wmt14 as tfds_wmt14

from t2t_jax.data.textfiles import DataError

# Dataset name -> TFDS builder config; the pairs whose sources this module can extract.
CONFIGS = {'wmt14_translate/de-en': 'de-en', 'wmt14_translate/fr-en': 'fr-en'}
# What a failed download raises: requests' errors are OSErrors, an HTTP status other than
# 200 a DownloadError, a file unlike the one TFDS recorded a NonMatchingChecksumError.
_DOWNLOAD_ERRORS = (OSError, tfds_download_util.DownloadError,
                    tfds_download_manager.NonMatchingChecksumError)


def extract_members(archive: epath.PathLike, members: Iterable[str],
                    out_dir: epath.PathLike) -> epath.Path:
  """Writes the named member files of a tar archive (any compression) to
  `out_dir/<member path>` in one sequential pass; returns `out_dir`.

  Members already in `out_dir` are not extracted again (each file is written under a
  temporary name and renamed, so one that exists is complete). A member missing from the
  archive raises DataError naming the archive.
  """
  archive, out_dir = epath.Path(archive), epath.Path(out_dir)
  missing = {posixpath.normpath(m) for m in members if not (out_dir / m).exists()}
  if not missing:
    return out_dir
  try:
    with archive.open('rb') as f, tarfile.open(fileobj=f, mode='r|*') as tar:
      for info in tar:
        name = posixpath.normpath(info.name)
        if name not in missing or not info.isfile():
          continue
        dest = out_dir / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f'{dest.name}.incomplete.{uuid.uuid4().hex}'
        with tar.extractfile(info) as src, tmp.open('wb') as dst:
          shutil.copyfileobj(src, dst, 1 << 20)
        tmp.rename(dest)
        missing.discard(name)
        if not missing:
          break
  except (tarfile.TarError, EOFError, OSError) as e:
    raise DataError(f'Cannot read the archive {archive}: {e}; delete it to download it '
                    'again.') from e
  if missing:
    raise DataError(f'The archive {archive} has no {", ".join(sorted(missing))}; delete it to '
                    'download it again.')
  return out_dir


class Wmt14Translate(tfds_wmt14.Wmt14Translate, skip_registration=True):
  """`wmt14_translate` for the language pairs of `CONFIGS`, extracting without TensorFlow.

  Everything but `_split_generators` is TFDS's; examples are `{lang: str}` dicts of the
  `language_pair` languages (TFDS's `Translation` feature), pairs with an empty side dropped.
  """

  name = 'wmt14_translate'
  BUILDER_CONFIGS = [c for c in tfds_wmt14.Wmt14Translate.BUILDER_CONFIGS
                     if c.name in CONFIGS.values()]

  def _archives(self) -> dict[str, set[str]]:
    """URL -> the member files of that archive the splits read."""
    source, _ = self.builder_config.language_pair
    wanted = {}
    # Every sub-dataset of these pairs is one archive of named files (no manual download).
    for ss_name in itertools.chain.from_iterable(self.subsets.values()):
      ds = tfds_wmt.DATASET_MAP[ss_name]
      [url] = ds.get_url(source)
      wanted.setdefault(url, set()).update(ds.get_path(source))
    return wanted

  def _split_generators(self, dl_manager: Any) -> list[Any]:
    source, _ = self.builder_config.language_pair
    extracted = {}
    # One URL at a time: statmt.org answers parallel downloads with 503 (as TFDS notes).
    for url, members in sorted(self._archives().items()):
      try:
        archive = dl_manager.download(url)
      except _DOWNLOAD_ERRORS as e:
        detail = ' '.join(str(e).split())  # TFDS's checksum message spans lines
        raise DataError(
            f'Downloading {url} into {dl_manager.download_dir} failed: {detail} (preparing '
            f'{self.name}/{self.builder_config.name} needs the network once; a data_dir '
            'where it is prepared needs none).') from e
      extracted[url] = os.fspath(extract_members(
          archive, members, dl_manager.download_dir / 'extracted' / f'MEMBERS.{archive.name}'))
    extraction_map = {
        ss_name: [extracted[tfds_wmt.DATASET_MAP[ss_name].get_url(source)[0]]]
        for ss_name in itertools.chain.from_iterable(self.subsets.values())}
    return [tfds.core.SplitGenerator(name=split, gen_kwargs={
                'split_subsets': split_subsets, 'extraction_map': extraction_map})
            for split, split_subsets in self.subsets.items()]


def wmt_builder(dataset: str, data_dir: str | None) -> Wmt14Translate:
  """The builder of `dataset` (a key of `CONFIGS`) under `data_dir` (None: TFDS's default,
  ~/tensorflow_datasets); nothing is downloaded until `download_and_prepare()`."""
  return Wmt14Translate(config=CONFIGS[dataset], data_dir=data_dir or None)
