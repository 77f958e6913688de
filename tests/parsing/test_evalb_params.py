"""Tests for t2t_jax.parsing.evalb.params: EVALB's .prm settings and file reader."""

import os

import pytest

from t2t_jax.parsing import evalb
from t2t_jax.parsing.evalb.params import EvalbParams, parse_params

EVALB_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures', 'evalb')


def test_presets_equal_the_distributed_prm_files():
  assert evalb.read_params(os.path.join(EVALB_DIR, 'COLLINS.prm')) == evalb.COLLINS
  assert evalb.read_params(os.path.join(EVALB_DIR, 'new.prm')) == evalb.NEW


def test_parse_rules_of_evalb_c():
  params = parse_params([
      '# a comment', '', 'x', 'DEBUG 1', 'LABELED 0', 'MAX_ERROR   3  ', 'CUTOFF_LEN\t7',
      'DELETE_LABEL A B', 'DELETE_LABEL_FOR_LENGTH ,', 'QUOTE_LABEL POS',
      'EQ_LABEL ADVP  PRT', 'EQ_WORD This this'])
  # The line `x` is under 3 characters: skipped. A DELETE_LABEL value is the rest of the line.
  assert params == EvalbParams(labeled=False, delete_labels=('A B',),
                               delete_labels_for_length=(',',), quote_labels=('POS',),
                               eq_labels=(('ADVP', 'PRT'),), eq_words=(('This', 'this'),),
                               max_error=3, cutoff_len=7)
  assert params.label_eq('PRT', 'ADVP') and params.word_eq('this', 'This')
  assert not params.label_eq('PRT', 'RP')


def test_deleted_bracket_labels_use_eq_label_but_deleted_tags_do_not():
  params = EvalbParams(delete_labels=('ADVP',), eq_labels=(('ADVP', 'PRT'),))
  assert params.is_deleted_bracket('PRT')
  assert params.is_deleted_tag('ADVP') and not params.is_deleted_tag('PRT')


@pytest.mark.parametrize('line, message', [
    ('LABELLED 1', r"^p.prm:2: unknown key 'LABELLED'; expected one of DEBUG, MAX_ERROR"),
    ('  LABELED 1', r"^p.prm:2: unknown key ''"),
    ('LABELED 2', r'^p.prm:2: LABELED expects 0 \(unlabelled\) or 1 \(labelled\), got 2$'),
    ('MAX_ERROR ten', r"^p.prm:2: MAX_ERROR expects an integer, got 'ten'$"),
    ('EQ_LABEL ADVP', r"^p.prm:2: EQ_LABEL expects two values, got 'ADVP'$"),
    ('DELETE_LABEL', r'^p.prm:2: DELETE_LABEL has no value$'),
])
def test_bad_parameter_lines(line, message):
  with pytest.raises(evalb.EvalbError, match=message):
    parse_params(['# first line', line], name='p.prm')


def test_missing_parameter_file(tmp_path):
  with pytest.raises(FileNotFoundError, match='no such file'):
    evalb.read_params(str(tmp_path / 'none.prm'))
