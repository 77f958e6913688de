"""EVALB's parameters: the `.prm` settings, the COLLINS.prm preset, and a `.prm` file reader.

The fields are the keywords of EVALB's parameter files (Sekine and Collins, `evalb.c`):

* LABELED 0|1: unlabelled or labelled bracket matching.
* DELETE_LABEL X: a preterminal tagged X is removed with its word (exact tag); a bracket
  whose label, function tags stripped, equals X (EQ_LABEL applies) is not scored.
* DELETE_LABEL_FOR_LENGTH X: words tagged X do not count in the sentence length that
  decides the `len<=CUTOFF_LEN` section (only that; they are still scored).
* QUOTE_LABEL X: the 2006 repair of length mismatches: a word `'`, `"` or `/` tagged X that
  one tree deletes and the other keeps is put back into the tree that deleted it.
* EQ_LABEL A B / EQ_WORD A B: the pair compares equal (labels, tags; words).
* MAX_ERROR n: the run gives up at the (n+2)-th error sentence, as `evalb.c` does.
* CUTOFF_LEN n: the length limit of the second summary section.
* DEBUG n: accepted for compatibility; the debug dumps are not reproduced.
"""

import dataclasses
import functools
import re
from typing import Optional, Sequence

from t2t_jax.storage import textio

# C's isspace() in the "C" locale; Python's str.isspace() knows more characters.
WHITESPACE = ' \t\n\v\f\r'
_SPLIT = re.compile(f'[{WHITESPACE}]+')
_QUOTE_WORDS = ("'", '"', '/')


class EvalbError(ValueError):
  """Bad EVALB input (a tree, a file pairing or a parameter file), as a one-line message."""


@dataclasses.dataclass(frozen=True)
class EvalbParams:
  """One EVALB parameter set; the defaults are `evalb.c`'s own, without a `.prm` file.

  `max_error=None` never gives up (what an evaluation during training wants: early models
  produce many length mismatches).
  """
  labeled: bool = True
  delete_labels: tuple[str, ...] = ()
  delete_labels_for_length: tuple[str, ...] = ()
  quote_labels: tuple[str, ...] = ()
  eq_labels: tuple[tuple[str, str], ...] = ()
  eq_words: tuple[tuple[str, str], ...] = ()
  max_error: Optional[int] = 10
  cutoff_len: int = 40

  @functools.cached_property
  def _eq_label_pairs(self) -> frozenset:
    return frozenset(self.eq_labels) | frozenset((b, a) for a, b in self.eq_labels)

  @functools.cached_property
  def _eq_word_pairs(self) -> frozenset:
    return frozenset(self.eq_words) | frozenset((b, a) for a, b in self.eq_words)

  def label_eq(self, a: str, b: str) -> bool:
    """Labels (or tags) equal, or a pair listed in EQ_LABEL (in either order)."""
    return a == b or (a, b) in self._eq_label_pairs

  def word_eq(self, a: str, b: str) -> bool:
    """Words equal, or a pair listed in EQ_WORD (in either order)."""
    return a == b or (a, b) in self._eq_word_pairs

  def is_deleted_tag(self, tag: str) -> bool:
    """A preterminal with this exact tag is removed with its word (no EQ_LABEL here)."""
    return tag in self.delete_labels

  def is_deleted_bracket(self, label: str) -> bool:
    """A bracket with this label (function tags already stripped) is not scored."""
    return any(self.label_eq(label, d) for d in self.delete_labels)

  def is_quote_term(self, tag: str, word: str) -> bool:
    """A preterminal that the QUOTE_LABEL repair may put back into a tree."""
    return tag in self.quote_labels and word in _QUOTE_WORDS


# COLLINS.prm as distributed with EVALB: the standard setting for WSJ parsing results.
COLLINS = EvalbParams(
    labeled=True,
    delete_labels=('TOP', '-NONE-', ',', ':', '``', "''", '.'),
    delete_labels_for_length=('-NONE-',),
    eq_labels=(('ADVP', 'PRT'),),
    max_error=10,
    cutoff_len=40)

# new.prm (EVALB 2006): COLLINS.prm plus Charniak's S1 root, `?` and `!`, and the quote repair.
NEW = dataclasses.replace(
    COLLINS,
    delete_labels=COLLINS.delete_labels[:1] + ('S1',) + COLLINS.delete_labels[1:] + ('?', '!'),
    quote_labels=('``', "''", 'POS', 'NN', 'CD', 'VBZ', ':'))

_INT_KEYS = {'DEBUG': None, 'MAX_ERROR': 'max_error', 'CUTOFF_LEN': 'cutoff_len',
             'LABELED': 'labeled'}
_LIST_KEYS = {'DELETE_LABEL': 'delete_labels',
              'DELETE_LABEL_FOR_LENGTH': 'delete_labels_for_length',
              'QUOTE_LABEL': 'quote_labels'}
_PAIR_KEYS = {'EQ_LABEL': 'eq_labels', 'EQ_WORD': 'eq_words'}


def parse_params(lines: Sequence[str], name: str = 'parameter file') -> EvalbParams:
  """Reads the lines of an EVALB `.prm` file, starting from `evalb.c`'s defaults.

  As `evalb.c`: a line starting with `#` or shorter than 3 characters is skipped, the key is
  the text up to the first space and the value the rest of the line (so a DELETE_LABEL value
  is taken whole). Where `evalb.c` only warns or reads garbage (an unknown key, no value, a
  non-integer, EQ_LABEL without exactly two labels), this raises EvalbError naming the line.
  """
  fields = {f.name: getattr(EvalbParams(), f.name) for f in dataclasses.fields(EvalbParams)}
  for number, raw in enumerate(lines, 1):
    line = raw[:1] + raw[1:].rstrip(WHITESPACE)  # evalb.c never strips the first character
    if line.startswith('#') or len(line) < 3:
      continue
    key, value = _split_key(line)
    where = f'{name}:{number}'
    if key not in _INT_KEYS and key not in _LIST_KEYS and key not in _PAIR_KEYS:
      raise EvalbError(f'{where}: unknown key {key!r}; expected one of '
                       f'{", ".join([*_INT_KEYS, *_LIST_KEYS, *_PAIR_KEYS])}')
    if not value:
      raise EvalbError(f'{where}: {key} has no value')
    if key in _INT_KEYS:
      if not re.fullmatch(r'[+-]?[0-9]+', value):
        raise EvalbError(f'{where}: {key} expects an integer, got {value!r}')
      if key == 'LABELED' and value not in ('0', '1'):
        raise EvalbError(f'{where}: LABELED expects 0 (unlabelled) or 1 (labelled), got {value}')
      if _INT_KEYS[key]:
        fields[_INT_KEYS[key]] = bool(int(value)) if key == 'LABELED' else int(value)
    elif key in _LIST_KEYS:
      fields[_LIST_KEYS[key]] += (value,)
    else:
      pair = _SPLIT.split(value)
      if len(pair) != 2:
        raise EvalbError(f'{where}: {key} expects two values, got {value!r}')
      fields[_PAIR_KEYS[key]] += (tuple(pair),)
  return EvalbParams(**fields)


def _split_key(line: str) -> tuple[str, str]:
  """(key, value): the text before the first space (empty if the line starts with one), the
  rest without its leading spaces."""
  match = _SPLIT.search(line)
  if match is None:
    return line, ''
  return line[:match.start()], line[match.end():]


def read_params(path: str) -> EvalbParams:
  """Reads an EVALB `.prm` file (see `parse_params`)."""
  return parse_params(textio.read_lines(path), name=path)
