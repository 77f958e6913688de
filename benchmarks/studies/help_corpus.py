"""A second parallel corpus for the embedded default: LibreOffice's help, English -> German.

The embedded default is tuned on Bible verses, EN->ES (the bundled corpus). A recipe tuned on one
corpus is checked unchanged on text of another kind and language pair: software documentation,
EN->DE, paragraph-aligned from Debian's `libreoffice-help-en-us` and `libreoffice-help-de`
packages (MPL-2.0). The help pages of every language are generated from the same sources, so a
paragraph keeps its `id` (`par_id3150445`, `hd_id3149180`) in every language: pairing the two
packages' pages by (file, id) aligns them exactly, with no sentence aligner.

The corpus is made on demand and stays out of the repository:

  python -m benchmarks.studies.help_corpus --out /tmp/help_en_de          # fetches the two .debs
  python main.py --workdir=/tmp/q_help --config.local_corpus_dir=/tmp/help_en_de \\
      --config.target_lang=de

Splits are by page (sha1 of the page's path), so no page lends paragraphs to two splits, and a
paragraph whose English text already appeared earlier (in sorted page order) is dropped, so no
test source is also a training source. Writes {train,dev,test}.{en,de} and README.txt (counts,
package versions, licence).
"""

import argparse
import glob
import hashlib
import html.parser
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

PACKAGES = {'en': 'libreoffice-help-en-us', 'de': 'libreoffice-help-de'}
HELP_DIRS = {'en': 'en-US', 'de': 'de'}
# Percent of pages per split, by the page's hash: about 500 dev and 1,000 test paragraphs.
DEV_PERCENT, TEST_PERCENT = 2, 4
MAX_WORDS = 60            # longer paragraphs are tables flattened into text, or lists
_ALIGNED = re.compile(r'^(par|hd)_')


class _Paragraphs(html.parser.HTMLParser):
  """Collects the text of every element whose id starts `par_` or `hd_`, by id.

  Inside a paragraph, a hidden element is dropped unless its id starts `default`: the help's
  `switchinline` spans hold one variant per system ("LibreOffice - Preferences" for macOS,
  "Tools - Options" by default), all hidden, and the page's script shows one.
  """

  def __init__(self) -> None:
    super().__init__(convert_charrefs=True)
    self.texts: Dict[str, str] = {}
    self._stack: List[Tuple[str, Optional[str], bool]] = []   # (tag, paragraph id, skipped)

  def handle_starttag(self, tag: str, attrs: Sequence[Tuple[str, Optional[str]]]) -> None:
    if tag in ('br', 'img', 'input', 'meta', 'link', 'hr', 'wbr'):   # elements with no end tag
      self.handle_data(' ')
      return
    a = dict(attrs)
    ident = a.get('id') or ''
    outer = self._stack[-1] if self._stack else None
    skipped = bool(outer and outer[2]) or (
        outer is not None and outer[1] is not None and 'hidden' in a
        and not ident.startswith('default'))
    paragraph = outer[1] if outer and outer[1] else (ident if _ALIGNED.match(ident) else None)
    if paragraph and paragraph not in self.texts:
      self.texts[paragraph] = ''
    self._stack.append((tag, paragraph, skipped))

  def handle_endtag(self, tag: str) -> None:
    for i in range(len(self._stack) - 1, -1, -1):
      if self._stack[i][0] == tag:
        del self._stack[i:]
        return

  def handle_data(self, data: str) -> None:
    if self._stack and self._stack[-1][1] and not self._stack[-1][2]:
      self.texts[self._stack[-1][1]] += data


def paragraphs(page_html: str) -> Dict[str, str]:
  """id -> whitespace-normalised text of the page's aligned paragraphs and headings."""
  parser = _Paragraphs()
  parser.feed(page_html)
  parser.close()
  return {k: ' '.join(v.split()) for k, v in parser.texts.items()}


