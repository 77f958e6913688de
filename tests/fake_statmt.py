"""Small synthetic stand-ins for the statmt.org archives `wmt14_translate` downloads,
served by a loopback HTTP proxy, so the real download, extraction and parsing run offline.

The archives have the real names, folder layout and file formats (plain parallel text,
gzip files in a tar, SGML test sets), with lines of the bundled KJV / Reina-Valera corpus
posing as English / German or French, plus the kind of irregularities the real files have
(an empty side, a carriage return inside a line, files of other language pairs beside the
ones used).
"""

import contextlib
import gzip
import hashlib
import http.server
import io
import os
import tarfile
import threading
from typing import Iterator

BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       't2t_jax', 'data', 'bible_en_es')

EUROPARL = 'http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz'
COMMONCRAWL = 'http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz'
NEWS_COMMENTARY = 'http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz'
MULTIUN = 'http://www.statmt.org/wmt13/training-parallel-un.tgz'
GIGAFREN = 'http://www.statmt.org/wmt10/training-giga-fren.tar'
DEV = 'http://data.statmt.org/wmt19/translation-task/dev.tgz'

# Pair -> training sub-dataset -> pairs written (europarl's include one with an empty side).
TRAIN_PAIRS = {
    'de-en': {'europarl': 300, 'commoncrawl': 250, 'news_commentary': 250},
    'fr-en': {'europarl': 40, 'commoncrawl': 30, 'multiun': 30, 'news_commentary': 30,
              'gigafren': 30},
}
DEV_PAIRS, TEST_PAIRS = 48, 40


def _bundled(lang: str, start: int, count: int) -> list[str]:
  with gzip.open(os.path.join(BUNDLED, f'train.{lang}.gz'), 'rt', encoding='utf-8') as f:
    lines = [line.rstrip('\n') for line in f][start:start + count]
  assert len(lines) == count
  return lines


def _pairs(start: int, count: int) -> tuple[list[str], list[str]]:
  """(fake German or French, English): Spanish verses pose as the other language."""
  return _bundled('es', start, count), _bundled('en', start, count)


def _text(lines: list[str]) -> bytes:
  return ''.join(line + '\n' for line in lines).encode('utf-8')


def _sgm(lines: list[str], tag: str, lang: str) -> bytes:
  """newstest2014 SGML: one document per 10 segments, headlines in <hl>, paragraphs in <p>."""
  head = (f'<srcset setid="newstest2014" srclang="any">' if tag == 'src' else
          f'<refset setid="newstest2014" srclang="any" trglang="{lang}">')
  out = [head]
  for doc_start in range(0, len(lines), 10):
    out.append(f'<doc sysid="{tag}" docid="{doc_start}-bbc" genre="news" origlang="en">')
    for i in range(doc_start, min(doc_start + 10, len(lines))):
      seg = f'<seg id="{i + 1}">{lines[i]}</seg>'
      out.extend(['<hl>', seg, '</hl>'] if i == doc_start else ['<p>', seg, '</p>'])
    out.append('</doc>')
  out.append(f'</{tag}set>')
  return _text(out)


def tar_archive(files: dict[str, bytes], mode: str = 'w:gz') -> bytes:
  """The bytes of a tar archive (mode 'w:gz': gzip-compressed) holding `files`; the same
  bytes on every call (tarfile's own gzip header would hold the current second)."""
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode='w') as tar:
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return gzip.compress(buf.getvalue(), mtime=0) if mode == 'w:gz' else buf.getvalue()


def train_pairs(pair: str = 'de-en') -> dict[str, tuple[list[str], list[str]]]:
  """Sub-dataset -> (xx lines, en lines) as written, irregularities included."""
  out, start = {}, 0
  for name, count in TRAIN_PAIRS[pair].items():
    out[name] = _pairs(start, count)
    start += count
  out['europarl'][0][7] = ''  # an empty side: the builder drops this pair
  # A carriage return inside a line (as in the real Common Crawl files) must not split it.
  out['commoncrawl'][1][3] = out['commoncrawl'][1][3].replace(' ', ' \r', 1)
  return out


