"""Tests for t2t_jax.data.mixture and t2t_jax.corpora_spec: the entries, each epoch's counts
and pairs against counts done by hand, tags, the plain concatenation, exact resume."""

import collections

import numpy as np
import pytest

from configs import default
from t2t_jax import config as config_lib
from t2t_jax import corpora_spec
from t2t_jax.choices import ConfigError
from t2t_jax.data import bucketing, language_tokens, mixture, pipeline, tokenizer


def test_entries_parse_with_their_pairs_weights_tags_and_names():
  entries = corpora_spec.parse('a/bible, es-en=b/bible:x4:<bt>,gs://bucket/news:x0.5',
                               'en', 'es')
  assert [(e.pair, e.folder, e.share, e.times, e.tag, e.name) for e in entries] == [
      ('en-es', 'a/bible', None, 1.0, '', 'bible.en-es'),
      ('es-en', 'b/bible', None, 4.0, '<bt>', 'bible.es-en'),
      ('en-es', 'gs://bucket/news', None, 0.5, '', 'news')]
  shares = corpora_spec.parse('x:1,y:3:<bt>', 'en', 'es')
  assert [(e.share, e.times, e.tag) for e in shares] == [(1.0, None, ''), (3.0, None, '<bt>')]
  # The canonical form: absolute folders, every weight written, a pair only where given.
  assert corpora_spec.absolute('x,de-en=y:x2', lambda f: '/abs/' + f) == (
      '/abs/x:x1,de-en=/abs/y:x2')
  assert [e.key for e in corpora_spec.parse('/p/x,de-en=/q/y:x2:<bt>', 'en', 'es')] == [
      'en-es:x1', 'de-en:x2:<bt>']


@pytest.mark.parametrize('value, says', [
    ('a,,b', 'entry 2 is empty'),
    ('a:0', "WEIGHT '0' is not a number > 0"),
    ('a:-1', "WEIGHT '-1'"),
    ('a:x0', "WEIGHT 'x0'"),
    ('a:abc', "WEIGHT 'abc'"),
    ('a:nan', "WEIGHT 'nan'"),
    ('a,./a:2', r'a \(en-es\) is given twice'),
    ('a:2,b', 'weights mix numbers'),
    ('en-en=a', 'translates a language into itself'),
    ('a:1:', "TAG ''"),
    ('a:1:b c', "TAG 'b c'"),
])
def test_a_bad_entry_is_refused_in_one_line_naming_it(value, says):
  c = default.get_config()
  c.dataset, c.source_lang, c.target_lang, c.corpora = 'local', 'en', 'es', value
  with pytest.raises(ConfigError, match=says) as e:
    config_lib.validate(c)
  assert '\n' not in str(e.value)


def test_a_mixture_is_of_local_corpora_in_place_of_local_corpus_dir():
  c = default.get_config()
  c.corpora = 'a'
  with pytest.raises(ConfigError, match="needs dataset='local'"):
    config_lib.validate(c)
  c.dataset, c.local_corpus_dir = 'local', 'b'
  with pytest.raises(ConfigError, match='as an entry of corpora instead of both'):
    config_lib.validate(c)


def _entries(spec):
  return corpora_spec.parse(spec, 'en', 'es')


def test_epoch_counts_are_the_shares_of_the_concatenations_length():
  # Numbers: E = sum of kept pairs, split by largest remainder.
  assert list(mixture.epoch_counts([10, 30], _entries('a:1,b:1'))) == [20, 20]
  assert list(mixture.epoch_counts([10, 20], _entries('a:1,b:2'))) == [10, 20]
  # 15 * (1/4, 1/4, 1/2) = 3.75, 3.75, 7.5: floors 3, 3, 7 and the two largest remainders.
  assert list(mixture.epoch_counts([5, 5, 5], _entries('a:1,b:1,c:2'))) == [4, 4, 7]
  # Sizes: K times the kept pairs; no weight at all is the concatenation.
  assert list(mixture.epoch_counts([10, 30], _entries('a:x4,b'))) == [40, 30]
  assert list(mixture.epoch_counts([10, 30], _entries('a,b'))) == [10, 30]
  assert list(mixture.epoch_counts([10, 30], _entries('a:x0.25,b:x0.5'))) == [2, 15]


