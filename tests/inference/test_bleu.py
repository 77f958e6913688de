"""Tests for t2t_jax.inference.bleu: sacreBLEU wrapper, paper-style tokenized BLEU, CLI."""

from importlib import metadata
import os
import subprocess
import sys

import pytest
import sacrebleu
from sacrebleu.metrics import BLEU

from t2t_jax.inference import bleu
from t2t_jax.storage import textio

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository

HYPS = [
    'Die Katze sitzt auf der Matte.',
    'Das ist ein sehr gutes Ergebnis, sagte er.',
    'Wir haben heute 3,5 Millionen Euro investiert.',
]
REFS = [
    'Die Katze saß auf der Matte.',
    'Das ist ein sehr gutes Ergebnis, sagte sie.',
    'Wir haben heute 3,5 Millionen Euro ausgegeben.',
]

# One sentence whose only error is the last word; the compound and the final
# period are what tokenized BLEU treats differently from sacreBLEU's 13a.
HYP = 'Das Rich-Text-Format ist schlecht.'
REF = 'Das Rich-Text-Format ist gut.'
HYP_TOK = 'Das Rich ##AT##-##AT## Text ##AT##-##AT## Format ist schlecht .'
REF_TOK = 'Das Rich ##AT##-##AT## Text ##AT##-##AT## Format ist gut .'


def test_corpus_bleu_equals_sacrebleu():
  result = bleu.corpus_bleu(HYPS, REFS)
  reference = sacrebleu.corpus_bleu(HYPS, [REFS])
  assert result.score == pytest.approx(reference.score, abs=1e-12)
  assert result.counts == tuple(reference.counts)
  assert result.totals == tuple(reference.totals)
  metric = BLEU()
  metric.corpus_score(HYPS, [REFS])
  assert result.signature == str(metric.get_signature())
  assert result.signature == (
      f'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}')
  assert 0.0 < result.score < 100.0
  assert bleu.corpus_bleu(REFS, REFS).score == pytest.approx(100.0)


def test_tokenize_for_bleu_exact_strings():
  assert bleu.tokenize_for_bleu(HYP) == HYP_TOK
  assert bleu.tokenize_for_bleu(REF) == REF_TOK
  # tokenizer.perl escapes quotes and splits punctuation; numbers keep their comma.
  assert (bleu.tokenize_for_bleu('Er sagte: "Es kostet 3,5 Mio. Euro."')
          == 'Er sagte : &quot; Es kostet 3,5 Mio. Euro . &quot;')
  # -l de: an apostrophe is split off on both sides (the English rule differs).
  assert bleu.tokenize_for_bleu("Don't") == 'Don &apos; t'
  assert bleu.tokenize_for_bleu("Don't", lang='en') == 'Don &apos;t'


def test_split_compounds_like_the_perl_one_liner():
  assert bleu.split_compounds('rich-text format') == 'rich ##AT##-##AT## text format'
  assert bleu.split_compounds('Straßen-Bahn') == 'Straßen ##AT##-##AT## Bahn'
  # Perl's s///g does not overlap matches: the middle 'y' is used by the first.
  assert bleu.split_compounds('x-y-z') == 'x ##AT##-##AT## y-z'
  assert bleu.split_compounds('a - b -c d-') == 'a - b -c d-'  # needs \S on both sides


def test_tokenized_bleu_hand_computed():
  # 9 tokens each, one substitution at position 8 of 9 ('schlecht' vs 'gut'):
  #   1-grams 8/9, 2-grams 6/8, 3-grams 5/7, 4-grams 4/6, BP = 1.
  expected = 100 * (8 / 9 * 6 / 8 * 5 / 7 * 4 / 6) ** 0.25
  assert expected == pytest.approx(75.0623854, rel=1e-8)
  result = bleu.tokenized_bleu([HYP], [REF])
  assert result.score == pytest.approx(expected, rel=1e-9)
  assert result.counts == (8, 6, 5, 4) and result.totals == (9, 8, 7, 6)
  assert result.sys_len == result.ref_len == 9
  # Same as sacreBLEU on the tokenized strings taken as they are.
  plain = sacrebleu.corpus_bleu([HYP_TOK], [[REF_TOK]], tokenize='none', force=True)
  assert result.score == pytest.approx(plain.score, rel=1e-12)
  # The detokenized score differs: 13a keeps 'Rich-Text-Format' as one token,
  # 5 tokens: 1-grams 4/5, 2-grams 2/4, 3-grams 1/3, 4-grams 0/2, the last
  # smoothed by sacreBLEU's 'exp' method to 1 / (2 * 2) = 25%.
  detok = bleu.corpus_bleu([HYP], [REF])
  assert detok.counts == (4, 2, 1, 0) and detok.totals == (5, 4, 3, 2)
  assert detok.score == pytest.approx((80 * 50 * (100 / 3) * 25) ** 0.25, rel=1e-9)
  assert detok.score == pytest.approx(42.7287006, rel=1e-8)
  assert result.signature.endswith(
      f"|pretok:moses-de+atat|sacremoses:{metadata.version('sacremoses')}")
  assert 'tok:none|smooth:none' in result.signature


