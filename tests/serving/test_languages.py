"""The directions a run serves (serving/languages.py): one pair, a mixture's pairs into several
targets, and every pair of a language-token model's languages, in LibreTranslate's shape."""

from t2t_jax.configs import default as default_config
from t2t_jax.serving.languages import Pairs


class Pieces:
  """A vocabulary whose pieces are given."""

  def __init__(self, pieces):
    self._pieces = pieces
    self.vocab_size = len(pieces)

  def pieces(self, ids):
    return [self._pieces[i] for i in ids]


def test_one_corpus_serves_its_pair():
  config = default_config.get_config()
  config.update(source_lang='en', target_lang='es')
  pairs = Pairs.of_run(config, None)
  assert pairs.pairs == (('en', 'es'),) and pairs.sources == ['en']
  assert pairs.languages() == [{'code': 'en', 'name': 'English', 'targets': ['es']},
                               {'code': 'es', 'name': 'Spanish', 'targets': []}]


def test_a_mixture_serves_each_entrys_pair(tmp_path):
  config = default_config.get_config()
  config.update(source_lang='en', target_lang='es',
                corpora=f'{tmp_path}/a,en-fr={tmp_path}/b,es-en={tmp_path}/a')
  pairs = Pairs.of_run(config, None)
  assert pairs.pairs == (('en', 'es'), ('en', 'fr'), ('es', 'en'))
  assert pairs.languages() == [
      {'code': 'en', 'name': 'English', 'targets': ['es', 'fr']},
      {'code': 'es', 'name': 'Spanish', 'targets': ['en']},
      {'code': 'fr', 'name': 'French', 'targets': []}]
  assert pairs.has('en', 'fr') and not pairs.has('fr', 'en')


def test_a_language_token_model_serves_every_pair_of_its_languages():
  config = default_config.get_config()
  config.update(language_tokens='__{lang}__', source_lang='en', target_lang='de')
  vocab = Pieces(['<pad>', '</s>', '__en__', 'hello', '__de__', '__xx__', '_'])
  pairs = Pairs.of_run(config, vocab)
  assert pairs.sources == ['de', 'en', 'xx'] and pairs.targets('xx') == ['de', 'en']
  assert len(pairs.pairs) == 6 and pairs.describe(limit=2) == 'en-de, en-xx and 4 more'
  assert {'code': 'xx', 'name': 'xx', 'targets': ['de', 'en']} in pairs.languages()
