"""Language tokens (M2M100's `__en__`, NLLB's `eng_Latn`): source text preceded by its
language's token, target text by the target language's, which decoding forces as the first
output token (transformers' `forced_bos_token_id`).

`--config.language_tokens` is the tokens' pattern with `{lang}` for the language
(`'__{lang}__'`; '' for none, the paper's); `source_lang` and `target_lang` fill it, and may
differ from one command to the next (a many-to-many model). `LanguageTokens` stands where the
vocabulary stands (a `VocabPair`: its sides are `Tagged`), so every reader of text gets the
tokens: the token store (a fine-tune's data), scoring, decoding (`forced`: the target prefix
every sentence starts with), attention maps. A side's `fingerprint` is its model's: the
language is the corpus's, part of the data's fingerprint.
"""

import re
from typing import Any, List, Sequence

from t2t_jax.data import mixture
from t2t_jax.data.vocab_pair import VocabPair, side


# The languages of M2M100's tokenizer (transformers' `M2M100Tokenizer`, `language_codes`), in
# the order it numbers their tokens (`__en__`) after its vocab.json: fairseq's dictionaries of
# the released models.
M2M100_LANGUAGE_CODES = {
    'm2m100': ('af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy '
               'ga gd gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln '
               'lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so '
               'sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu').split(),
    'wmt21': 'en ha is ja cs ru zh de'.split(),
}


class LanguageTokenError(ValueError):
  """A language whose token the vocabulary does not have (one line naming both)."""


class Tagged:
  """One side's tokenizer whose `encode` puts `token_id` first; everything else is the
  wrapped tokenizer's (decoding drops the token: a control piece decodes to nothing)."""

  def __init__(self, tok: Any, token_id: int):
    self.tok, self.token_id = tok, token_id

  def encode(self, text: str) -> List[int]:
    return [self.token_id] + list(self.tok.encode(text))

  def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> List[List[int]]:
    return [[self.token_id] + list(ids)
            for ids in self.tok.encode_batch(texts, num_threads=num_threads)]

  def __getattr__(self, name: str) -> Any:  # decode, pieces, vocab_size, fingerprint, path
    return getattr(self.tok, name)

  def __repr__(self) -> str:
    return f'Tagged({self.tok!r}, token_id={self.token_id})'


class LanguageTokens(VocabPair):
  """A vocabulary (a `Tokenizer` or a `VocabPair`) with language tokens: source text starts
  with `source_id`, target text with `target_id`.

  Attributes:
    forced: the ids every translation starts with (`[target_id]`), forced by the search as a
      target prefix is.
  """

  def __init__(self, tok: Any, source_id: int, target_id: int):
    super().__init__(Tagged(side(tok, 'source'), source_id), Tagged(side(tok, 'target'),
                                                                     target_id))
    self.forced = [target_id]


def token_id(tok: Any, pattern: str, lang: str, key: str) -> int:
  """The id of `pattern` filled with `lang` in `tok`'s pieces; LanguageTokenError naming the
  config `key` ('source_lang' / 'target_lang') and the languages there are, when none."""
  piece = pattern.format(lang=lang)
  pieces = tok.pieces(range(tok.vocab_size))
  if piece in pieces:
    return pieces.index(piece)
  known = known_languages(tok, pattern)
  raise LanguageTokenError(
      f'--config.{key}={lang}: the vocabulary has no language token {piece!r}; its languages: '
      f'{", ".join(known[:20])}{", ..." if len(known) > 20 else ""}')


def known_languages(tok: Any, pattern: str) -> List[str]:
  """The languages whose token (`pattern` filled) `tok` has, in id order."""
  prefix, _, suffix = pattern.partition('{lang}')
  return [p[len(prefix):len(p) - len(suffix)] for p in tok.pieces(range(tok.vocab_size))
          if p.startswith(prefix) and p.endswith(suffix) and len(p) > len(prefix + suffix)
          # a bare '{lang}' (NLLB's eng_Latn) matches every piece: the codes only
          and (prefix or suffix or re.fullmatch(r'[a-z]{3}_[A-Z][a-z]{3}', p))]


class TargetTokens(VocabPair):
  """A vocabulary whose source text starts with the token of the language to translate into
  (`mixture.target_token`, '<2es>': Johnson et al. 2017), a model of a mixture into several
  target languages; targets are plain.

  Attributes:
    plain: the wrapped vocabulary: a `mixture.MixedSource` puts each pair's token in its text.
  """

  def __init__(self, tok: Any, target_lang: str, languages: Sequence[str]):
    if target_lang not in languages:
      raise LanguageTokenError(f'--config.target_lang={target_lang}: the model translates into '
                               f'{", ".join(languages)} (its --config.corpora)')
    source = side(tok, 'source')
    token = mixture.target_token(target_lang)
    ids = list(source.encode(token))
    if source.pieces(ids) != ['\u2581' + token]:
      raise LanguageTokenError(f'--config.target_lang={target_lang}: the vocabulary '
                               f'{source.path} has no piece {token!r}')
    super().__init__(Tagged(source, ids[0]), side(tok, 'target'))
    self.plain = tok


def plain(tok: Any) -> Any:
  """The vocabulary `tok` wraps when its sources get a target-language token by `wrap`
  (`TargetTokens`), else `tok`: what encodes a mixture's training text, which has them."""
  return getattr(tok, 'plain', tok)


def wrap(tok: Any, config: Any) -> Any:
  """`tok` with the language tokens `config.language_tokens` names, or the target-language
  tokens of a mixture into several languages (`TargetTokens`), or `tok` itself."""
  pattern = getattr(config, 'language_tokens', '')
  if mixture.many_targets(config):
    if pattern:
      raise LanguageTokenError(f'--config.language_tokens={pattern!r} with --config.corpora into '
                               'several target languages: a model has one scheme of language '
                               'tokens; drop one')
    return TargetTokens(tok, config.target_lang, mixture.target_languages(config))
  if not pattern:
    return tok
  return LanguageTokens(tok, token_id(side(tok, 'source'), pattern, config.source_lang,
                                      'source_lang'),
                        token_id(side(tok, 'target'), pattern, config.target_lang,
                                 'target_lang'))


def forced(tok: Any) -> List[int]:
  """The ids every translation with `tok` starts with ([] without language tokens)."""
  return list(getattr(tok, 'forced', []))
