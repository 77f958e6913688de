"""Tests for t2t_jax.data.wmt: WMT'14 downloaded, extracted without TensorFlow and prepared,
offline (tests/fake_statmt.py serves synthetic statmt.org archives through a loopback HTTP
proxy), then the paper's own command (configs/wmt_base.py) trained 2 steps and decoded."""

import contextlib
import json
import os

import pytest
from tensorflow_datasets.core.download import checksums as tfds_checksums
from tensorflow_datasets.core.download import download_manager as tfds_download_manager
from tensorflow_datasets.core.download import downloader

import fake_statmt
from configs import wmt_base, wmt_enfr_big
from conftest import TINY, read_metrics, run_main
from t2t_jax.data import corpora, wmt

# Any download attempt through this proxy fails at once (nothing listens on port 9).
NO_NETWORK = 'http://127.0.0.1:9'


def _proxy_env(monkeypatch, address):
  for name in ('http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY'):
    monkeypatch.setenv(name, address)
  for name in ('no_proxy', 'NO_PROXY'):
    monkeypatch.delenv(name, raising=False)


@contextlib.contextmanager
def _fake_checksums(monkeypatch, files):
  """The checksums of the synthetic `files` replace TFDS's records of the real ones, for the
  builder and for TFDS's process-wide table, which is restored after.

  TFDS's DownloadManager takes `checksums.get_all_url_infos()` (memoized: one dict for the
  process) and `update`s that very dict with the builder's `url_infos`, so without the
  restore the synthetic records outlive the test: a later download in the same process
  then checks the synthetic archives against the synthetic records (the archives are the
  same bytes every time), and `test_download_not_matching_tfds_checksums_is_refused`
  fails, after whichever test of this worker prepared WMT with fake checksums first."""
  monkeypatch.setattr(wmt.Wmt14Translate, 'url_infos', fake_statmt.url_infos(files))
  try:
    yield
  finally:
    tfds_checksums.get_all_url_infos.cache_clear()  # TFDS's own records, read again


@contextlib.contextmanager
def _statmt(monkeypatch, pair, *, real_checksums=False):
  """Serves the synthetic archives of `pair`; yields the list of URLs requested. Unless
  `real_checksums`, their checksums replace TFDS's records of the real files."""
  files = fake_statmt.archives(pair)
  with fake_statmt.proxy(files) as (address, requested), contextlib.ExitStack() as stack:
    _proxy_env(monkeypatch, address)
    if not real_checksums:
      stack.enter_context(_fake_checksums(monkeypatch, files))
    yield requested


def _all(source):
  return sorted((ex['source'], ex['target']) for ex in source.__getitems__(range(len(source))))


def _expected_train(pair):
  """(en, xx) pairs of the synthetic training files, empty sides dropped."""
  return sorted((en, xx) for xs, ens in fake_statmt.train_pairs(pair).values()
                for xx, en in zip(xs, ens) if xx and en)


@pytest.fixture(scope='module')
def de_en(tmp_path_factory):
  """wmt14_translate/de-en prepared offline into a data dir: (data_dir, URLs requested)."""
  data_dir = str(tmp_path_factory.mktemp('tfds'))
  with pytest.MonkeyPatch.context() as mp, _statmt(mp, 'de-en') as requested:
    corpora.load_split(wmt_base.get_config(), 'train', data_dir)
    return data_dir, list(requested)


def test_builder_configs_are_the_wmt_datasets_of_corpora(tmp_path):
  assert {f'wmt14_translate/{c.name}': c.language_pair
          for c in wmt.Wmt14Translate.BUILDER_CONFIGS} == corpora.WMT_DATASETS
  assert {name: wmt.wmt_builder(name, str(tmp_path)).builder_config.language_pair
          for name in corpora.WMT_DATASETS} == corpora.WMT_DATASETS


