"""Separate source and target vocabularies (`share_vocab=False`) standing where one is.

A run with one shared vocabulary (§5.1, the default) encodes and decodes both sides with one
`tokenizer.Tokenizer`. With one vocabulary per language, a `VocabPair` stands where that
Tokenizer stands (the token store, `Translator`, the evaluation, the exports' self-checks):
what reads source text (`encode`, `encode_batch`) uses the source model, what makes or reads
target text (`decode`, `decode_batch`, `pieces`, `vocab_size`) the target model. Where the side
is not implied (a target prefix to encode, the source pieces of an attention map, each side of
the token store), `side(tok, 'source')` or `side(tok, 'target')` gives that side's tokenizer,
of a pair or of one shared tokenizer alike.

Imports nothing beyond the standard library: `inference/translate.py` routes through it
without loading sentencepiece.
"""

import hashlib
from typing import Any, Iterable, List, Sequence

SIDES = ('source', 'target')


class VocabPair:
  """A source and a target tokenizer (each a `tokenizer.Tokenizer`, or anything with its
  methods); thread-safe and picklable as they are.

  Attributes:
    source: encodes source text (`[n]` int ids, no EOS), the encoder's vocabulary.
    target: encodes and decodes target text, the decoder's and the output's vocabulary.
  """

  def __init__(self, source: Any, target: Any):
    self.source, self.target = source, target

  @property
  def path(self) -> str:
    """The target model's file (`source.path`: the source model's)."""
    return self.target.path

  @property
  def fingerprint(self) -> str:
    """sha256 of both models' sha256s: keys the token store of a corpus the pair encodes."""
    both = f'{self.source.fingerprint}\0{self.target.fingerprint}'
    return hashlib.sha256(both.encode()).hexdigest()

  @property
  def vocab_size(self) -> int:
    """The target side's piece count: the ids the model outputs."""
    return self.target.vocab_size

  @property
  def source_vocab_size(self) -> int:
    """The source side's piece count: the ids the encoder reads."""
    return self.source.vocab_size

  def encode(self, text: str) -> List[int]:
    """Source token ids of `text`, without EOS."""
    return self.source.encode(text)

  def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> List[List[int]]:
    """`encode` of each source text."""
    return self.source.encode_batch(texts, num_threads=num_threads)

  def decode(self, ids: Iterable[int]) -> str:
    """Target text of `ids` (a row of output ids) up to the first EOS."""
    return self.target.decode(ids)

  def decode_batch(self, rows: Iterable[Iterable[int]]) -> List[str]:
    """`decode` of each row of a `[batch, length]` array of output ids."""
    return self.target.decode_batch(rows)

  def pieces(self, ids: Iterable[int]) -> List[str]:
    """The target side's piece of every id (`side(pair, 'source').pieces` for source ids)."""
    return self.target.pieces(ids)

  def __repr__(self) -> str:
    return f'VocabPair(source={self.source!r}, target={self.target!r})'


def side(tok: Any, which: str) -> Any:
  """The tokenizer of `which` side ('source' or 'target'): a `VocabPair`'s own, else `tok`
  itself (one vocabulary serves both sides)."""
  if which not in SIDES:
    raise ValueError(f'side: which={which!r}; expected one of {SIDES}')
  return getattr(tok, which) if isinstance(tok, VocabPair) else tok
