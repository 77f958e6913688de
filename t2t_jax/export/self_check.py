"""An export proves itself before it reports success: the artifact it has just written, still
in its temporary directory, translates a handful of sentences, and the project's own beam
search (`translate.Translator`) translates them with the same model, parameters and decoding
settings. Any difference stops the export with one line naming the sentence and both outputs;
the caller raises it inside `common.new_directory`, which then removes everything written.

Why: a model CTranslate2 reads differently than it was trained (a grouped-query model, a
variant with other layer counts or an untied output projection) was written with exit 0 and
translated garbage. Checking the parameters catches what they show; translating catches the
rest (an embedding scale a subclass dropped, anything its code does that the parameters do
not tell).

Both formats call `check_artifact`, each with a function that translates with its artifact:
`ctranslate2_export.convert` and `stablehlo_export.write_artifact`.

The sentences (`check_sentences`): the shortest of the first lines of the run's dev split
when the run trained on a local corpus (the bundled one included), otherwise sentences made of
vocabulary pieces. A few short sentences keep it cheap: usually one source bucket, one
compilation each side.
"""

import dataclasses
import itertools
import logging
import time
from typing import Any, Callable, List, Optional, Sequence

from t2t_jax.data import vocab_pair
from t2t_jax.export.common import ExportError

COUNT = 4          # sentences checked
MAX_PIECES = 12    # pieces of a vocabulary sentence at most
DEV_LINES = 200    # dev lines read at most while looking for the shortest

# sentences -> the artifact's best translations, as ids without EOS ([] for a blank one).
ArtifactIds = Callable[[Sequence[str]], List[List[int]]]


@dataclasses.dataclass(frozen=True)
class Settings:
  """The decoding settings both sides translate with (`Translator`'s argument names)."""
  beam_size: int
  alpha: float
  max_decode_extra: int
  batch_sentences: int
  bucket_lengths: Sequence[int]
  length_rule: str = 'gnmt'

  @classmethod
  def of(cls, config: Any) -> 'Settings':
    """From a run config (configs/default.py keys), as `--mode=decode` reads them."""
    return cls(config.beam_size, config.length_penalty_alpha, config.max_decode_extra,
               config.decode_batch_sentences, tuple(config.bucket_lengths),
               getattr(config, 'length_penalty_rule', 'gnmt'))


def _dev_sentences(config: Any, tok: Any) -> List[str]:
  """The COUNT shortest (in pieces) dev sources among the first DEV_LINES lines of a local
  corpus's dev split, in file order; [] for other datasets (a TFDS split may need preparing
  first) or a corpus without a readable dev split (the check then uses vocabulary
  sentences)."""
  # pylint: disable=import-outside-toplevel
  from t2t_jax.data import corpora, textfiles
  if getattr(config, 'dataset', None) != 'local':
    return []
  try:
    corpus_dir, source, target = corpora.local_corpus_location(config)
    files = textfiles.find_split_files(corpus_dir, 'dev', source, target)
    if files is None:
      return []
    lines = [text for _, text, _ in itertools.islice(textfiles.iter_pairs(files), DEV_LINES)
             if text.strip()]
  except (textfiles.DataError, OSError):  # the corpus moved or is damaged: not the export's
    return []
  lengths = [len(tok.encode(text)) for text in lines]
  shortest = sorted(range(len(lines)), key=lambda i: lengths[i])[:COUNT]
  return [lines[i] for i in sorted(shortest)]


def _vocabulary_sentences(tok: Any, count: int) -> List[str]:
  """`count` sentences of 5 pieces spread over the vocabulary (ids from 3: no padding, EOS
  or unknown), as text; deterministic."""
  size = tok.vocab_size
  out = []
  for k in itertools.count():
    if len(out) == count or k == 4 * count:
      return out
    ids = [3 + (7 * k + 13 * j) % max(size - 3, 1) for j in range(5)]
    if any(p.startswith('<') and p.endswith('>') for p in tok.pieces(ids)):
      continue  # a model made elsewhere: its `<s>` is text to us, a symbol to its tokenizer
    text = tok.decode(ids).strip()
    if text and 0 < len(tok.encode(text)) <= MAX_PIECES and text not in out:
      out.append(text)
  return out


def check_sentences(config: Any, tok: Any) -> List[str]:
  """The sentences an export checks itself on (module docstring): sources, made of the source
  vocabulary's pieces when `tok` is a `VocabPair`."""
  found = _dev_sentences(config, tok)
  return found + _vocabulary_sentences(vocab_pair.side(tok, 'source'), COUNT - len(found))


def _shown(tok: Any, ids: Sequence[int]) -> str:
  """`ids` as a short quoted text (ids beyond the SentencePiece model's as a list)."""
  if all(0 <= i < tok.vocab_size for i in ids):
    text = repr(tok.decode(list(ids)))
  else:
    text = repr(list(ids))
  return text if len(text) <= 60 else text[:57] + '...'


def check_artifact(what: str, model: Any, params: Any, tok: Any, settings: Settings,
                   artifact_ids: ArtifactIds, sentences: Optional[Sequence[str]] = None
                   ) -> float:
  """Raises ExportError unless `artifact_ids` translates every sentence exactly as
  `Translator(model, params, tok, **settings)`; returns the seconds the check took.

  Args:
    what: names the artifact in the message, e.g. 'the CTranslate2 model written to OUT'.
    model: the model (a `Transformer`, a variant or subclass) the parameters are of.
    params: its parameters.
    tok: the `data.tokenizer.Tokenizer` both sides encode with (a `VocabPair`: separate
      vocabularies, encoding with the source model, decoding with the target's).
    settings: the decoding settings of both sides.
    artifact_ids: translates with the written artifact.
    sentences: the sources (default: `check_sentences` without a run config: vocabulary).
  """
  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference import translate
  start = time.monotonic()
  sentences = list(sentences) if sentences is not None else check_sentences(None, tok)
  # One thread on one device: the check's batches are tiny, and any parallelism gives the
  # same translations (translate.choose_parallelism).
  ours = translate.Translator(model, params, tok, **dataclasses.asdict(settings), threads=1,
                              parallelism='threads').translate_ids(sentences)
  theirs = artifact_ids(sentences)
  for i, (sentence, mine, its) in enumerate(zip(sentences, ours, theirs)):
    if list(mine) != list(its):
      raise ExportError(
          f'{what} does not translate as the model: self-check sentence {i + 1} of '
          f'{len(sentences)} {sentence[:40]!r} gives {_shown(tok, its)}, the model\'s beam '
          f'search {_shown(tok, mine)} (beam {settings.beam_size}); nothing was written')
  seconds = time.monotonic() - start
  logging.info('export self-check: %s translates %d sentences as the model (%.1f s)', what,
               len(sentences), seconds)
  return seconds