def split_of(page: str) -> str:
  """'dev', 'test' or 'train' for a page path relative to the language's help folder."""
  bucket = int(hashlib.sha1(page.encode('utf-8')).hexdigest(), 16) % 100
  return 'dev' if bucket < DEV_PERCENT else 'test' if bucket < DEV_PERCENT + TEST_PERCENT else 'train'


def aligned_pairs(en_root: str, de_root: str) -> Iterator[Tuple[str, str, str]]:
  """(split, English, German) for every paragraph of every page both languages have, pages in
  sorted order; untranslated (identical), empty and over-long paragraphs are left out."""
  for en_path in sorted(glob.glob(os.path.join(en_root, '**', '*.html'), recursive=True)):
    page = os.path.relpath(en_path, en_root)
    de_path = os.path.join(de_root, page)
    if not os.path.isfile(de_path):
      continue
    with open(en_path, encoding='utf-8') as f:
      en = paragraphs(f.read())
    with open(de_path, encoding='utf-8') as f:
      de = paragraphs(f.read())
    for ident, src in en.items():
      tgt = de.get(ident, '')
      if src and tgt and src != tgt and len(src.split()) <= MAX_WORDS and len(tgt.split()) <= MAX_WORDS:
        yield split_of(page), src, tgt


def _unpack(debs: str, lang: str, into: str) -> Tuple[str, str]:
  """Unpacks the language's help package (fetched into `debs` when absent); returns its help
  folder and the package's file name (which carries the version)."""
  found = glob.glob(os.path.join(debs, PACKAGES[lang] + '_*.deb'))
  if not found:
    subprocess.run(['apt-get', 'download', PACKAGES[lang]], cwd=debs, check=True)
    found = glob.glob(os.path.join(debs, PACKAGES[lang] + '_*.deb'))
  deb = sorted(found)[-1]
  subprocess.run(['dpkg-deb', '-x', deb, into], check=True)
  name = urllib.parse.unquote(os.path.basename(deb))   # apt writes the epoch's ':' as %3a
  return os.path.join(into, 'usr', 'share', 'libreoffice', 'help', HELP_DIRS[lang]), name


def build(out: str, debs: str) -> Dict[str, int]:
  """Writes the corpus into `out`; returns the pair count per split."""
  os.makedirs(out, exist_ok=True)
  os.makedirs(debs, exist_ok=True)
  existing = [f for f in os.listdir(out) if re.match(r'(train|dev|test)\.(en|de)$', f)]
  if existing:
    sys.exit(f'error: {out} already holds {sorted(existing)}; pick an empty folder')
  with tempfile.TemporaryDirectory() as tmp:
    en_root, en_deb = _unpack(debs, 'en', os.path.join(tmp, 'en'))
    de_root, de_deb = _unpack(debs, 'de', os.path.join(tmp, 'de'))
    seen, splits = set(), {'train': [], 'dev': [], 'test': []}
    for split, src, tgt in aligned_pairs(en_root, de_root):
      if src not in seen:
        seen.add(src)
        splits[split].append((src, tgt))
  for split, pairs in splits.items():
    for lang, column in (('en', 0), ('de', 1)):
      with open(os.path.join(out, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.writelines(pair[column] + '\n' for pair in pairs)
  counts = {split: len(pairs) for split, pairs in splits.items()}
  with open(os.path.join(out, 'README.txt'), 'w', encoding='utf-8') as f:
    f.write(f'LibreOffice help, English -> German, paragraph-aligned by page and id.\n'
            f'Made by benchmarks/studies/help_corpus.py from {en_deb} and {de_deb} '
            f'(Debian; MPL-2.0).\n'
            f'Pairs: {counts}\n')
  return counts


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', required=True, help='empty folder for {train,dev,test}.{en,de}')
  parser.add_argument('--debs', default='', help='folder with (or for) the two .deb files')
  args = parser.parse_args()
  debs = args.debs or os.path.join(args.out, 'debs')
  print(build(args.out, debs))


if __name__ == '__main__':
  main()