def test_tokenized_bleu_is_unsmoothed_like_multi_bleu():
  # 'Ja , gut .' vs 'Ja , schlecht .': no 4-gram matches, so multi-bleu.perl says 0.
  result = bleu.tokenized_bleu(['Ja, gut.'], ['Ja, schlecht.'])
  assert result.counts == (3, 1, 0, 0)
  assert result.score == 0.0
  smoothed = sacrebleu.corpus_bleu(['Ja , gut .'], [['Ja , schlecht .']], tokenize='none')
  assert smoothed.score > 0.0


def test_mismatched_lists_raise():
  with pytest.raises(ValueError, match='2 hypotheses but 1 references'):
    bleu.corpus_bleu(['a', 'b'], ['a'])
  with pytest.raises(ValueError, match='1 hypotheses but 2 references'):
    bleu.tokenized_bleu(['a'], ['a', 'b'])


def _write(path, content):
  mode = 'wb' if isinstance(content, bytes) else 'w'
  with open(path, mode, **({} if mode == 'wb' else {'encoding': 'utf-8'})) as f:
    f.write(content)
  return str(path)


def _cli(*args):
  return subprocess.run([sys.executable, '-m', 't2t_jax.inference.bleu', *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=120, check=False)


def test_cli_scores_files(tmp_path):
  hyp = _write(tmp_path / 'hyp.txt', '\n'.join(HYPS + [HYP]) + '\n')
  ref = _write(tmp_path / 'ref.txt', '\n'.join(REFS + [REF]) + '\n')
  detok = bleu.corpus_bleu(HYPS + [HYP], REFS + [REF])
  tok = bleu.tokenized_bleu(HYPS + [HYP], REFS + [REF])
  assert tok.score != pytest.approx(detok.score, abs=0.01)

  proc = _cli('--hyp', hyp, '--ref', ref)
  assert proc.returncode == 0, proc.stderr
  assert f'BLEU = {detok.score:.2f} ' in proc.stdout
  assert detok.signature in proc.stdout

  proc = _cli('--hyp', hyp, '--ref', ref, '--tokenized')
  assert proc.returncode == 0, proc.stderr
  assert f'BLEU = {tok.score:.2f} ' in proc.stdout
  assert 'pretok:moses-de+atat' in proc.stdout


def test_python_m_prints_only_the_score_and_the_package_still_exports_it(tmp_path):
  hyp = _write(tmp_path / 'hyp.txt', 'a b c d\n')
  proc = _cli('--hyp', hyp, '--ref', hyp)
  assert proc.returncode == 0
  assert proc.stderr == ''  # no runpy RuntimeWarning about t2t_jax.inference.bleu run a second time
  assert proc.stdout.startswith('BLEU = 100.00 ') and proc.stdout.count('\n') == 1
  import t2t_jax
  assert t2t_jax.corpus_bleu is bleu.corpus_bleu and t2t_jax.tokenized_bleu is (
      bleu.tokenized_bleu)


def test_cli_line_count_mismatch_names_both_files(tmp_path):
  hyp = _write(tmp_path / 'hyp.txt', 'a b c\nd e f\n')
  ref = _write(tmp_path / 'ref.txt', 'a b c\nd e f\ng h i\n')
  proc = _cli('--hyp', hyp, '--ref', ref)
  assert proc.returncode == 1
  assert hyp in proc.stderr and ref in proc.stderr
  assert 'has 2 lines' in proc.stderr and 'has 3 lines' in proc.stderr
  with pytest.raises(ValueError, match='line counts differ'):
    bleu.bleu_from_files(hyp, ref)


def test_missing_and_non_utf8_files_are_named(tmp_path):
  ref = _write(tmp_path / 'ref.txt', 'a b c\n')
  missing = str(tmp_path / 'nope.txt')
  proc = _cli('--hyp', missing, '--ref', ref)
  assert proc.returncode == 1 and missing in proc.stderr
  bad = _write(tmp_path / 'latin1.txt', 'ok\nStra\xdfe\n'.encode('latin-1'))
  with pytest.raises(ValueError, match=r'latin1\.txt is not valid UTF-8.*line 2'):
    bleu.read_lines(bad)
  proc = _cli('--hyp', bad, '--ref', ref, '--tokenized')
  assert proc.returncode == 1 and bad in proc.stderr and 'UTF-8' in proc.stderr


def test_a_folder_is_not_read_as_text(tmp_path):
  with pytest.raises(textio.TextFileError, match=rf'^{tmp_path} is a directory; expected a '
                     'UTF-8 text file$'):
    bleu.read_lines(str(tmp_path))


def test_read_lines_splits_on_newline_only(tmp_path):
  path = _write(tmp_path / 'x.txt', 'eins\u2028zwei\r\ndrei\n\nvier')
  assert bleu.read_lines(path) == ['eins\u2028zwei', 'drei', '', 'vier']
