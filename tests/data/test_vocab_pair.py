"""t2t_jax.data.vocab_pair: separate source and target vocabularies standing where one
tokenizer stands: source text through the source model, target text through the target's."""

import os
import pickle

import pytest

from t2t_jax.data import token_store, tokenizer, vocab_pair

EN = ['In the beginning God created the heaven and the earth.',
      'And the earth was without form, and void.']
ES = ['En el principio creó Dios los cielos y la tierra.',
      'Y la tierra estaba desordenada y vacía.']


def _lines(folder, lang):
  with open(os.path.join(folder, f'train.{lang}'), encoding='utf-8') as f:
    return f.read().splitlines()


@pytest.fixture(scope='module')
def pair(corpus, tmp_path_factory):
  """English source and Spanish target models of other sizes, each trained on its language."""
  folder = tmp_path_factory.mktemp('vocabs')
  source = tokenizer.train(_lines(corpus, 'en'), 150, str(folder / 'source.model'))
  target = tokenizer.train(_lines(corpus, 'es'), 170, str(folder / 'target.model'))
  return vocab_pair.VocabPair(source, target)


def test_source_text_goes_through_the_source_model_and_target_text_the_targets(pair):
  source, target = pair.source, pair.target
  assert pair.encode(EN[0]) == source.encode(EN[0]) != target.encode(EN[0])
  assert pair.encode_batch(EN) == source.encode_batch(EN)
  ids = target.encode(ES[0]) + [tokenizer.EOS_ID, 5]
  assert pair.decode(ids) == target.decode(ids) == ES[0]
  assert pair.decode_batch([ids]) == [ES[0]]
  assert pair.pieces(ids) == target.pieces(ids)
  assert (pair.vocab_size, pair.source_vocab_size) == (170, 150)
  assert pair.path == target.path
  assert vocab_pair.side(pair, 'source') is source and vocab_pair.side(pair, 'target') is target
  assert vocab_pair.side(target, 'source') is target  # one vocabulary serves both sides
  with pytest.raises(ValueError, match="which='encoder'"):
    vocab_pair.side(pair, 'encoder')


def test_its_fingerprint_is_both_models_and_it_pickles(pair):
  swapped = vocab_pair.VocabPair(pair.target, pair.source)
  assert len({pair.fingerprint, swapped.fingerprint, pair.source.fingerprint,
              pair.target.fingerprint}) == 4
  again = pickle.loads(pickle.dumps(pair))
  assert again.fingerprint == pair.fingerprint and again.encode(EN[1]) == pair.encode(EN[1])


def test_the_token_store_encodes_each_side_with_its_own_model(pair):
  pairs = [{'source': s, 'target': t} for s, t in zip(EN, ES)]
  store = token_store.encode_in_memory(pairs, pair)
  for i, (s, t) in enumerate(zip(EN, ES)):
    assert store.ids('source', i).tolist() == pair.source.encode(s)
    assert store.ids('target', i).tolist() == pair.target.encode(t)
  assert store.flat('source').dtype.name == 'uint16'


class _Sized:
  def __init__(self, vocab_size):
    self.vocab_size = vocab_size


def test_a_store_is_int32_when_either_side_has_more_than_65536_pieces():
  assert token_store._dtype(vocab_pair.VocabPair(_Sized(70_000), _Sized(300))).name == 'int32'
  assert token_store._dtype(vocab_pair.VocabPair(_Sized(300), _Sized(70_000))).name == 'int32'
  assert token_store._dtype(vocab_pair.VocabPair(_Sized(300), _Sized(400))).name == 'uint16'
