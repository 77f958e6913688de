"""benchmarks/studies/help_corpus.py pairs LibreOffice help paragraphs by page and id: each aligned
paragraph's text with the system-specific variants of a `switchinline` reduced to the default,
and every page wholly in one split."""

import os

from benchmarks.studies import help_corpus

_PAGE = '''<html><body><div id="DisplayArea">
<h1 id="hd_id3150445"><a name="x"></a>Macro <span class="emph">Security</span></h1>
<p id="par_idN1056A" class="paragraph" dir="auto">Call it from <span id="sw_1"
class="switchinline"><span hidden="true" id="MACtext_1" class="MAC"><span class="emph">{mac}
</span></span><span hidden="true" id="defaulttext_1"><span class="emph">{default}</span></span>
</span><span class="emph"> - </span><a href="x.html">Security</a>&nbsp;page.<br/>Really.</p>
<p class="paragraph">Not aligned: no id.</p>
<table><tr><td><p id="par_id2" class="tablecontent">{cell}</p></td></tr></table>
</div></body></html>'''


def _page(lang):
  words = {'en': dict(mac='LibreOffice - Preferences', default='Tools - Options', cell='Cell'),
           'de': dict(mac='LibreOffice - Einstellungen', default='Extras - Optionen', cell='Cell')}
  return _PAGE.format(**words[lang])


def test_paragraphs_keep_the_default_variant_and_drop_the_others():
  assert help_corpus.paragraphs(_page('en')) == {
      'hd_id3150445': 'Macro Security',
      'par_idN1056A': 'Call it from Tools - Options - Security page. Really.',
      'par_id2': 'Cell'}


def test_pairs_by_page_and_id_without_untranslated_paragraphs(tmp_path):
  for lang, folder in (('en', 'en-US'), ('de', 'de')):
    for page in ('text/a.html', 'text/sub/b.html'):
      path = tmp_path / folder / page
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(_page(lang).replace('Macro', 'Makro' if lang == 'de' else 'Macro'),
                      encoding='utf-8')
  (tmp_path / 'en-US' / 'text' / 'only_english.html').write_text(_page('en'), encoding='utf-8')
  pairs = list(help_corpus.aligned_pairs(str(tmp_path / 'en-US'), str(tmp_path / 'de')))
  # Two pages both languages have, two translated paragraphs each ('Cell' is untranslated).
  assert [(src, tgt) for _, src, tgt in pairs] == [
      ('Macro Security', 'Makro Security'),
      ('Call it from Tools - Options - Security page. Really.',
       'Call it from Extras - Optionen - Security page. Really.')] * 2
  assert [split for split, _, _ in pairs] == (
      [help_corpus.split_of('text/a.html')] * 2 + [help_corpus.split_of(os.path.join('text', 'sub', 'b.html'))] * 2)


def test_splits_follow_the_page_hash():
  splits = [help_corpus.split_of(f'text/page{i}.html') for i in range(2000)]
  assert 0.01 < splits.count('dev') / 2000 < 0.03
  assert 0.03 < splits.count('test') / 2000 < 0.05