def newstest2013_pairs() -> tuple[list[str], list[str]]:
  return _pairs(20000, DEV_PAIRS)


def newstest2014_pairs() -> tuple[list[str], list[str]]:
  return _pairs(21000, TEST_PAIRS)


def archives(pair: str = 'de-en') -> dict[str, bytes]:
  """URL -> archive bytes for everything `wmt14_translate/<pair>` downloads."""
  xx = pair.split('-')[0]
  train = {name: (_text(a), _text(b)) for name, (a, b) in train_pairs(pair).items()}
  (dev_xx, dev_en), (test_xx, test_en) = newstest2013_pairs(), newstest2014_pairs()
  other = _text(['Andere Sprache.'] * 5)  # files of other pairs, which must not be read
  files = {
      EUROPARL: {f'training/europarl-v7.{xx}-en.{xx}': train['europarl'][0],
                 f'training/europarl-v7.{xx}-en.en': train['europarl'][1],
                 'training/europarl-v7.cs-en.cs': other, 'training/europarl-v7.cs-en.en': other},
      COMMONCRAWL: {f'commoncrawl.{xx}-en.{xx}': train['commoncrawl'][0],
                    f'commoncrawl.{xx}-en.en': train['commoncrawl'][1],
                    f'commoncrawl.{xx}-en.annotation': other, 'commoncrawl.ru-en.ru': other},
      NEWS_COMMENTARY: {f'training/news-commentary-v9.{xx}-en.{xx}': train['news_commentary'][0],
                        f'training/news-commentary-v9.{xx}-en.en': train['news_commentary'][1],
                        'training/news-commentary-v9.cs-en.cs': other},
      DEV: {f'dev/newstest2013.{xx}': _text(dev_xx), 'dev/newstest2013.en': _text(dev_en),
            'dev/newstest2013.es': other,
            f'dev/newstest2014-{xx}en-src.{xx}.sgm': _sgm(test_xx, 'src', xx),
            f'dev/newstest2014-{xx}en-ref.en.sgm': _sgm(test_en, 'ref', 'en'),
            f'dev/newstest2014-{xx}en-src.en.sgm': _sgm(test_en, 'src', 'en'),
            f'dev/newstest2014-{xx}en-ref.{xx}.sgm': _sgm(test_xx, 'ref', xx)},
  }
  if pair == 'fr-en':
    files[MULTIUN] = {'un/undoc.2000.fr-en.fr': train['multiun'][0],
                      'un/undoc.2000.fr-en.en': train['multiun'][1],
                      'un/undoc.2000.es-en.es': other}
    # A plain tar of gzip files.
    files[GIGAFREN] = {f'giga-fren.release2.fixed.{lang}.gz': gzip.compress(data, mtime=0)
                       for lang, data in zip(('fr', 'en'), train['gigafren'])}
  return {url: tar_archive(members, 'w' if url.endswith('.tar') else 'w:gz')
          for url, members in files.items()}


def url_infos(files: dict[str, bytes]) -> dict[str, object]:
  """TFDS checksum records of the synthetic archives (they replace the real files')."""
  from tensorflow_datasets.core.download import checksums  # pylint: disable=import-outside-toplevel
  return {url: checksums.UrlInfo(size=len(data), checksum=hashlib.sha256(data).hexdigest(),
                                 filename=os.path.basename(url))
          for url, data in files.items()}


@contextlib.contextmanager
def proxy(files: dict[str, bytes]) -> Iterator[tuple[str, list[str]]]:
  """A loopback HTTP proxy answering GET <absolute url> from `files` (404 otherwise).
  Yields (proxy address 'http://127.0.0.1:PORT', the list of URLs requested so far)."""
  requested = []

  class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
      requested.append(self.path)
      data = files.get(self.path)
      if data is None:
        self.send_error(404, f'no synthetic file for {self.path}')
        return
      self.send_response(200)
      self.send_header('Content-Type', 'application/x-gzip')
      self.send_header('Content-Length', str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def log_message(self, *args):
      del args

  server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield f'http://127.0.0.1:{server.server_address[1]}', requested
  finally:
    server.shutdown()
    server.server_close()
