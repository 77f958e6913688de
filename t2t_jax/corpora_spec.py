"""`--config.corpora`: the syntax of a training mixture of local corpora (the sampling is
`data/mixture.py`'s).

The value is comma-separated entries `[SRC-TGT=]DIR[:WEIGHT[:TAG]]`:

  SRC-TGT  the language pair the entry reads, the files `train.SRC` and `train.TGT` of DIR (so
           one folder serves both directions); by default the run's source_lang-target_lang.
  DIR      a corpus folder, as `local_corpus_dir` reads one.
  WEIGHT   the entry's part of the sampled training pairs: a number > 0, its share relative to
           the other entries' numbers (fairseq's `--sampling-weights`, OpenNMT-py's `weight`), or
           `xK`, K > 0 times its size (`x4` upsamples it four times, fairseq's
           `--upsample-primary`); none is `x1`, its size: with no weights at all the mixture is
           the plain concatenation. Numbers and sizes do not mix in one value.
  TAG      a token put before each of the entry's sources (`<bt>`: tagged back-translation,
           Caswell et al. 2019); the vocabulary keeps it one piece (a user-defined symbol).

Every refusal is one `ConfigError` line naming the entry.
"""

import dataclasses
import math
import os
import re
from typing import List, Optional, Tuple

from t2t_jax.choices import ConfigError

_PAIR = re.compile(r'^([A-Za-z0-9_]+)-([A-Za-z0-9_]+)=(.*)$')
# DIR, then optional :WEIGHT and :TAG that hold no ':' or '/' (a gs:// folder keeps its '//').
_ENTRY = re.compile(r'^(.+?)(?::([^:/]*)(?::([^:/]*))?)?$')


@dataclasses.dataclass(frozen=True)
class Entry:
  """One corpus of a mixture.

  Attributes:
    source_lang, target_lang: the files it reads, train.SRC and train.TGT (dev and test
      likewise, for the entry that gives the run its evaluation splits).
    folder: its folder as written (made absolute by `absolute`).
    share: its WEIGHT when a number, else None.
    times: K of a WEIGHT `xK` (1.0 without a WEIGHT), else None.
    tag: the token before its sources, '' for none.
    name: what logs and `info` call it: the folder's name, with the pair where two entries
      share a folder name (`data/share/<name>`).
  """
  source_lang: str
  target_lang: str
  folder: str
  share: Optional[float]
  times: Optional[float]
  tag: str
  name: str = ''
  pair_given: bool = True

  @property
  def pair(self) -> str:
    return f'{self.source_lang}-{self.target_lang}'

  @property
  def key(self) -> str:
    """What of the entry decides the data order besides its files' content (which the data
    fingerprint compares, wherever the folder is now): 'SRC-TGT:WEIGHT[:TAG]'."""
    return self.written('', full=True).replace('=:', ':', 1)

  def written(self, folder: Optional[str] = None, full: bool = True) -> str:
    """The entry as `--config.corpora` spells it, every part written out (the pair only
    where it was given, unless `full`), with `folder` for its folder."""
    weight = f'{self.share:g}' if self.share is not None else f'x{self.times:g}'
    pair = f'{self.pair}=' if full or self.pair_given else ''
    return (f'{pair}{self.folder if folder is None else folder}:{weight}'
            + (f':{self.tag}' if self.tag else ''))


def _weight(text: Optional[str], entry: str) -> Tuple[Optional[float], Optional[float]]:
  """(share, times) of a WEIGHT."""
  if text is None or text == '':
    return None, 1.0
  times = text[:1] in ('x', 'X')
  number = text[1:] if times else text
  try:
    value = float(number)
  except ValueError:
    value = float('nan')
  if not math.isfinite(value) or value <= 0:
    raise ConfigError(f'--config.corpora entry {entry!r}: its WEIGHT {text!r} is not a number '
                      '> 0 (a share) or xK with K > 0 (K times its size)')
  return (None, value) if times else (value, None)


