"""A training mixture of local corpora (`--config.corpora`; its syntax: t2t_jax/corpora_spec.py).

The training split is the concatenation of the entries' training splits (`MixedSource`), each
entry's sources preceded by its TAG. The first entry of the run's pair
(`source_lang-target_lang`) is the *primary* one: its dev and test splits are the run's.

Many pairs in one model (Johnson et al. 2017): when the entries translate into more than one
target language, every source starts with the token of its target language, `<2xx>`
(`target_token`), before any TAG; every pair shares the one vocabulary, which keeps each such
token one piece; and `target_lang` (with `source_lang`: the primary entry of that pair, for
eval) chooses the direction of decode, eval and score (`language_tokens.wrap`).

Which pairs an epoch holds (`Sampler`), a pure function of (kept pairs, weights, shuffle_seed,
epoch), so a resumed run continues exactly:

* u_i: the pairs of entry i that the length filter keeps; E = sum u_i with number WEIGHTs;
* n_i, the pairs entry i contributes to an epoch: with numbers (shares) w_i, n_i = E w_i / sum w
  rounded to integers by largest remainder (sum n_i = E: an epoch is as long as the
  concatenation); with sizes (`xK`, no WEIGHT: K = 1), n_i = round(K_i u_i);
* entry i gives floor(n_i / u_i) copies of each of its kept pairs and n_i mod u_i more drawn
  without replacement (numpy's Generator seeded [shuffle_seed, epoch, i + 1]).

With no WEIGHT at all, n_i = u_i: every kept pair once an epoch, the plain concatenation, whose
batches are exactly those of one corpus holding all the files. The length buckets (or packed
rows) are then formed over the epoch's pairs as for one corpus (`bucketing`, `packing`).
"""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import ml_collections
import numpy as np

from t2t_jax import corpora_spec
from t2t_jax.data.textfiles import DataError


class MixtureError(DataError):
  """A mixture the data cannot honour (one line naming the entry)."""


def entries(config: Any) -> List[corpora_spec.Entry]:
  """The entries of `config.corpora` ([] for none)."""
  return corpora_spec.parse(config.get('corpora', '') or '', config.source_lang,
                            config.target_lang)


def entry_config(config: Any, entry: corpora_spec.Entry) -> ml_collections.ConfigDict:
  """`config` reading `entry` alone: a local corpus of its folder and pair."""
  single = ml_collections.ConfigDict(config.to_dict())
  single.update(corpora='', local_corpus_dir=entry.folder, source_lang=entry.source_lang,
                target_lang=entry.target_lang)
  return single


def primary(config: Any) -> corpora_spec.Entry:
  """The first entry of the run's pair: the one whose dev and test splits are the run's."""
  every = entries(config)
  pair = f'{config.source_lang}-{config.target_lang}'
  for entry in every:
    if entry.pair == pair:
      return entry
  raise MixtureError(f'--config.corpora has no entry of the run\'s pair {pair} (source_lang-'
                     f'target_lang); its pairs: {", ".join(sorted({e.pair for e in every}))}')


def target_languages(config: Any) -> List[str]:
  """The target languages of the mixture's entries, sorted ([] without a mixture)."""
  return sorted({e.target_lang for e in entries(config)})


def many_targets(config: Any) -> bool:
  """Whether the mixture translates into more than one language: sources then carry
  `target_token`s."""
  return len(target_languages(config)) > 1


def target_token(lang: str) -> str:
  """The token a source starts with to be translated into `lang` (Johnson et al. 2017)."""
  return f'<2{lang}>'