def test_extract_members_writes_only_the_named_files(tmp_path):
  archive = tmp_path / 'a.tgz'
  archive.write_bytes(fake_statmt.tar_archive({
      './training/x.de-en.de': b'eins\n', 'training/x.de-en.en': b'one\n',
      'training/x.fr-en.fr': b'un\n'}))
  out = tmp_path / 'out'
  assert wmt.extract_members(archive, ['training/x.de-en.de', 'training/x.de-en.en'],
                             out) == out
  written = sorted(str(p.relative_to(out)) for p in out.rglob('*') if p.is_file())
  assert written == ['training/x.de-en.de', 'training/x.de-en.en']
  assert (out / 'training/x.de-en.de').read_bytes() == b'eins\n'
  archive.unlink()  # extracted files are reused: the archive is not read again
  assert wmt.extract_members(archive, ['training/x.de-en.en'], out) == out
  archive.write_bytes(fake_statmt.tar_archive({'training/y.de': b''}))
  with pytest.raises(wmt.DataError, match=r'a\.tgz has no training/x\.cs-en\.cs; delete it'):
    wmt.extract_members(archive, ['training/x.cs-en.cs'], out)
  truncated = fake_statmt.tar_archive({'training/y.de': b'z' * 4096})[:60]  # a cut download
  archive.write_bytes(truncated)
  with pytest.raises(wmt.DataError, match=r'Cannot read the archive .*a\.tgz'):
    wmt.extract_members(archive, ['training/y.de'], out)


def test_de_en_prepared_offline_from_the_real_formats(de_en):
  data_dir, requested = de_en
  # Each archive once, dev.tgz serving both the validation and the test split.
  assert sorted(requested) == sorted([fake_statmt.DEV, fake_statmt.COMMONCRAWL,
                                      fake_statmt.EUROPARL, fake_statmt.NEWS_COMMENTARY])
  config = wmt_base.get_config()
  train = corpora.load_split(config, 'train', data_dir)
  assert train.name == 'wmt14_translate/de-en:train:en-de'
  assert _all(train) == _expected_train('de-en')
  assert len(train) == 799  # 800 written, one with an empty German side
  assert any('\r' in en for en, _ in _all(train))  # a carriage return kept inside its line
  dev_de, dev_en = fake_statmt.newstest2013_pairs()
  assert _all(corpora.load_split(config, 'dev', data_dir)) == sorted(zip(dev_en, dev_de))
  test_de, test_en = fake_statmt.newstest2014_pairs()  # from the SGML files
  test = corpora.load_split(config, 'test', data_dir)
  assert test.name == 'wmt14_translate/de-en:test:en-de'
  assert _all(test) == sorted(zip(test_en, test_de))
  extracted = os.path.join(data_dir, 'downloads', 'extracted')
  files = sorted(f for _, _, fs in os.walk(extracted) for f in fs)
  assert files == sorted(['commoncrawl.de-en.de', 'commoncrawl.de-en.en', 'newstest2013.de',
                          'newstest2013.en', 'newstest2014-deen-ref.en.sgm',
                          'newstest2014-deen-src.de.sgm', 'europarl-v7.de-en.de',
                          'europarl-v7.de-en.en', 'news-commentary-v9.de-en.de',
                          'news-commentary-v9.de-en.en'])


def test_prepared_wmt_is_reused_without_network(de_en, monkeypatch):
  data_dir, _ = de_en
  _proxy_env(monkeypatch, NO_NETWORK)
  config = wmt_base.get_config()
  config.source_lang, config.target_lang = 'de', 'en'  # the other direction, same data
  for process_index in (0, 1):
    dev = corpora.load_split(config, 'dev', data_dir, process_index=process_index)
    assert len(dev) == fake_statmt.DEV_PAIRS
    assert dev[0]['source'] in fake_statmt.newstest2013_pairs()[0]


def test_download_not_matching_tfds_checksums_is_refused(tmp_path, monkeypatch):
  # As any earlier test of this process that prepared with fake checksums did: TFDS's
  # DownloadManager writes a builder's url_infos into its process-wide table.
  with _fake_checksums(monkeypatch, fake_statmt.archives('de-en')):
    tfds_download_manager.DownloadManager(download_dir=tmp_path / 'fake',
                                          url_infos=wmt.Wmt14Translate.url_infos)
  monkeypatch.undo()
  dev = 'http://data.statmt.org/wmt19/translation-task/dev.tgz'
  assert tfds_checksums.get_all_url_infos()[dev].size > 30 << 20  # the real file's record
  # The synthetic archives are not the files TFDS recorded: verification stays on.
  with _statmt(monkeypatch, 'de-en', real_checksums=True):
    with pytest.raises(corpora.DataError, match=r'^Downloading http://data\.statmt\.org/wmt19/'
                       r'translation-task/dev\.tgz into .* failed: .* has wrong checksum: '
                       r'\* Expected: .*needs the network once'):
      corpora.load_split(wmt_base.get_config(), 'train', str(tmp_path))
  assert not (tmp_path / 'wmt14_translate' / 'de-en' / '1.0.0').exists()