def _entry(text: str, source_lang: str, target_lang: str) -> Entry:
  src, tgt, rest = source_lang, target_lang, text
  match = _PAIR.match(text)
  if match:
    src, tgt, rest = match.groups()
  folder, weight, tag = _ENTRY.match(rest).groups() if rest else ('', None, None)
  if not folder:
    raise ConfigError(f'--config.corpora entry {text!r}: no corpus folder (expected '
                      '[SRC-TGT=]DIR[:WEIGHT[:TAG]])')
  if src == tgt:
    raise ConfigError(f'--config.corpora entry {text!r}: the pair {src}-{tgt} translates a '
                      'language into itself')
  if tag is not None and (not tag or any(c.isspace() for c in tag)):
    raise ConfigError(f'--config.corpora entry {text!r}: its TAG {tag!r} is not one token '
                      '(non-empty, no spaces)')
  share, times = _weight(weight, text)
  return Entry(src, tgt, folder, share, times, tag or '', pair_given=bool(match))


def parse(value: str, source_lang: str, target_lang: str) -> List[Entry]:
  """The entries of a `--config.corpora` value ([] for ''), named; ConfigError (one line) for
  a malformed entry, a corpus given twice, or numbers and sizes mixed as weights."""
  if not value.strip():
    return []
  entries = []
  for k, text in enumerate(value.split(',')):
    if not text.strip():
      raise ConfigError(f'--config.corpora={value!r}: entry {k + 1} is empty')
    entries.append(_entry(text.strip(), source_lang, target_lang))
  seen = {}
  for entry in entries:
    key = (os.path.normpath(entry.folder), entry.pair)
    if key in seen:
      raise ConfigError(f'--config.corpora: {entry.folder} ({entry.pair}) is given twice '
                        f'({seen[key]!r} and {entry.written()!r}); give one entry a WEIGHT '
                        'instead')
    seen[key] = entry.written()
  if len({entry.share is None for entry in entries}) > 1:
    raise ConfigError(f'--config.corpora={value!r}: weights mix numbers (shares) and sizes '
                      '(xK, or no WEIGHT); give every entry a number, or none')
  return _named(entries)


def _named(entries: List[Entry]) -> List[Entry]:
  base = [os.path.basename(os.path.normpath(e.folder)) or e.folder for e in entries]
  names = [b if base.count(b) == 1 else f'{b}.{e.pair}' for b, e in zip(base, entries)]
  names = [n if names.count(n) == 1 else f'{n}.{k + 1}' for k, n in enumerate(names)]
  return [dataclasses.replace(e, name=n) for e, n in zip(entries, names)]


def absolute(value: str, absolute_path, source_lang: Optional[str] = None,
             target_lang: Optional[str] = None) -> str:
  """`value` with every folder made absolute (`absolute_path`) and every WEIGHT written out;
  with the run's languages, every pair too: the canonical form a run records, whose entries
  keep their pairs when a later command gives another `target_lang`. Without them a pair is
  written only where given. '' stays ''."""
  if source_lang is None or target_lang is None:  # placeholders: only a pair given is written
    return ','.join(e.written(absolute_path(e.folder), full=False)
                    for e in parse(value, '\x00s', '\x00t'))
  return ','.join(e.written(absolute_path(e.folder))
                  for e in parse(value, source_lang, target_lang))


def check(config) -> None:
  """ConfigError (one line) unless `config.corpora` ('' or a mixture) fits the run's other
  keys: a mixture is of local corpora, in place of `local_corpus_dir`."""
  value = config.get('corpora', '')
  if not value:
    return
  if config.dataset != 'local':
    raise ConfigError(f"config key 'corpora': a mixture of local corpora needs "
                      f"dataset='local' (dataset is {config.dataset!r})")
  if config.local_corpus_dir:
    raise ConfigError("config key 'corpora': give the corpus of local_corpus_dir="
                      f"{config.local_corpus_dir!r} as an entry of corpora instead of both")
  parse(value, config.source_lang, config.target_lang)
