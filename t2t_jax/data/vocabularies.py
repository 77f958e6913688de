"""A run's vocabularies in its workdir: one SentencePiece model shared by both sides (§5.1, the
default), or with `share_vocab=False` one per language: the target side's where the shared
one lives (`vocab/spm.model`), the source side's beside it (`vocab/source_spm.model`).

Each side is made, taken (`vocab_model`, `source_vocab_model`, `init_from`'s) or reused by
`tokenizer.load_or_train`, exactly as the shared one is, with its own record
(`vocab_record.py`): the source side through the workdir's `layout.SourceSide` (its files) and
`side_config` (its size and given model). A side's vocabulary is trained from that language's
text only (`sentences`), and its record says so (`trained_on`), so a shared vocabulary left
in a workdir without checkpoints is not reused as one side's, nor one side's as a shared one.
"""

import itertools
from typing import Any, Callable, Iterable, Optional, Sequence

import ml_collections

from t2t_jax.data import language_tokens, tokenizer, vocab_record
from t2t_jax.data.vocab_pair import VocabPair
from t2t_jax.storage import layout


def side_config(config: ml_collections.ConfigDict, which: str) -> ml_collections.ConfigDict:
  """The run config as `which` side's vocabulary reads it (`tokenizer.load_or_train`,
  `vocab_record.wanted`): the target side's is `config` itself; the source side's a copy
  whose `vocab_size` is source_vocab_size (0: vocab_size) and whose `vocab_side` is 'source'
  (`vocab_record.given` then takes `source_vocab_model`, or `init_from`'s source model)."""
  if which == 'target':
    return config
  view = ml_collections.ConfigDict(config.to_dict())
  view.vocab_size = config.source_vocab_size or config.vocab_size
  view.vocab_side = 'source'
  return view


def sentences(train_source: Any, config: Any, which: Optional[str] = None
              ) -> Callable[[], Iterable[str]]:
  """What a vocabulary is trained on, as `tokenizer.load_or_train`'s `sentences_fn`: the
  sample of `vocab_sample_sentences` pairs (`tokenizer.sample_sentences`), both sides of each
  (`which` None: a shared vocabulary) or only `which` side's ('source' or 'target')."""
  every = lambda: tokenizer.sample_sentences(train_source, config.vocab_sample_sentences)  # noqa: E731
  if which is None:
    return every
  start = 0 if which == 'source' else 1  # a pair's source, then its target
  return lambda: itertools.islice(every(), start, None, 2)


def load_or_train(config: ml_collections.ConfigDict, workdir: str, train_source: Any,
                  process_index: int = 0, process_count: int = 1, *,
                  symbols_fn: Optional[Callable] = None, source_symbols: Sequence[str] = (),
                  trained: bool = False,
                  data_fingerprint: Optional[dict] = None,
                  checkpoint_vocabulary: Optional[dict] = None) -> Any:
  """The vocabularies of a training run: its `tokenizer.Tokenizer` (`config.share_vocab`),
  else a `VocabPair` of the source and target side's, each `tokenizer.load_or_train`'s.

  `train_source`: random access to the training pairs (`tokenizer.sample_sentences`);
  `source_symbols`: the source side's user-defined symbols (a mixture's tags); the
  other arguments as `tokenizer.load_or_train`'s (`symbols_fn`: the target side's only;
  `checkpoint_vocabulary`: `vocab_record.of_tokenizer` of both sides, each side given its
  own, `vocab_record.side_item`).
  """
  common = dict(trained=trained, data_fingerprint=data_fingerprint)
  if not one_model(config) and config.share_vocab and not (
      vocab_record.given(config) and vocab_record.given(side_config(config, 'source'))):
    raise tokenizer.TokenizerError(
        '--config.share_tokenizer=False needs both sides\' models given (--config.init_from of '
        'a run that has them, e.g. an imported model, or --config.vocab_model and '
        '--config.source_vocab_model): two models trained apart would not share one id space')
  if one_model(config):
    both = symbols_fn
    if source_symbols:
      both = lambda: list(source_symbols) + list(symbols_fn() if symbols_fn else [])  # noqa: E731
    return language_tokens.wrap(tokenizer.load_or_train(
        config, workdir, sentences(train_source, config), process_index, process_count,
        symbols_fn=both, checkpoint_vocabulary=checkpoint_vocabulary, **common), config)
  target = tokenizer.load_or_train(config, workdir, sentences(train_source, config, 'target'),
                                   process_index, process_count, symbols_fn=symbols_fn,
                                   checkpoint_vocabulary=checkpoint_vocabulary, **common)
  source = tokenizer.load_or_train(
      side_config(config, 'source'), layout.of(workdir).source_side,
      sentences(train_source, config, 'source'), process_index, process_count,
      symbols_fn=(lambda: list(source_symbols)) if source_symbols else None,
      checkpoint_vocabulary=vocab_record.side_item(checkpoint_vocabulary, 'source'), **common)
  return language_tokens.wrap(VocabPair(source, target), config)


def one_model(config: Any) -> bool:
  """Whether one SentencePiece model segments both sides (`share_vocab` and
  `share_tokenizer`); else the source side has its own, `vocab/source_spm.model`."""
  return bool(config.share_vocab and getattr(config, 'share_tokenizer', True))


def load(workdir: str, config: ml_collections.ConfigDict) -> Any:
  """The vocabularies a trained run's checkpoints were trained with, for the modes that read
  it (eval, decode, score, attention, export): `tokenizer.load` of `vocab/spm.model`, with
  `share_vocab=False` a `VocabPair` with `vocab/source_spm.model`, each of the size `config`
  (the checkpoint's) says.

  Raises:
    TokenizerError: one line naming a missing or damaged file, or one of another size.
  """
  where = layout.of(workdir)
  target = tokenizer.load(where.vocab, config.vocab_size)
  if one_model(config):
    return language_tokens.wrap(target, config)
  return language_tokens.wrap(VocabPair(tokenizer.load(
      where.source_vocab, config.source_vocab_size or config.vocab_size), target), config)