def test_each_epoch_holds_whole_copies_and_a_fresh_draw_of_the_rest():
  used = np.array([0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11])  # pair 3 too long; corpus a is 0-3
  sampler = mixture.Sampler(np.array([0, 4, 12]), used, _entries('a:x2.5,b:x0.5'), seed=7)
  assert list(sampler.counts) == [round(2.5 * 3), 4]  # 8 of a's 3 kept, 4 of b's 8
  draws = set()
  for epoch in range(6):
    pairs = sampler.pairs(epoch)
    assert list(pairs) == sorted(pairs) and len(pairs) == 12
    counts = collections.Counter(pairs.tolist())
    assert {k: counts[k] for k in (0, 1, 2)} in ({0: 3, 1: 3, 2: 2}, {0: 3, 1: 2, 2: 3},
                                                 {0: 2, 1: 3, 2: 3})
    assert 3 not in counts
    b = sorted(k for k in counts if k >= 4)
    assert len(b) == 4 and all(counts[k] == 1 for k in b)  # without replacement
    draws.add(tuple(b))
    assert list(sampler.pairs(epoch)) == list(pairs)  # a pure function of the epoch
  assert len(draws) > 1  # each epoch draws anew
  assert sampler.shares == {'a': 8 / 12, 'b': 4 / 12}
  assert list(sampler.corpus_pairs(np.array([0, -1, 5, 11, 2]))) == [2, 2]
  assert list(sampler.corpus_pairs([np.array([0, 1]), np.array([9])])) == [2, 1]


def test_an_entry_whose_pairs_are_all_too_long_is_refused_by_name():
  with pytest.raises(mixture.MixtureError, match='entry en-es=b:x1: none of its pairs fits'):
    mixture.Sampler(np.array([0, 4, 6]), np.array([0, 1]), _entries('a,b'), seed=0)


def test_without_weights_the_batches_are_one_corpus_holding_every_file():
  rng = np.random.default_rng(0)
  bucket_of = rng.integers(-1, 3, 500)
  used = np.flatnonzero(bucket_of >= 0)
  sampler = mixture.Sampler(np.array([0, 120, 500]), used, _entries('a,b'), seed=3)
  one = bucketing.BucketPlan(bucket_of, (8, 4, 2), 0, 1, 3)
  mixed = bucketing.BucketPlan(bucket_of, (8, 4, 2), 0, 1, 3, sampler.pairs)
  for epoch in range(2):
    assert mixed.epoch_batches(epoch) == one.num_batches
    for k in range(one.num_batches):
      a, b = one.local_batch(epoch, k), mixed.local_batch(epoch, k)
      assert a[0] == b[0] and list(a[1]) == list(b[1])


class _Named(list):
  def __init__(self, name, pairs):
    super().__init__(pairs)
    self.name = name


def _corpus(name, n, word):
  return _Named(name, [{'source': f'{word} {i} ' + 'x ' * (i % 7), 'target': f'y{i} {word}'}
                       for i in range(n)])


def test_a_mixed_source_tags_its_entries_sources_in_entry_order():
  source = mixture.MixedSource([_corpus('a', 3, 'alpha'), _corpus('b', 2, 'beta')],
                               _entries('a,b:x1:<bt>'))
  assert len(source) == 5 and list(source.boundaries) == [0, 3, 5]
  assert source[1]['source'].startswith('alpha 1') and source[1]['target'] == 'y1 alpha'
  assert [p['source'].split()[:2] for p in source.__getitems__([4, 0, 3])] == [
      ['<bt>', 'beta'], ['alpha', '0'], ['<bt>', 'beta']]
  assert source.name == 'mixture(a|;b|<bt>)'
  with pytest.raises(IndexError):
    source[5]


@pytest.fixture(scope='module')
def mixed(tmp_path_factory):
  source = mixture.MixedSource([_corpus('a', 60, 'alpha'), _corpus('b', 240, 'beta')],
                               _entries('a:1:<bt>,b:1'))
  c = default.get_config()
  c.vocab_size = 60
  tok = tokenizer.load_or_train(c, str(tmp_path_factory.mktemp('w')),
                                lambda: tokenizer.sample_sentences(source, 1000),
                                symbols_fn=lambda: ['\u2581<bt>'])
  return source, tok


def _config():
  c = default.get_config()
  c.max_length, c.bucket_lengths, c.tokens_per_batch, c.shuffle_seed = 16, (8, 16), 128, 5
  return c


