"""t2t_jax.data.vocabularies (and the source side of vocab_record): with share_vocab=False
each language's SentencePiece model is trained from its own text, recorded as such, taken as
given, checked against the checkpoints' sha256 of both sides, and loaded by the reading
modes; with share_vocab=True everything is the one shared vocabulary, as it always was."""

import hashlib
import json
import logging
import os
import shutil

import numpy as np
import pytest

from configs import default
from conftest import TINY, read_metrics, run_main
from t2t_jax.data import tokenizer, vocab_pair, vocab_record, vocabularies
from t2t_jax.inference import translate
from t2t_jax.storage import layout

SOURCE, TARGET = 150, 170


def _config(share_vocab=False, **changes):
  c = default.get_config()
  c.update(dict(vocab_size=TARGET, vocab_sample_sentences=1200, share_vocab=share_vocab,
                share_embeddings=share_vocab, source_vocab_size=0 if share_vocab else SOURCE))
  c.update(changes)
  return c


@pytest.fixture(scope='module')
def pairs(corpus):
  def lines(lang):
    with open(os.path.join(corpus, f'train.{lang}'), encoding='utf-8') as f:
      return f.read().splitlines()
  return [{'source': s, 'target': t} for s, t in zip(lines('en'), lines('es'))]


@pytest.fixture(scope='module')
def separate(pairs, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('separate'))
  return workdir, vocabularies.load_or_train(_config(), workdir, pairs)


def _sha(path):
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


def _record(path):
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def test_each_side_is_trained_from_its_own_language_and_recorded(separate):
  workdir, tok = separate
  wd = layout.of(workdir)
  assert isinstance(tok, vocab_pair.VocabPair)
  assert (tok.source.path, tok.target.path) == (wd.source_vocab, wd.vocab)
  assert (tok.source_vocab_size, tok.vocab_size) == (SOURCE, TARGET)
  assert sorted(os.listdir(os.path.dirname(wd.vocab))) == [
      'source_spm.meta.json', 'source_spm.model', 'source_spm.vocab', 'spm.meta.json',
      'spm.model', 'spm.vocab']
  source_pieces = set(tok.source.pieces(range(SOURCE)))
  target_pieces = set(tok.target.pieces(range(TARGET)))
  assert '\u2581the' in source_pieces and '\u2581the' not in target_pieces  # English only
  assert '\u2581de' in target_pieces and '\u2581de' not in source_pieces  # Spanish only
  source_record = _record(layout.of(workdir).source_side.vocab_record)
  target_record = _record(wd.vocab_record)
  assert (source_record['trained_on'], source_record['vocab_size']) == ('source', SOURCE)
  assert (target_record['trained_on'], target_record['vocab_size']) == ('target', TARGET)
  assert source_record['sha256'] == _sha(wd.source_vocab) == tok.source.fingerprint


def test_a_trained_run_reuses_both_and_the_reading_modes_load_both(separate, pairs, caplog):
  workdir, tok = separate
  saved = vocab_record.of_tokenizer(tok)
  assert saved == {'sha256': tok.target.fingerprint, 'vocab_size': TARGET,
                   'source_sha256': tok.source.fingerprint, 'source_vocab_size': SOURCE}
  caplog.set_level(logging.INFO)
  again = vocabularies.load_or_train(_config(), workdir, pairs, trained=True,
                                     checkpoint_vocabulary=saved)
  assert again.fingerprint == tok.fingerprint
  assert sum('Reusing the vocabulary' in r.getMessage() for r in caplog.records) == 2
  loaded = vocabularies.load(workdir, _config(source_vocab_size=SOURCE))
  assert loaded.fingerprint == tok.fingerprint and vocab_record.mismatched_file(saved, loaded
                                                                                ) is None
  assert vocab_record.describe(saved) == (
      f'vocabularies: source {SOURCE} pieces, sha256 {tok.source.fingerprint[:12]}...; '
      f'target {TARGET} pieces, sha256 {tok.target.fingerprint[:12]}...')


def test_a_replaced_or_missing_source_vocabulary_is_named(separate, tmp_path):
  workdir, tok = separate
  copy = str(tmp_path / 'run')
  shutil.copytree(workdir, copy)
  wd = layout.of(copy)
  shutil.copy(wd.vocab, wd.source_vocab)  # another model where the source's was
  replaced = vocabularies.load(copy, _config(source_vocab_size=TARGET))
  path, why = vocab_record.mismatched_file(vocab_record.of_tokenizer(tok), replaced)
  assert path == wd.source_vocab and f'{SOURCE} pieces' in why
  os.remove(wd.source_vocab)
  with pytest.raises(tokenizer.TokenizerError, match='No SentencePiece model at .*'
                     'source_spm.model'):
    vocabularies.load(copy, _config())


def test_a_shared_vocabulary_is_not_reused_as_one_side(pairs, tmp_path, caplog):
  workdir = str(tmp_path / 'run')
  shared = vocabularies.load_or_train(_config(share_vocab=True), workdir, pairs)
  assert isinstance(shared, tokenizer.Tokenizer)
  assert 'trained_on' not in _record(layout.of(workdir).vocab_record)  # as it always was
  assert vocab_record.of_tokenizer(shared) == {'sha256': shared.fingerprint,
                                               'vocab_size': TARGET}
  caplog.set_level(logging.WARNING)
  tok = vocabularies.load_or_train(_config(), workdir, pairs)  # no checkpoint depends on it
  assert tok.target.fingerprint != shared.fingerprint
  assert any('trained on both languages then, on the target text now' in r.getMessage()
             for r in caplog.records)


