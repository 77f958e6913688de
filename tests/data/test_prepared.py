"""Tests for t2t_jax.data.prepared: a prepared corpus damaged in the least visible ways (one
byte of one array_record file, at the same size; a preparation from before manifests) is
found on the first open, moved aside with one warning and prepared again."""

import glob
import json
import logging
import os
import re

import numpy as np
import pytest

from t2t_jax.data import corpora, prepared
from test_corpora import _config, _pairs, _write

OURS = os.path.dirname(os.path.dirname(corpora.__file__)) + os.sep  # t2t_jax/
PAIRS = [('one', 'eins'), ('two', 'zwei'), ('three', 'drei'), ('four', 'vier')]


def _prepare(tmp_path):
  """(the corpus folder, data_dir, the prepared folder) of a freshly prepared train split."""
  corpus = tmp_path / 'c'
  corpus.mkdir()
  _write(corpus / 'train.en', [s for s, _ in PAIRS])
  _write(corpus / 'train.de', [t for _, t in PAIRS])
  data_dir = str(tmp_path / 'tfds')
  assert _pairs(corpora.load_split(_config(corpus), 'train', data_dir)) == PAIRS
  folders = glob.glob(os.path.join(data_dir, 'local_parallel_corpus', '*', '*'))
  assert len(folders) == 1
  return corpus, data_dir, folders[0]


def _record_file(folder):
  (path,) = glob.glob(os.path.join(folder, '*.array_record-*'))
  return path


def _reopen(corpus, data_dir, caplog):
  """The pairs read again, and the warning lines logged meanwhile."""
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    pairs = _pairs(corpora.load_split(_config(corpus), 'train', data_dir))
  return pairs, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
                 and r.pathname.startswith(OURS)]  # TFDS warns of its own custom configs


def _check_prepared_again(folder, data_dir, warnings, reason):
  """One warning naming `folder` and the regular expression `reason`; a new preparation."""
  assert len(warnings) == 1, warnings
  assert re.search(f'The prepared corpus {re.escape(folder)} is damaged \\({reason}',
                   warnings[0]), warnings[0]
  assert 'prepared again' in warnings[0]
  assert len(os.listdir(os.path.join(data_dir, 'damaged'))) == 1  # kept for the user
  assert os.path.isfile(os.path.join(folder, prepared.MANIFEST))


def test_one_byte_of_one_array_record_file_is_found_on_the_first_open(tmp_path, caplog):
  corpus, data_dir, folder = _prepare(tmp_path)
  path = _record_file(folder)
  data = bytearray(open(path, 'rb').read())
  # One byte inside the records (not the zero padding), same size: TFDS's JSON files are
  # intact, the sizes match, and only the manifest's crc32 can tell.
  at = int(np.flatnonzero(np.frombuffer(bytes(data), np.uint8))[-1]) // 2
  data[at] ^= 0x5A
  with open(path, 'r+b') as f:
    f.write(data)
  assert os.path.getsize(path) == len(data)
  pairs, warnings = _reopen(corpus, data_dir, caplog)
  assert pairs == PAIRS
  _check_prepared_again(folder, data_dir, warnings,
                        re.escape(f'{os.path.basename(path)} fails its crc32 check'))
  assert _reopen(corpus, data_dir, caplog) == (PAIRS, [])  # intact now: read without a word


@pytest.mark.parametrize('damage', ['truncated', 'missing'])
def test_a_preparation_from_before_manifests_is_checked_by_opening(tmp_path, caplog, damage):
  corpus, data_dir, folder = _prepare(tmp_path)
  manifest_path = os.path.join(folder, prepared.MANIFEST)
  # Intact, without a manifest (prepared by an older version): opened, checked and adopted.
  recorded = json.load(open(manifest_path))
  os.remove(manifest_path)
  assert _reopen(corpus, data_dir, caplog) == (PAIRS, [])
  assert json.load(open(manifest_path)) == recorded
  # Damaged, without a manifest: opening each file is the only check. TFDS's data source
  # takes its length from dataset_info.json and would read such a file's records as empty
  # examples (a truncated one) or fail at the first read (a missing one).
  os.remove(manifest_path)
  path = _record_file(folder)
  if damage == 'missing':
    os.remove(path)
  else:
    data = open(path, 'rb').read()
    with open(path, 'wb') as f:
      f.write(data[:len(data) // 2])  # past 64 KiB, less its footer
  pairs, warnings = _reopen(corpus, data_dir, caplog)
  assert pairs == PAIRS
  # A reader of a file cut before its footer holds no records, or does not open.
  _check_prepared_again(folder, data_dir, warnings, re.escape(
      f'split train: {os.path.basename(path)} ') + ('is missing' if damage == 'missing' else
      f'(holds 0 records, not {len(PAIRS)}|does not open)'))
