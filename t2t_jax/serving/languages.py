"""The directions a trained run translates, as LibreTranslate's `/languages` lists them.

* a run of one corpus: its `source_lang` -> `target_lang`;
* a mixture (`--config.corpora`): every entry's pair, several target languages through the
  `<2xx>` tokens (`data/language_tokens.TargetTokens`);
* a model with language tokens (`--config.language_tokens`, M2M100, NLLB): every pair of the
  languages whose token the vocabulary has.
"""

import dataclasses
from typing import Dict, List, Sequence, Set, Tuple

from t2t_jax.data import language_tokens, mixture
from t2t_jax.data.vocab_pair import side

# ISO 639-1 names of the languages a request most likely names; any other code is its own name.
NAMES = {
    'ar': 'Arabic', 'bg': 'Bulgarian', 'ca': 'Catalan', 'cs': 'Czech', 'da': 'Danish',
    'de': 'German', 'el': 'Greek', 'en': 'English', 'es': 'Spanish', 'et': 'Estonian',
    'fa': 'Persian', 'fi': 'Finnish', 'fr': 'French', 'he': 'Hebrew', 'hi': 'Hindi',
    'hu': 'Hungarian', 'id': 'Indonesian', 'it': 'Italian', 'ja': 'Japanese', 'ko': 'Korean',
    'lt': 'Lithuanian', 'lv': 'Latvian', 'nl': 'Dutch', 'no': 'Norwegian', 'pl': 'Polish',
    'pt': 'Portuguese', 'ro': 'Romanian', 'ru': 'Russian', 'sk': 'Slovak', 'sl': 'Slovenian',
    'sv': 'Swedish', 'tr': 'Turkish', 'uk': 'Ukrainian', 'vi': 'Vietnamese', 'zh': 'Chinese',
}


@dataclasses.dataclass(frozen=True)
class Pairs:
  """The (source, target) language pairs a run translates."""
  pairs: Tuple[Tuple[str, str], ...]

  @classmethod
  def of_run(cls, config, tokenizer) -> 'Pairs':
    """`config`: the run's (checkpoint's) config; `tokenizer`: its vocabulary as loaded."""
    entries = mixture.entries(config)
    if entries:
      return cls(tuple(sorted({(e.source_lang, e.target_lang) for e in entries})))
    pattern = getattr(config, 'language_tokens', '')
    if pattern:
      known = language_tokens.known_languages(side(language_tokens.plain(tokenizer), 'source'),
                                              pattern)
      return cls(tuple((s, t) for s in known for t in known if s != t))
    return cls(((config.source_lang, config.target_lang),))

  @property
  def sources(self) -> List[str]:
    return sorted({s for s, _ in self.pairs})

  def targets(self, source: str) -> List[str]:
    return sorted({t for s, t in self.pairs if s == source})

  def languages(self) -> List[Dict[str, object]]:
    """LibreTranslate's `/languages`: [{code, name, targets}] of every language a pair starts
    or ends with (a target-only language has no targets of its own)."""
    codes: Set[str] = {lang for pair in self.pairs for lang in pair}
    return [{'code': c, 'name': NAMES.get(c, c), 'targets': self.targets(c)}
            for c in sorted(codes)]

  def has(self, source: str, target: str) -> bool:
    return (source, target) in self.pairs

  def describe(self, limit: int = 8) -> str:
    shown: Sequence[str] = [f'{s}-{t}' for s, t in self.pairs[:limit]]
    more = f' and {len(self.pairs) - limit} more' if len(self.pairs) > limit else ''
    return ', '.join(shown) + more
