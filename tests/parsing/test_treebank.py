"""Tests for t2t_jax.parsing.treebank: layouts, the prepared pairs, bad input, fingerprints."""

import concurrent.futures
import os

from etils import epath
import pytest

from configs import default
from t2t_jax.data import corpora, fingerprint, split_check
from t2t_jax.parsing import linearize, treebank, trees

TRAIN = """( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat)) (. .)) )
( (S
    (NP-SBJ-1 (PRP It) )
    (VP (VBD was)
      (VP (VBN seen) (NP (-NONE- *-1)) ))
    (. .) ))
"""
DEV = '( (S (NP (NNS Dogs)) (VP (VBP bark)) (. .)) )\n'
PAIRS = [('The cat sat .', '(S (NP (DT (NN )NP (VP (VBD )VP (. )S'),
         ('It was seen .', '(S (NP (PRP )NP (VP (VBD (VP (VBN )VP )VP (. )S')]


def _config(folder):
  c = default.get_config()
  c.dataset, c.treebank_dir = 'treebank', str(folder)
  return c


def _write(folder, files):
  for name, text in files.items():
    path = epath.Path(folder, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _pairs(source):
  return [(source[i]['source'], source[i]['target']) for i in range(len(source))]


def test_split_files_become_sentence_and_linearized_tree_pairs(tmp_path):
  _write(tmp_path / 'tb', {'train.trees': TRAIN, 'dev.trees': DEV})
  data_dir = str(tmp_path / 'tfds')
  train = corpora.load_split(_config(tmp_path / 'tb'), 'train', data_dir)
  assert _pairs(train) == PAIRS
  dev = corpora.load_split(_config(tmp_path / 'tb'), 'dev', data_dir)
  assert _pairs(dev) == [('Dogs bark .', '(S (NP (NNS )NP (VP (VBP )VP (. )S')]
  # The gold tree comes back from a pair exactly.
  gold = [trees.clean(t) for _, _, t in trees.read_trees(TRAIN, 'x')]
  assert [str(linearize.delinearize(t, s.split())) for s, t in PAIRS] == list(map(str, gold))
  with pytest.raises(corpora.MissingDataError) as e:
    corpora.load_split(_config(tmp_path / 'tb'), 'test', data_dir)
  assert str(e.value) == (f"The treebank {tmp_path}/tb has no 'test' split: expected "
                          f'{tmp_path}/tb/test.trees.')


def test_a_missing_split_the_run_needs_names_its_key_before_preparing(tmp_path):
  _write(tmp_path / 'tb', {'train.trees': TRAIN, 'dev.trees': DEV})
  config = _config(tmp_path / 'tb')
  config.final_eval_split = 'test'
  split_check.check_splits(config, ['train_split', 'eval_split'])
  with pytest.raises(corpora.MissingDataError) as e:
    split_check.check_splits(config, ['train_split', 'eval_split', 'final_eval_split'])
  assert str(e.value) == ("config key 'final_eval_split' is 'test', but there is no 'test' "
                          f'split: expected {tmp_path}/tb/test.trees.')
  assert sorted(os.listdir(tmp_path)) == ['tb']  # nothing prepared


def _wsj(folder):
  """Sections 00-24 with one small .mrg file each; section NN's tree has the word sNN."""
  files = {}
  for section in range(25):
    files[f'{section:02d}/wsj_{section:02d}01.mrg'] = (
        f'( (S (NP-SBJ (NN s{section:02d})) (VP (VBD ran)) (. .)) )\n\n'
        f'( (S (NP (PRP it)) (VP (VBD stopped))) )\n')
  _write(folder, files)


@pytest.mark.parametrize('sub', ['', 'wsj', 'parsed/mrg/wsj'])
def test_wsj_sections_02_21_train_22_dev_23_test(tmp_path, sub):
  _wsj(tmp_path / 'ptb' / sub)
  splits = treebank.find_splits(str(tmp_path / 'ptb'))
  assert {s: [os.path.basename(p) for p in f.paths] for s, f in splits.items()} == {
      'train': [f'wsj_{n:02d}01.mrg' for n in range(2, 22)], 'dev': ['wsj_2201.mrg'],
      'test': ['wsj_2301.mrg']}
  sections = os.path.join(sub, '23', 'wsj_2301.mrg')
  assert list(fingerprint.compute(_config(tmp_path / 'ptb'), None)['files']['test']) == [
      sections]  # relative to treebank_dir: change messages name the file's real path
  test = corpora.load_split(_config(tmp_path / 'ptb'), 'test', str(tmp_path / 'tfds'))
  assert _pairs(test) == [('s23 ran .', '(S (NP (NN )NP (VP (VBD )VP (. )S'),
                          ('it stopped', '(S (NP (PRP )NP (VP (VBD )VP )S')]


def test_a_missing_wsj_section_is_named(tmp_path):
  _wsj(tmp_path / 'ptb')
  os.remove(tmp_path / 'ptb' / '22' / 'wsj_2201.mrg')
  with pytest.raises(corpora.MissingDataError) as e:
    treebank.find_splits(str(tmp_path / 'ptb'))
  assert str(e.value) == (f'WSJ section 22 (dev) has no .mrg files: expected '
                          f'{tmp_path}/ptb/22/wsj_22NN.mrg.')


def test_unknown_and_ambiguous_layouts_fail_in_one_line(tmp_path):
  _write(tmp_path / 'tb', {'train.txt': TRAIN, 'notes/readme': 'x'})
  with pytest.raises(treebank.LayoutError) as e:
    treebank.find_splits(str(tmp_path / 'tb'))
  assert str(e.value) == (
      f'{tmp_path}/tb: unknown treebank layout (it has notes, train.txt); expected '
      f'{tmp_path}/tb/train.trees (and dev.trees, test.trees), or the WSJ section folders '
      '02-23 of .mrg files in it, in its wsj/ or in its parsed/mrg/wsj/.')
  _write(tmp_path / 'tb', {'train.trees': TRAIN, 'wsj/02/wsj_0201.mrg': TRAIN})
  with pytest.raises(treebank.LayoutError) as e:
    treebank.find_splits(str(tmp_path / 'tb'))
  assert str(e.value) == (f'{tmp_path}/tb has both {tmp_path}/tb/train.trees and WSJ section '
                          f'folders in {tmp_path}/tb/wsj; keep one layout.')
  with pytest.raises(corpora.MissingDataError):
    treebank.find_splits(str(tmp_path / 'nowhere'))
  c = _config('')
  with pytest.raises(corpora.DataError) as e:
    corpora.load_split(c, 'train', str(tmp_path / 'tfds'))
  assert str(e.value).startswith("config key 'treebank_dir' is empty: dataset='treebank'")


@pytest.mark.parametrize('dev,message', [
    ('( (S (NP (DT a) (NN b)) (VP (VBD c))) )\n( (S (NP (DT a) (NN b))\n',
     '{dev}: tree 2 (line 2): unbalanced brackets: 2 still open at the end of the file.'),
    ('( (S (NP (DT a)) (VP (VBD c))) )\n( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *T*))) )\n',
     '{dev}: tree 2 (line 2) has no words (after removing -NONE- elements): '
     '( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *T*))))'),
])
def test_a_bad_tree_stops_before_anything_is_written(tmp_path, dev, message):
  _write(tmp_path / 'tb', {'train.trees': TRAIN, 'dev.trees': dev})
  data_dir = tmp_path / 'tfds'
  with pytest.raises(trees.TreeError) as e:
    corpora.load_split(_config(tmp_path / 'tb'), 'train', str(data_dir))
  assert str(e.value) == message.format(dev=tmp_path / 'tb' / 'dev.trees')
  assert not data_dir.exists()


def test_fingerprint_of_a_treebank_and_a_changed_training_file(tmp_path):
  _write(tmp_path / 'tb', {'train.trees': TRAIN, 'dev.trees': DEV})
  before = fingerprint.compute(_config(tmp_path / 'tb'), None)
  assert before['dataset'] == 'treebank' and before['corpus_dir'] == str(tmp_path / 'tb')
  assert sorted(before['files']) == ['dev', 'train']
  _write(tmp_path / 'tb', {'dev.trees': DEV + DEV})
  refusal, notes = fingerprint.compare(before, fingerprint.compute(_config(tmp_path / 'tb'),
                                                                   None))
  assert refusal is None and len(notes) == 1 and 'the dev split changed' in notes[0]
  _write(tmp_path / 'tb', {'train.trees': TRAIN.replace('cat', 'dog')})
  refusal, _ = fingerprint.compare(before, fingerprint.compute(_config(tmp_path / 'tb'), None))
  assert refusal.startswith(f'the train split changed since they were written: '
                            f'{tmp_path}/tb/train.trees (sha256 ')


def test_per_host_preparation_takes_turns_and_prepares_once(tmp_path):
  _write(tmp_path / 'tb', {'train.trees': TRAIN})
  data_dir = str(tmp_path / 'host_cache')
  # Processes of one host of a remote workdir, none of them process 0, at the same time.
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    first, second = pool.map(lambda index: corpora.load_split(
        _config(tmp_path / 'tb'), 'train', data_dir, process_index=index, timeout_s=0.1,
        per_host=True), (1, 2))
  assert _pairs(first) == _pairs(second) == PAIRS
  assert len(os.listdir(os.path.join(data_dir, 'treebank_corpus'))) == 1


def test_a_treebank_on_gcs(gcs_dir, tmp_path):
  _wsj(f'{gcs_dir}/ptb/parsed/mrg/wsj')
  config = _config(f'{gcs_dir}/ptb')
  assert list(fingerprint.compute(config, None)['files']['dev']) == [
      'parsed/mrg/wsj/22/wsj_2201.mrg']
  dev = corpora.load_split(config, 'dev', str(tmp_path / 'tfds'))
  assert _pairs(dev) == [('s22 ran .', '(S (NP (NN )NP (VP (VBD )VP (. )S'),
                         ('it stopped', '(S (NP (PRP )NP (VP (VBD )VP )S')]