def test_the_tag_is_one_piece_and_each_epoch_hands_out_the_shares(mixed):
  source, tok = mixed
  # The tag is one piece, word boundary included; the sentence's pieces follow as they were.
  tag_id = tok.encode('<bt>')
  assert tok.pieces(tag_id) == ['\u2581<bt>']
  assert tok.encode(source[0]['source']) == tag_id + tok.encode(source[0]['source'][5:])
  it = pipeline.make_train_iterator(_config(), source, tok)
  epoch = it.info.batches_per_epoch  # the same for both epochs? counted by hand below
  seen = collections.Counter()
  for _ in range(epoch):
    batch = next(it)
    first = batch['inputs'][:, 0]
    seen['a'] += int(np.sum(first == tag_id[0]))
    seen['b'] += int(np.sum((first != tag_id[0]) & (first != 0)))
  # Shares 1:1 of the 300 pairs: 150 each, a's 60 pairs 2.5 times.
  assert seen == {'a': 150, 'b': 150}
  assert it.take_shares() == {'data/share/a': 0.5, 'data/share/b': 0.5}
  assert it.take_shares() == {}
  assert it.get_state()['mixture'] == ['en-es:1:<bt>', 'en-es:1']


def test_a_mixture_resumes_exactly_and_refuses_other_weights(mixed):
  source, tok = mixed
  it = pipeline.make_train_iterator(_config(), source, tok)
  for _ in range(7):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(40)]  # across the epoch boundary
  again = pipeline.make_train_iterator(_config(), source, tok)
  again.set_state(state)
  for want in expected:
    got = next(again)
    assert all(np.array_equal(want[k], got[k]) for k in want)
  sources = source._sources  # pylint: disable=protected-access
  other = mixture.MixedSource(sources, _entries('a:2:<bt>,b:1'))
  with pytest.raises(pipeline.PipelineError, match='mixture'):
    pipeline.make_train_iterator(_config(), other, tok).set_state(state)


def test_a_tag_the_vocabulary_splits_is_refused(mixed):
  _, tok = mixed
  c = default.get_config()
  c.dataset, c.source_lang, c.target_lang, c.corpora = 'local', 'en', 'es', 'a:1:<tag>'
  with pytest.raises(mixture.MixtureError, match="token '<tag>' is not one piece"):
    mixture.check_tags(c, tok)
  c.corpora = 'a:1:<bt>'
  mixture.check_tags(c, tok)



def test_many_targets_give_each_source_its_target_languages_token(tmp_path):
  entries = _entries('bible,en-fr=bible_fr:x1:<bt>')
  source = mixture.MixedSource([_corpus('es', 40, 'uno'), _corpus('fr', 40, 'une')], entries,
                               target_tokens=True)
  assert source[0]['source'].startswith('<2es> uno 0')
  assert source[40]['source'].startswith('<2fr> <bt> une 0')
  c = default.get_config()
  c.dataset, c.source_lang, c.target_lang = 'local', 'en', 'es'
  c.corpora, c.vocab_size = 'bible,en-fr=bible_fr:x1:<bt>', 60
  # The run records every pair written out: another target_lang later keeps them.
  c = config_lib.absolute_paths(c)
  assert c.corpora.startswith('en-es=/') and ',en-fr=/' in c.corpora
  assert mixture.target_languages(c) == ['es', 'fr'] and mixture.many_targets(c)
  assert mixture.source_symbols(c) == ['\u2581<2es>', '\u2581<2fr>', '\u2581<bt>']
  tok = tokenizer.load_or_train(c, str(tmp_path), lambda: tokenizer.sample_sentences(source, 80),
                                symbols_fn=lambda: mixture.source_symbols(c))
  mixture.check_tags(c, tok)
  # Every mode's vocabulary: the source starts with the token of the target_lang asked for.
  for lang in ('es', 'fr'):
    c.target_lang = lang
    wrapped = language_tokens.wrap(tok, c)
    assert language_tokens.plain(wrapped) is tok and language_tokens.forced(wrapped) == []
    assert wrapped.encode('uno 3') == tok.encode(f'<2{lang}> uno 3')
    assert wrapped.decode(tok.encode('y3 une')) == 'y3 une'
  c.target_lang = 'de'
  with pytest.raises(language_tokens.LanguageTokenError,
                     match='target_lang=de: the model translates into es, fr'):
    language_tokens.wrap(tok, c)
  c.target_lang, c.language_tokens = 'es', '__{lang}__'
  with pytest.raises(language_tokens.LanguageTokenError, match='one scheme'):
    language_tokens.wrap(tok, c)
