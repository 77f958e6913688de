"""Tests for t2t_jax.data.corpora: the local-corpus TFDS builder, its checks, load_split."""

import gzip
import logging
import os
import re
import threading
import time

import pytest

from configs import default
from t2t_jax.data import corpora, split_check


def _config(corpus_dir='', source_lang='en', target_lang='de', dataset='local'):
  c = default.get_config()
  c.dataset, c.local_corpus_dir = dataset, str(corpus_dir)
  c.source_lang, c.target_lang = source_lang, target_lang
  return c


def _write(path, lines, *, gz=False, raw=None):
  data = raw if raw is not None else ''.join(l + '\n' for l in lines).encode('utf-8')
  if gz:
    with gzip.open(str(path) + '.gz', 'wb') as f:
      f.write(data)
  else:
    with open(path, 'wb') as f:
      f.write(data)


EN = ['Hello world.', 'A second line — with a dash.', '', 'Line\u2028with a separator.',
      '  Padded line.  ', 'Last one.']
DE = ['Hallo Welt.', 'Eine zweite Zeile.', 'Leer links.', 'Zeile\u2028mit Trenner.',
      'Gepolsterte Zeile.', '']
# Pairs with an empty side (lines 3 and 6) are dropped; U+2028 does not split a line.
KEPT = [('Hello world.', 'Hallo Welt.'),
        ('A second line — with a dash.', 'Eine zweite Zeile.'),
        ('Line\u2028with a separator.', 'Zeile\u2028mit Trenner.'),
        ('Padded line.', 'Gepolsterte Zeile.')]


def _pairs(source):
  return [(source[i]['source'], source[i]['target']) for i in range(len(source))]


def test_aligned_files_round_trip(tmp_path):
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  _write(corpus / 'train.en', EN)
  _write(corpus / 'train.de', DE, gz=True)  # .gz and plain files mix
  _write(corpus / 'dev.en', ['Good morning.', 'Bye.'], gz=True)
  _write(corpus / 'dev.de', ['Guten Morgen.', 'Tschüss.'], gz=True)
  data_dir = str(tmp_path / 'tfds')
  train = corpora.load_split(_config(corpus), 'train', data_dir)
  assert len(train) == 4
  assert _pairs(train) == KEPT
  assert train.num_dropped_empty == 2
  assert all(isinstance(v, str) for v in train[0].values())
  assert train.__getitems__([3, 0]) == [{'source': KEPT[3][0], 'target': KEPT[3][1]},
                                         {'source': KEPT[0][0], 'target': KEPT[0][1]}]
  dev = corpora.load_split(_config(corpus), 'dev', data_dir)
  assert _pairs(dev) == [('Good morning.', 'Guten Morgen.'), ('Bye.', 'Tschüss.')]
  assert _pairs(corpora.load_split(_config(corpus), 'validation', data_dir)) == _pairs(dev)
  assert dev.num_dropped_empty == 0
  # The other direction reads the same files the other way round, in its own config.
  rev = corpora.load_split(_config(corpus, 'de', 'en'), 'train', data_dir)
  assert _pairs(rev) == [(t, s) for s, t in KEPT]
  assert rev.name != train.name
  with pytest.raises(corpora.MissingDataError, match=r'test\.en\[\.gz\].*test\.tsv'):
    corpora.load_split(_config(corpus), 'test', data_dir)


def test_tsv_round_trip(tmp_path):
  corpus = tmp_path / 'tsv'
  corpus.mkdir()
  _write(corpus / 'train.tsv', ['one\teins', 'two \t zwei', '\tnur rechts', '', 'three\tdrei'])
  _write(corpus / 'test.tsv', ['four\tvier'], gz=True)
  data_dir = str(tmp_path / 'tfds')
  train = corpora.load_split(_config(corpus), 'train', data_dir)
  assert _pairs(train) == [('one', 'eins'), ('two', 'zwei'), ('three', 'drei')]
  assert train.num_dropped_empty == 2  # an empty source and a blank line
  assert _pairs(corpora.load_split(_config(corpus), 'test', data_dir)) == [('four', 'vier')]