def test_failed_downloads_are_one_line_errors(tmp_path, monkeypatch):
  files = fake_statmt.archives('de-en')
  del files[fake_statmt.EUROPARL]
  with _fake_checksums(monkeypatch, files):
    with fake_statmt.proxy(files) as (address, _):
      _proxy_env(monkeypatch, address)
      with pytest.raises(corpora.DataError, match=r'Downloading .*europarl-v7\.tgz into .* '
                         r'failed: Failed to get url .* HTTP code: 404\.'):
        corpora.load_split(wmt_base.get_config(), 'train', str(tmp_path / 'a'))
    # No network at all (TFDS's 10 retries, over minutes, cut to none).
    monkeypatch.setattr(downloader, 'MAX_RETRIES', 0)
    _proxy_env(monkeypatch, NO_NETWORK)
    with pytest.raises(corpora.DataError, match=r'Downloading http://.*dev\.tgz into .* '
                       r'failed: .*Connection refused.* needs the network once'):
      corpora.load_split(wmt_base.get_config(), 'train', str(tmp_path / 'b'))


def test_fr_en_prepared_offline_with_gzip_files_in_a_tar(tmp_path, monkeypatch):
  with _statmt(monkeypatch, 'fr-en') as requested:
    train = corpora.load_split(wmt_enfr_big.get_config(), 'train', str(tmp_path))
  assert sorted(requested) == sorted([fake_statmt.DEV, fake_statmt.COMMONCRAWL,
                                      fake_statmt.EUROPARL, fake_statmt.NEWS_COMMENTARY,
                                      fake_statmt.MULTIUN, fake_statmt.GIGAFREN])
  assert train.name == 'wmt14_translate/fr-en:train:en-fr'
  assert _all(train) == _expected_train('fr-en')
  test_fr, test_en = fake_statmt.newstest2014_pairs()
  assert _all(corpora.load_split(wmt_enfr_big.get_config(), 'test', str(tmp_path))) == (
      sorted(zip(test_en, test_fr)))


@pytest.mark.slow
def test_wmt_base_command_trains_and_decodes_offline(de_en, tmp_path):
  """`main.py --config=configs/wmt_base.py` with a tiny model: 2 steps, the final test
  evaluation (newstest2014 from SGML), then decoding a file; no network."""
  data_dir, _ = de_en
  workdir = str(tmp_path / 'run')
  env = dict(os.environ, http_proxy=NO_NETWORK, HTTP_PROXY=NO_NETWORK, no_proxy='',
             NO_PROXY='')
  replaced = ('--config=', '--config.final_eval_split', '--config.bucket_lengths',
              '--config.eval_every_steps')
  tiny = [a for a in TINY if not a.startswith(replaced)]
  # One batch shape and no periodic dev evaluation: fewer compilations, same data path.
  train = run_main('--config=configs/wmt_base.py', f'--workdir={workdir}', *tiny,
                   f'--config.data_dir={data_dir}', '--config.num_train_steps=2',
                   '--config.checkpoint_every_steps=1', '--config.bucket_lengths=(32,)',
                   '--config.eval_every_steps=0', '--config.final_eval_split=test', env=env)
  assert train.returncode == 0, train.stderr[-3000:]
  assert [m['step'] for m in read_metrics(workdir) if 'loss' in m][-1] == 2
  with open(os.path.join(workdir, 'eval_test_2.json')) as f:
    result = json.load(f)
  assert result['sentences'] == fake_statmt.TEST_PAIRS and result['split'] == 'test'
  source = tmp_path / 'newstest.en'
  source.write_text('And God said, Let there be light.\n\nThe end.\n', encoding='utf-8')
  decode = run_main('--mode=decode', f'--workdir={workdir}', f'--input={source}',
                    f'--output={tmp_path / "out.de"}', env=env)
  assert decode.returncode == 0, decode.stderr[-3000:]
  lines = (tmp_path / 'out.de').read_text(encoding='utf-8').split('\n')
  assert len(lines) == 4 and lines[1] == '' and lines[3] == ''  # 3 lines, the empty one kept
