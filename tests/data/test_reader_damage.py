"""Every reader of a user's input files against a truncated, a mislabelled and an unreadable
file: a local corpus's aligned plain-text and `.gz` files, its TSV and `.tsv.gz`
(`data/textfiles.py`), a treebank's `.trees` files and WSJ `.mrg` files
(`parsing/treebank.py`). Each is read as a run reads it before anything is written (the
split's files found, then every line checked), and must end in one line naming the file: an
exception of `errors.user_errors()`, which main.py prints as `error: ...` with no traceback.

`test_every_input_format_has_rows` asks the code which file names it accepts, so a reader of
a new format (another compression, another kind of local dataset) fails it until it has rows
here. `test_a_damaged_gz_corpus_stops_main_in_one_line` runs two of the rows through main.py.
"""

import gzip
import os
import subprocess
import sys
import tempfile

import pytest

from t2t_jax import config as config_lib
from t2t_jax.data import corpora, textfiles
from t2t_jax.errors import user_errors
from t2t_jax.parsing import treebank

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Long source sides: the middle of a file falls inside a line, before its tab (a plain file
# cut exactly at a line's end, or after a TSV line's tab, is a valid shorter file).
EN = [f'In the beginning number {i} the words of a long enough english line go on.'
      for i in range(40)]
DE = [f'Am Anfang {i}.' for i in range(40)]
TREE = '( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)) )'


def _text(lines):
  return ''.join(line + '\n' for line in lines).encode()


def _wsj(text):
  """The WSJ layout: every section 02-23 holds one .mrg file."""
  return {f'wsj/{s:02d}/wsj_{s:02d}01.mrg': text for s in range(2, 24)}


def _read_local(folder):
  for files in textfiles.discover_splits(folder, 'en', 'de').values():
    textfiles.check_split(files)  # what local_corpus_builder checks before preparing


def _read_treebank(folder):
  for files in treebank.find_splits(folder).values():
    sum(1 for _ in treebank.iter_trees(files))  # what treebank.builder checks


# name: (the folder's files {relative path: bytes}, the file that is damaged, the reader)
READERS = {
    'plain': ({'train.en': _text(EN), 'train.de': _text(DE)}, 'train.en', _read_local),
    'gz': ({'train.en.gz': gzip.compress(_text(EN)), 'train.de.gz': gzip.compress(_text(DE))},
           'train.en.gz', _read_local),
    'tsv': ({'train.tsv': _text(f'{e}\t{d}' for e, d in zip(EN, DE))}, 'train.tsv',
            _read_local),
    'tsv.gz': ({'train.tsv.gz': gzip.compress(_text(f'{e}\t{d}' for e, d in zip(EN, DE)))},
               'train.tsv.gz', _read_local),
    'trees': ({'train.trees': _text([TREE] * 21)}, 'train.trees', _read_treebank),
    'mrg': (_wsj(_text([TREE] * 21)), 'wsj/02/wsj_0201.mrg', _read_treebank),
}


def _damage(path, data, how):
  if how == 'truncated':  # half the bytes: a copy or download cut short
    with open(path, 'wb') as f:
      f.write(data[:len(data) // 2])
  elif how == 'mislabelled':  # gzip data named as plain text, plain text named .gz
    with open(path, 'wb') as f:
      f.write(gzip.decompress(data) if path.endswith('.gz') else gzip.compress(data))
  else:  # unreadable: a folder in its place (permissions do not stop root)
    os.remove(path)
    os.makedirs(os.path.join(path, 'inside'))


@pytest.mark.parametrize('how', ['truncated', 'mislabelled', 'unreadable'])
@pytest.mark.parametrize('reader', sorted(READERS))
def test_a_damaged_input_file_ends_in_one_line_naming_it(tmp_path, reader, how):
  files, damaged, read = READERS[reader]
  for name, data in files.items():
    os.makedirs(os.path.dirname(tmp_path / name), exist_ok=True)
    (tmp_path / name).write_bytes(data)
  read(str(tmp_path))  # intact, it reads
  path = str(tmp_path / damaged)
  _damage(path, files[damaged], how)
  with pytest.raises(user_errors()) as e:
    read(str(tmp_path))
  message = str(e.value)
  assert '\n' not in message and path in message, message


def _accepted(root, names_of, find, extensions):
  """The extensions for which `find(folder)` finds a split in a folder holding the files
  `names_of(extension)` (each a line of text)."""
  found = set()
  for ext in extensions:
    folder = tempfile.mkdtemp(dir=root)
    for name in names_of(ext):
      os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
      with open(os.path.join(folder, name), 'w') as f:
        f.write('x\n')
    try:
      if find(folder):
        found.add(ext)
    except user_errors():
      pass
  return found


def test_every_input_format_has_rows(tmp_path):
  # The kinds of data set read from the user's own files: each has rows above.
  assert set(config_lib.CHOICES['dataset']) - set(corpora.WMT_DATASETS) == {'local',
                                                                            'treebank'}
  compressions = ('', '.gz', '.bz2', '.xz', '.zst', '.lz4', '.zip', '.gzip', '.Z', '.txt')
  local = lambda folder: textfiles.discover_splits(folder, 'en', 'de')  # noqa: E731
  formats = {'plain' + c for c in _accepted(
      tmp_path, lambda c: [f'train.en{c}', f'train.de{c}'], local, compressions)}
  formats |= {'tsv' + c for c in _accepted(
      tmp_path, lambda c: [f'train.tsv{c}'], local, compressions)}
  tree_names = ('.trees', '.tree', '.mrg', '.ptb', '.txt', '.trees.gz', '.mrg.gz', '.bz2')
  formats |= {'trees' + e for e in _accepted(
      tmp_path, lambda e: [f'train{e}'], treebank.find_splits, tree_names)}
  formats |= {'section' + e for e in _accepted(
      tmp_path, lambda e: [n.replace('.mrg', e) for n in _wsj(b'')], treebank.find_splits,
      tree_names)}
  rows = {'plain': 'plain', 'plain.gz': 'gz', 'tsv': 'tsv', 'tsv.gz': 'tsv.gz',
          'trees.trees': 'trees', 'section.mrg': 'mrg'}
  assert formats <= set(rows), f'accepted without a row in READERS: {formats - set(rows)}'
  assert {rows[f] for f in formats} == set(READERS)


@pytest.mark.parametrize('how,message', [
    ('truncated', '{path}:{line}: the gzip file ends early (it is truncated: no end-of-stream '
                  'marker after line {lines}); copy or compress it again.'),
    ('mislabelled', '{path} is not gzip-compressed although its name ends in .gz; compress it '
                    '(gzip {plain}) or remove .gz from its name.'),
], ids=['truncated', 'mislabelled'])
def test_a_damaged_gz_corpus_stops_main_in_one_line(tmp_path, how, message):
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  lines = [f'{EN[0]} {i}' for i in range(3000)]  # longer than a gzip block
  data = gzip.compress(_text(lines))
  (corpus / 'train.de.gz').write_bytes(data)
  path = str(corpus / 'train.en.gz')
  with open(path, 'wb') as f:
    f.write(data[:len(data) // 2] if how == 'truncated' else _text(lines))
  read = 0
  if how == 'truncated':
    with gzip.open(path) as f:
      try:
        for _ in f:
          read += 1
      except EOFError:
        pass
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'main.py'), f'--workdir={tmp_path}/run',
       '--config=configs/quickstart.py', f'--config.local_corpus_dir={corpus}',
       '--config.source_lang=en', '--config.target_lang=de', '--config.final_eval_split=',
       '--config.eval_every_steps=0'],
      cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True,
      timeout=300)
  assert result.returncode == 1
  expected = message.format(path=path, line=read + 1, lines=read, plain=path[:-3])
  assert result.stderr.splitlines()[-1] == f'error: {expected}', result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