def test_missing_files_are_named(tmp_path):
  corpus = tmp_path / 'empty'
  corpus.mkdir()
  with pytest.raises(corpora.MissingDataError) as e:
    corpora.load_split(_config(corpus), 'train', str(tmp_path / 'tfds'))
  for name in ('train.en', 'train.de', 'train.tsv'):
    assert os.path.join(str(corpus), name) in str(e.value)
  _write(corpus / 'train.en', ['a'])
  with pytest.raises(corpora.MissingDataError, match=r'train\.de'):
    corpora.load_split(_config(corpus), 'train', str(tmp_path / 'tfds'))
  with pytest.raises(corpora.MissingDataError, match='does not exist'):
    corpora.load_split(_config(tmp_path / 'nowhere'), 'train', str(tmp_path / 'tfds'))


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
  corpus = tmp_path / 'c'
  corpus.mkdir()
  _write(corpus / 'train.en', ['a', 'b', 'c'])
  _write(corpus / 'train.de', ['x', 'y'], gz=True)
  with pytest.raises(corpora.LineCountError) as e:
    corpora.load_split(_config(corpus), 'train', str(tmp_path / 'tfds'))
  msg = str(e.value)
  assert f'{corpus / "train.en"} has 3 lines' in msg
  assert f'{corpus / "train.de.gz"} has 2 lines' in msg
  assert isinstance(e.value, corpora.DataError) and isinstance(e.value, ValueError)
  # Nothing was prepared.
  assert not (tmp_path / 'tfds' / 'local_parallel_corpus').exists() or not any(
      (tmp_path / 'tfds' / 'local_parallel_corpus').rglob('*.array_record*'))


def test_invalid_utf8_names_file_and_line(tmp_path):
  corpus = tmp_path / 'c'
  corpus.mkdir()
  _write(corpus / 'train.en', None, raw=b'fine\nbad \xff\xfe byte\n')
  _write(corpus / 'train.de', ['gut', 'schlecht'])
  with pytest.raises(corpora.EncodingError, match=f'{corpus / "train.en"}:2: invalid UTF-8'):
    corpora.load_split(_config(corpus), 'train', str(tmp_path / 'tfds'))


@pytest.mark.parametrize('line,tabs', [('no tab here', 0), ('a\tb\tc', 2)])
def test_tsv_line_without_exactly_one_tab(tmp_path, line, tabs):
  corpus = tmp_path / 'c'
  corpus.mkdir()
  _write(corpus / 'train.tsv', ['ok\tgut', 'ok\tgut', line])
  with pytest.raises(corpora.TsvFormatError,
                     match=f'{corpus / "train.tsv"}:3: expected exactly one tab.*found {tabs}'):
    corpora.load_split(_config(corpus), 'train', str(tmp_path / 'tfds'))


def test_ambiguous_formats_refused(tmp_path):
  corpus = tmp_path / 'c'
  corpus.mkdir()
  _write(corpus / 'train.tsv', ['a\tb'])
  _write(corpus / 'train.en', ['a'])
  _write(corpus / 'train.de', ['b'])
  with pytest.raises(corpora.DataError, match='both aligned files'):
    corpora.load_split(_config(corpus), 'train', str(tmp_path / 'tfds'))


def test_changed_files_are_prepared_again(tmp_path):
  corpus = tmp_path / 'c'
  corpus.mkdir()
  data_dir = str(tmp_path / 'tfds')
  _write(corpus / 'train.en', ['one', 'two'])
  _write(corpus / 'train.de', ['eins', 'zwei'])
  first = corpora.load_split(_config(corpus), 'train', data_dir)
  assert _pairs(first) == [('one', 'eins'), ('two', 'zwei')]
  _write(corpus / 'train.de', ['eins', 'ZWEI'])  # same size, other content
  second = corpora.load_split(_config(corpus), 'train', data_dir)
  assert _pairs(second) == [('one', 'eins'), ('two', 'ZWEI')]
  assert first.name != second.name
  # Another folder with the same files gets its own config too.
  other = tmp_path / 'd'
  other.mkdir()
  _write(other / 'train.en', ['one', 'two'])
  _write(other / 'train.de', ['eins', 'ZWEI'])
  third = corpora.load_split(_config(other), 'train', data_dir)
  assert third.name not in (first.name, second.name)
  assert third.name.startswith('d-en-de-')


def test_stale_preparation_is_refused(tmp_path, monkeypatch):
  corpus = tmp_path / 'c'
  corpus.mkdir()
  _write(corpus / 'train.en', ['one'])
  _write(corpus / 'train.de', ['eins'])
  data_dir = str(tmp_path / 'tfds')
  # Same 16-digit name prefix, other full hash: the stored hash catches it.
  monkeypatch.setattr(corpora, '_fingerprint', lambda *a: 'a' * 64)
  corpora.load_split(_config(corpus), 'train', data_dir)
  monkeypatch.setattr(corpora, '_fingerprint', lambda *a: 'a' * 16 + 'b' * 48)
  with pytest.raises(corpora.DataError, match='was prepared from other files'):
    corpora.load_split(_config(corpus), 'train', data_dir)