def test_given_models_are_taken_as_they_are_for_each_side(separate, pairs, tmp_path):
  workdir, tok = separate
  given = _config(vocab_model=tok.target.path, source_vocab_model=tok.source.path)
  run = str(tmp_path / 'given')
  taken = vocabularies.load_or_train(given, run, pairs)
  assert (_sha(layout.of(run).source_vocab), _sha(layout.of(run).vocab)) == (
      _sha(tok.source.path), _sha(tok.target.path))
  assert taken.fingerprint == tok.fingerprint
  fine_tune = _config(init_from=workdir)
  assert vocab_record.given(vocabularies.side_config(fine_tune, 'source')) == layout.of(
      workdir).source_vocab
  assert vocab_record.given(fine_tune) == layout.of(workdir).vocab


SEPARATE = [*TINY, '--config.share_vocab=False', '--config.share_embeddings=False',
            f'--config.source_vocab_size={SOURCE + 150}', '--config.num_train_steps=30',
            '--config.eval_every_steps=30', '--config.eval_bleu_sentences=2']
LINES = ['In the beginning God created the heaven and the earth.',
         'And God said, Let there be light: and there was light.']


def _main(*args):
  result = run_main(*args)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@pytest.mark.slow  # a whole run, then every mode that reads it, through main.py
def test_every_mode_runs_with_separate_vocabularies(corpus, tmp_path):
  run, lines = str(tmp_path / 'run'), tmp_path / 'input.en'
  lines.write_text('\n'.join(LINES) + '\n', encoding='utf-8')
  _main(f'--workdir={run}', f'--config.local_corpus_dir={corpus}', *SEPARATE)
  assert any('eval_dev/bleu' in m for m in read_metrics(run))  # dev BLEU while training
  assert 'vocabularies: source 300 pieces' in _main('--mode=info', f'--workdir={run}').stdout
  assert 'averaged steps 20, 30' in _main('--mode=average', f'--workdir={run}',
                                          '--config.average_last=2').stdout
  # decode: the Translator of the run (its averaged checkpoint), from Python, says the same.
  decoded = _main('--mode=decode', f'--workdir={run}', f'--input={lines}').stdout
  translator = translate.Translator.from_workdir(run)
  tok = translator.tokenizer
  assert isinstance(tok, vocab_pair.VocabPair) and tok.source_vocab_size == 300
  assert decoded.splitlines() == translator.translate(LINES)
  assert tok.encode(LINES[0]) == tok.source.encode(LINES[0]) != tok.target.encode(LINES[0])
  result = json.loads(_main('--mode=eval', f'--workdir={run}', '--split=test').stdout)
  assert result['sentences'] == 64 and 'bleu' in result
  # attention: the source pieces are the source model's, the target pieces the target's.
  _main('--mode=attention', f'--workdir={run}', f'--input={lines}',
        f'--output={tmp_path / "maps"}')
  with np.load(tmp_path / 'maps' / 'sentence_1' / 'attention.npz') as maps:
    assert list(maps['source_pieces']) == tok.source.pieces(maps['source_ids'])
    assert list(maps['target_pieces']) == tok.target.pieces(maps['target_ids'])
    assert list(maps['source_ids'][:-1]) == tok.source.encode(LINES[0])
  _exports_check_themselves(run, tmp_path, decoded)
  # Resuming with another source vocabulary in place of the run's: one line naming it.
  shutil.copy(layout.of(run).vocab, layout.of(run).source_vocab)
  resumed = run_main(f'--workdir={run}', f'--config.local_corpus_dir={corpus}', *SEPARATE,
                     '--config.num_train_steps=40')
  assert resumed.returncode == 1 and 'Traceback' not in resumed.stderr
  assert resumed.stderr.splitlines()[-1].startswith(
      f'error: {layout.of(run).source_vocab}: it is not the vocabulary')


def _exports_check_themselves(run, tmp_path, decoded):
  """Both exports of a run with separate vocabularies pass their self-checks, ship both
  models, and the StableHLO artifact translates as --mode=decode."""
  # pylint: disable=import-outside-toplevel
  pytest.importorskip('ctranslate2')
  pytest.importorskip('flatbuffers')
  from t2t_jax.inference import portable
  ct2 = tmp_path / 'ct2'
  log = _main('--mode=export', '--format=ctranslate2', f'--workdir={run}', f'--output={ct2}')
  assert 'translates 4 sentences as the model' in log.stderr
  assert {'source_vocabulary.json', 'target_vocabulary.json', 'source_spm.model',
          'spm.model'} <= set(os.listdir(ct2))
  assert _sha(ct2 / 'source_spm.model') == _sha(layout.of(run).source_vocab)
  hlo = tmp_path / 'hlo'
  log = _main('--mode=export', '--format=stablehlo', f'--workdir={run}', f'--output={hlo}')
  assert 'translates 4 sentences as the model' in log.stderr
  artifact = portable.ExportedTranslator(str(hlo))
  assert artifact.manifest['source_vocab'] == 'source_spm.model'
  assert artifact.translate(LINES) == decoded.splitlines()