class MixedSource:
  """Random access to the pairs of every entry's training split, in entry order, each entry's
  sources preceded by its TAG and a space (`{'source': str, 'target': str}`), and before that
  by its target language's token (`target_tokens`).

  Attributes:
    entries: the mixture's `corpora_spec.Entry`s.
    boundaries: int64 [len(entries) + 1]: entry i holds pairs boundaries[i]:boundaries[i + 1].
    name: the sources' names and tags (keys the token store).
    num_dropped_empty: pairs dropped at preparation for an empty side, over every entry.
  """

  def __init__(self, sources: Sequence[Any], mixture: Sequence[corpora_spec.Entry],
               target_tokens: bool = False):
    self._sources, self.entries = list(sources), list(mixture)
    self.boundaries = np.cumsum([0] + [len(s) for s in self._sources]).astype(np.int64)
    # What goes before each entry's sources: its target language's token, its TAG.
    self._prefix = [(f'{target_token(e.target_lang)} ' if target_tokens else '')
                    + (f'{e.tag} ' if e.tag else '') for e in self.entries]
    self.name = 'mixture(' + ';'.join(f'{getattr(s, "name", repr(s))}|{p.strip()}'
                                      for s, p in zip(self._sources, self._prefix)) + ')'
    self.num_dropped_empty = sum(getattr(s, 'num_dropped_empty', 0) for s in self._sources)

  def __len__(self) -> int:
    return int(self.boundaries[-1])

  def __getitem__(self, index: int) -> Dict[str, str]:
    return self.__getitems__([index])[0]

  def __getitems__(self, indices: Sequence[int]) -> List[Dict[str, str]]:
    indices = np.asarray(indices, np.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
      raise IndexError(f'{self.name}: index out of range [0, {len(self)})')
    corpus = np.searchsorted(self.boundaries, indices, side='right') - 1
    out: List[Optional[Dict[str, str]]] = [None] * len(indices)
    for i in np.unique(corpus):
      where = np.flatnonzero(corpus == i)
      source, prefix = self._sources[i], self._prefix[i]
      local = [int(k) for k in indices[where] - self.boundaries[i]]
      getitems = getattr(source, '__getitems__', None)
      items = getitems(local) if getitems else [source[k] for k in local]
      for position, item in zip(where, items):
        out[position] = dict(item, source=prefix + item['source']) if prefix else item
    return out

  def __repr__(self) -> str:
    return f'MixedSource({", ".join(e.name for e in self.entries)}; {len(self)} pairs)'


def epoch_counts(kept: Sequence[int], mixture: Sequence[corpora_spec.Entry]) -> np.ndarray:
  """n_i of every entry (see the module doc) from its kept pairs u_i."""
  kept = np.asarray(kept, np.int64)
  if mixture[0].share is None:
    return np.asarray([int(round(e.times * u)) for e, u in zip(mixture, kept)], np.int64)
  weights = np.asarray([e.share for e in mixture], np.float64)
  exact = weights / weights.sum() * kept.sum()
  counts = np.floor(exact).astype(np.int64)
  rest = int(kept.sum() - counts.sum())
  counts[np.argsort(-(exact - counts), kind='stable')[:rest]] += 1
  return counts


class Sampler:
  """The pairs of each epoch of a mixture (see the module doc).

  Args:
    boundaries: `MixedSource.boundaries`.
    used: the kept pairs' indices (int64 [U], increasing).
    mixture: the entries.
    seed: `shuffle_seed`.
  """

  def __init__(self, boundaries: np.ndarray, used: np.ndarray,
               mixture: Sequence[corpora_spec.Entry], seed: int):
    self.boundaries, self.entries, self._seed = np.asarray(boundaries), list(mixture), seed
    corpus = np.searchsorted(self.boundaries, used, side='right') - 1
    self._kept = [used[corpus == i] for i in range(len(self.entries))]
    self.counts = epoch_counts([len(k) for k in self._kept], self.entries)
    for entry, kept in zip(self.entries, self._kept):
      if not len(kept):
        raise MixtureError(f'--config.corpora entry {entry.written()}: none of its pairs fits '
                           'max_length, so it would add nothing')
    if not self.counts.sum():
      raise MixtureError('--config.corpora: its weights draw no pair at all')

  @property
  def shares(self) -> Dict[str, float]:
    """{entry name: its fraction of an epoch's pairs}."""
    total = float(self.counts.sum())
    return {e.name: float(n) / total for e, n in zip(self.entries, self.counts)}

  def pairs(self, epoch: int) -> np.ndarray:
    """The indices of `epoch`'s pairs (int64, increasing, repeats for upsampled entries)."""
    parts = []
    for i, (kept, n) in enumerate(zip(self._kept, self.counts)):
      copies, rest = divmod(int(n), max(len(kept), 1))
      parts.append(np.tile(kept, copies))
      if rest:
        parts.append(np.random.default_rng([self._seed, epoch, i + 1]).choice(
            kept, rest, replace=False))
    return np.sort(np.concatenate(parts), kind='stable')

  def corpus_pairs(self, rows: Any) -> np.ndarray:
    """int64 [entries]: how many of `rows` (pair indices, -1 for padding; or a list of such
    arrays: packed rows) each entry holds."""
    if isinstance(rows, list):
      rows = np.concatenate([np.asarray(r, np.int64) for r in rows] or [np.zeros(0, np.int64)])
    rows = np.asarray(rows, np.int64)
    rows = rows[rows >= 0]
    corpus = np.searchsorted(self.boundaries, rows, side='right') - 1
    return np.bincount(corpus, minlength=len(self.entries)).astype(np.int64)

  def state(self) -> List[str]:
    """What of the mixture decides the data order, for the iterator's state."""
    return [e.key for e in self.entries]


@dataclasses.dataclass
class ShareCounter:
  """Pairs handed out per entry since the last `take`: the realised shares that training
  logs as `data/share/<name>`."""
  names: Sequence[str]
  counts: Optional[np.ndarray] = None

  def add(self, counts: np.ndarray) -> None:
    self.counts = counts if self.counts is None else self.counts + counts

  def take(self) -> Dict[str, float]:
    """{'data/share/<name>': fraction} since the last call ({} when nothing was handed out)."""
    counts, self.counts = self.counts, None
    if counts is None or not counts.sum():
      return {}
    return {f'data/share/{n}': float(c) / float(counts.sum())
            for n, c in zip(self.names, counts)}


def load_split(config: Any, split: str, data_dir: str, load_one, **kwargs) -> Any:
  """The `split` of a mixture: the training split a `MixedSource` of every entry's, any other
  split the primary entry's. `load_one(config, split, data_dir, **kwargs)` loads one local
  corpus (`corpora.load_split`); its errors are prefixed with the entry."""
  if split != config.train_split:
    entry = primary(config)
    return _entry_split(config, entry, split, data_dir, load_one, kwargs)
  mixture = entries(config)
  return MixedSource([_entry_split(config, e, split, data_dir, load_one, kwargs)
                      for e in mixture], mixture, target_tokens=many_targets(config))


def _entry_split(config, entry, split, data_dir, load_one, kwargs):
  return named(entry, lambda: load_one(entry_config(config, entry), split, data_dir, **kwargs))


def named(entry: corpora_spec.Entry, read: Any) -> Any:
  """`read()`, a data error of which names `entry` first (one line, of the same class)."""
  try:
    return read()
  except DataError as e:
    raise type(e)(f'--config.corpora entry {entry.written()}: {e}') from None


# SentencePiece's word-boundary mark: a tag begins the text, so its piece is '▁<bt>' (as
# parsing's tree tokens are, parsing/linearize.py), and the sentence's first word keeps its own.
_WORD = '\u2581'


def source_symbols(config: Any) -> List[str]:
  """The pieces the source vocabulary keeps whole (user-defined symbols): the target
  languages' tokens when there are several ('▁<2es>'), then the TAGs ('▁<bt>'), each once."""
  tokens = ([target_token(lang) for lang in target_languages(config)]
            if many_targets(config) else [])
  return list(dict.fromkeys(_WORD + t for t in tokens + [e.tag for e in entries(config) if e.tag]))


def check_tags(config: Any, source_side: Any) -> None:
  """MixtureError unless every TAG and target-language token is one piece of the source
  vocabulary `source_side` (a `tokenizer.Tokenizer`): a vocabulary given (`vocab_model`,
  `init_from`) or trained without the mixture would split it, and it would mean nothing."""
  source_side = getattr(source_side, 'tok', source_side)  # language tokens: the model's own
  for piece in source_symbols(config):
    tag = piece[len(_WORD):]
    pieces = source_side.pieces(source_side.encode(tag))
    if pieces != [piece]:
      where = getattr(source_side, 'path', 'the vocabulary')
      raise MixtureError(f'--config.corpora: the token {tag!r} is not one piece of {where} '
                         f'(it encodes as {pieces}): a vocabulary given (vocab_model, '
                         'init_from) or trained without this mixture does not hold it; '
                         'train the vocabulary with the mixture')


def describe(config: Any, shares: Optional[Dict[str, float]] = None) -> str:
  """`--mode=info`'s lines of a mixture, each ending in a newline ('' for none): each entry's
  name, pair, weight, tag and folder, with `shares` (a training iterator's state
  `mixture_shares`: each entry's fraction of an epoch's pairs) when a run has them."""
  mixture = entries(config)
  if not mixture:
    return ''
  width = max(len(e.name) for e in mixture)
  lines = ['corpora (training mixture' + (', each epoch\'s share of the pairs' if shares else '')
           + f'; dev and test from {primary(config).name}):']
  for e in mixture:
    weight = f'{e.share:g}' if e.share is not None else f'x{e.times:g}'
    share = f'{shares[e.name]:7.2%}  ' if shares and e.name in shares else ''
    lines.append(f'  {e.name:<{width}}  {e.pair}  weight {weight:<6} {share}'
                 + (f'tag {e.tag}  ' if e.tag else '') + e.folder)
  return '\n'.join(lines) + '\n'