def test_bundled_corpus_is_the_local_default(tmp_path):
  config = _config('', 'en', 'es')
  dev = corpora.load_split(config, 'dev', corpora.default_data_dir(config, str(tmp_path)))
  assert (tmp_path / 'tfds' / 'local_parallel_corpus').is_dir()
  with gzip.open(os.path.join(corpora.BUNDLED_CORPUS_DIR, 'dev.en.gz'), 'rt',
                 encoding='utf-8') as f:
    en = f.read().split('\n')[:-1]
  with gzip.open(os.path.join(corpora.BUNDLED_CORPUS_DIR, 'dev.es.gz'), 'rt',
                 encoding='utf-8') as f:
    es = f.read().split('\n')[:-1]
  assert len(dev) == len(en) == 514
  assert _pairs(dev) == list(zip(en, es))
  assert dev[0] == {
      'source': 'Then Joseph came and told Pharaoh, and said, My father and my brethren, and '
                'their flocks, and their herds, and all that they have, are come out of the '
                'land of Canaan; and, behold, they are in the land of Goshen.',
      'target': 'Y JOSÉ vino, é hizo saber á Faraón, y dijo: Mi padre y mis hermanos, y sus '
                'ovejas y sus vacas, con todo lo que tienen, han venido de la tierra de '
                'Canaán, y he aquí, están en la tierra de Gosén.'}
  with pytest.raises(corpora.DataError, match='English-Spanish'):
    corpora.load_split(_config('', 'en', 'de'), 'dev', str(tmp_path / 'tfds'))


def test_bad_dataset_and_languages_fail_without_network(tmp_path):
  with pytest.raises(corpora.DataError, match='Unknown dataset'):
    corpora.load_split(_config(dataset='wmt99'), 'train', str(tmp_path))
  with pytest.raises(corpora.DataError, match=r"\('de', 'en'\).*en->fr"):
    corpora.load_split(_config(dataset='wmt14_translate/de-en', target_lang='fr'), 'train',
                       str(tmp_path))
  assert corpora.default_data_dir(_config(dataset='wmt14_translate/fr-en'), '/w') is None
  config = _config(dataset='wmt14_translate/fr-en')
  config.data_dir = '/data'
  assert corpora.default_data_dir(config, '/w') == '/data'


def _two_pair_corpus(tmp_path):
  corpus = tmp_path / 'c'
  corpus.mkdir()
  _write(corpus / 'train.en', ['one', 'two'])
  _write(corpus / 'train.de', ['eins', 'zwei'])
  return corpus


def test_preparing_prints_nothing_on_stdout_and_logs_what_tfds_prints(tmp_path, capfd,
                                                                       caplog):
  corpus = _two_pair_corpus(tmp_path)
  with caplog.at_level(logging.INFO):
    source = corpora.load_split(_config(corpus), 'train', str(tmp_path / 'tfds'))
  assert _pairs(source) == [('one', 'eins'), ('two', 'zwei')]
  assert capfd.readouterr().out == ''
  assert 'Downloading and preparing dataset' in caplog.text
  assert 'Subsequent calls will reuse this data.' in caplog.text


def test_splits_the_run_needs_are_checked_before_anything_is_prepared(tmp_path):
  corpus = _two_pair_corpus(tmp_path)  # train only
  config = _config(corpus)
  config.final_eval_split, config.eval_split = 'test', 'validation'
  split_check.check_splits(config, ['train_split'])
  with pytest.raises(corpora.MissingDataError) as raised:
    split_check.check_splits(config, ['train_split', 'final_eval_split', 'eval_split'])
  assert str(raised.value) == (
      f"config key 'final_eval_split' is 'test', but there is no 'test' split: expected "
      f'{corpus}/test.en[.gz] and {corpus}/test.de[.gz], or {corpus}/test.tsv[.gz].')
  with pytest.raises(corpora.MissingDataError, match=r"^config key 'eval_split' is "
                     r"'validation', but there is no 'dev' split: expected .*/dev\.en"):
    split_check.check_splits(config, ['eval_split'])
  config.final_eval_split = ''  # no final evaluation: nothing to check
  split_check.check_splits(config, ['final_eval_split'])
  _write(corpus / 'test.tsv', ['drei\tthree'])
  config.final_eval_split = 'test'
  split_check.check_splits(config, ['train_split', 'final_eval_split'])
  assert not (tmp_path / 'tfds').exists()
  wmt = _config(dataset='wmt14_translate/de-en')
  wmt.final_eval_split = 'test'
  split_check.check_splits(wmt, ['final_eval_split'])  # WMT has every split: nothing to read


