"""textio: the plain-text lines that decode, attention and BLEU read."""

import pytest

from t2t_jax.storage import textio

_TEXT = 'Remember the beginning.\r\nAcuérdate \ufeff del principio\n\nlast'


def test_a_leading_byte_order_mark_is_not_text(tmp_path):
  plain, marked = tmp_path / 'plain.txt', tmp_path / 'bom.txt'
  plain.write_bytes(_TEXT.encode('utf-8'))
  marked.write_bytes(b'\xef\xbb\xbf' + _TEXT.encode('utf-8'))  # what Notepad writes
  expected = ['Remember the beginning.', 'Acuérdate \ufeff del principio', '', 'last']
  assert textio.read_lines(str(plain)) == expected
  assert textio.read_lines(str(marked)) == expected
  # One mark is the encoding's; a second (or one inside a line) is the text's own.
  assert textio.decode_lines(b'\xef\xbb\xbf\xef\xbb\xbfa\n', 'x') == ['\ufeffa']
  assert textio.decode_lines(b'\xef\xbb\xbf', 'x') == []


def test_invalid_utf8_names_the_file_and_line(tmp_path):
  path = tmp_path / 'latin1.txt'
  path.write_bytes(b'\xef\xbb\xbfone\ntw\xf6\n')
  with pytest.raises(textio.TextFileError,
                     match=f'^{path} is not valid UTF-8: byte 9 \\(line 2\\): invalid start byte$'):
    textio.read_lines(str(path))