def test_other_processes_wait_for_process_zero(tmp_path):
  corpus = _two_pair_corpus(tmp_path)
  data_dir = str(tmp_path / 'tfds')
  with pytest.raises(corpora.DataError, match=r'Process 1 waited 0.2 s for process 0'):
    corpora.load_split(_config(corpus), 'train', data_dir, process_index=1, timeout_s=0.2,
                       poll_s=0.05)
  result = {}

  def process_one():
    result[1] = corpora.load_split(_config(corpus), 'train', data_dir, process_index=1,
                                   timeout_s=60, poll_s=0.05)

  thread = threading.Thread(target=process_one)
  thread.start()
  time.sleep(0.3)  # process 1 is waiting now; process 0 prepares
  assert 1 not in result
  zero = corpora.load_split(_config(corpus), 'train', data_dir)
  thread.join()
  assert _pairs(result[1]) == _pairs(zero) == [('one', 'eins'), ('two', 'zwei')]
  assert result[1].name == zero.name


def test_remote_workdirs_prepare_local_corpora_per_host(monkeypatch, tmp_path):
  monkeypatch.setenv('T2T_DATA_CACHE_DIR', str(tmp_path / 'cache'))
  config = _config('/c')
  assert not corpora.prepared_per_host(config, '/w')
  assert corpora.default_data_dir(config, '/w') == '/w/tfds'  # local workdirs: as before
  assert corpora.prepared_per_host(config, 'gs://b/run')
  assert corpora.default_data_dir(config, 'gs://b/run') == str(tmp_path / 'cache')
  monkeypatch.delenv('T2T_DATA_CACHE_DIR')
  assert corpora.default_data_dir(config, 'gs://b/run') == os.path.expanduser(
      '~/.cache/t2t_jax/tfds')
  config.data_dir = 'gs://b/tfds'  # a shared data_dir: process 0 prepares, as before
  assert not corpora.prepared_per_host(config, 'gs://b/run')
  assert corpora.default_data_dir(config, 'gs://b/run') == 'gs://b/tfds'
  wmt = _config(dataset='wmt14_translate/fr-en')
  assert not corpora.prepared_per_host(wmt, 'gs://b/run')
  assert corpora.default_data_dir(wmt, 'gs://b/run') is None


def test_per_host_preparation_takes_turns_and_prepares_once(tmp_path):
  corpus = _two_pair_corpus(tmp_path)
  data_dir = str(tmp_path / 'host_cache')
  results = {}

  def process(index):  # every process of a host, none of them process 0 of the run
    results[index] = corpora.load_split(_config(corpus), 'train', data_dir,
                                        process_index=index, timeout_s=0.1, per_host=True)

  threads = [threading.Thread(target=process, args=(i,)) for i in (1, 2)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert _pairs(results[1]) == _pairs(results[2]) == [('one', 'eins'), ('two', 'zwei')]
  prepared = os.listdir(os.path.join(data_dir, 'local_parallel_corpus'))
  assert len(prepared) == 1 and len(os.listdir(
      os.path.join(data_dir, 'local_parallel_corpus', prepared[0]))) == 1  # one version


@pytest.mark.parametrize('folder,files', [
    ('train.en', ['train.es']), ('train.en.gz', ['train.es']), ('train.tsv', [])])
def test_a_corpus_file_that_is_a_folder_is_named_as_a_folder(tmp_path, folder, files):
  # A folder train.en beside train.es was reported as 'train.es exists but its counterpart
  # train.en[.gz] does not'.
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  for name in files:
    _write(corpus / name, ['uno'])
  (corpus / folder).mkdir()
  with pytest.raises(corpora.DataError, match='^' + re.escape(
      f'{corpus / folder} is a folder; expected a corpus file (UTF-8 text, ')):
    corpora.load_split(_config(corpus, 'en', 'es'), 'train', str(tmp_path / 'tfds'))


def test_an_empty_split_the_run_does_not_use_is_no_error(tmp_path):
  """Issue 43 item 3.12: empty test.en and test.de refused a run with final_eval_split=''
  (which never reads test) while the same run without those files trained."""
  corpus = _two_pair_corpus(tmp_path)
  _write(corpus / 'test.en', [])
  _write(corpus / 'test.de', [], gz=True)
  config = _config(corpus)
  config.final_eval_split = ''
  split_check.check_splits(config, ['train_split', 'final_eval_split'])
  data_dir = str(tmp_path / 'tfds')
  assert _pairs(corpora.load_split(config, 'train', data_dir)) == [('one', 'eins'),
                                                                    ('two', 'zwei')]
  empty = f"Split 'test' ({corpus}/test.en, {corpus}/test.de.gz) has no non-empty pair."
  with pytest.raises(corpora.DataError, match=f'^{re.escape(empty)}$'):
    corpora.load_split(config, 'test', data_dir)  # a run that reads it: one line
  config.final_eval_split = 'test'  # ... refused before any work
  with pytest.raises(corpora.DataError) as raised:
    split_check.check_splits(config, ['train_split', 'final_eval_split'])
  assert str(raised.value) == (
      f"config key 'final_eval_split' is 'test', but the 'test' split ({corpus}/test.en, "
      f'{corpus}/test.de.gz) has no pair with both sides non-empty.')
