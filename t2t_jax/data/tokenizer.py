"""One shared SentencePiece BPE vocabulary for source and target (§5.1).

Ids: pad = 0, eos = 1, unk = 2, no bos. The decoder starts from EOS (id 1), so no BOS
symbol is needed; `encode` adds no EOS (the pipeline appends it).

The model is trained once per workdir (or a given one copied: `vocab_model`, `init_from`),
from a deterministic sample of the training text of both languages, into
`<workdir>/vocab/spm.model` (+ `spm.vocab`), in a local temp folder (SentencePiece writes
only local files), then written atomically into place with `spm.model` last, so its presence
means the vocabulary is complete. Process 0 trains; the others wait for that file. What it
was made from is recorded beside it first (`vocab/spm.meta.json`, `vocab_record.py`): an
existing model is reused when its record matches the run (or it has none), made again with a
warning when it does not and no checkpoint depends on it yet, and refused when one does.

Normalisation is 'identity' and character coverage 1.0, so `decode(encode(s)) == s` for any
text whose characters were in the sample, and with `byte_fallback` for any text (up to
whitespace: SentencePiece strips leading and trailing space and collapses runs of spaces).
"""

import hashlib
import os
import shutil
import time
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from absl import logging
from etils import epath
import numpy as np
import sentencepiece as spm

from t2t_jax.data import vocab_record
from t2t_jax.storage import layout, leftovers, paths

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2


class TokenizerError(ValueError):
  """A vocabulary that cannot be used, trained or found."""


_PRECIOUS = ('the checkpoints of this workdir were trained with it, so a new vocabulary '  # layout.VOCAB
             'cannot replace it: restore the file from a copy, or train in a new --workdir')


def _damaged(path: str, what: str) -> TokenizerError:
  """The error of a file that is no usable SentencePiece model; its `what` attribute says why
  without the advice to a workdir's owner (a library caller may have no workdir)."""
  error = TokenizerError(f'{path} is damaged ({what}); {_PRECIOUS}')
  error.what = what  # pylint: disable=attribute-defined-outside-init
  return error


class Tokenizer:
  """A loaded SentencePiece model. Thread-safe for encode/decode; picklable."""

  def __init__(self, path: str):
    self.path = path
    self._init_from_proto(paths.read_bytes(path))

  def _init_from_proto(self, proto: bytes) -> None:
    self._proto = proto
    try:
      self._sp = spm.SentencePieceProcessor(model_proto=proto)
    except RuntimeError:  # protobuf's ParseFromArray: truncated or garbled bytes
      raise _damaged(self.path, f'{len(proto)} bytes that are not a SentencePiece model'
                     ) from None
    if self._sp.get_piece_size() == 0:
      raise _damaged(self.path, f'{len(proto)} bytes holding no piece')
    ids = (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id(), self._sp.bos_id())
    if ids != (PAD_ID, EOS_ID, UNK_ID, -1):
      raise TokenizerError(f'{self.path}: ids (pad, eos, unk, bos) are {ids}; t2t_jax needs '
                           f'({PAD_ID}, {EOS_ID}, {UNK_ID}, -1): train it with '
                           f'--pad_id={PAD_ID} --eos_id={EOS_ID} --unk_id={UNK_ID} --bos_id=-1')

  def __getstate__(self) -> dict[str, Any]:
    return {'path': self.path, 'proto': self._proto}

  def __setstate__(self, state: dict[str, Any]) -> None:
    self.path = state['path']
    self._init_from_proto(state['proto'])

  @property
  def fingerprint(self) -> str:
    """sha256 of the model file's bytes (keys the token store of every corpus it encodes)."""
    return hashlib.sha256(self._proto).hexdigest()

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  @property
  def pad_id(self) -> int:
    return PAD_ID

  @property
  def eos_id(self) -> int:
    return EOS_ID

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, without EOS."""
    return self._sp.encode(text, out_type=int)

  def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
    """`encode` of each text (SentencePiece may use `num_threads` C++ threads)."""
    return self._sp.encode(list(texts), out_type=int, num_threads=num_threads)

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids` up to (not including) the first EOS; padding (0) is ignored.

    Args:
      ids: a list or a 1-D array of ints, e.g. one row of a decoded [batch, length] array.
    """
    out = []
    for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist():
      if i == EOS_ID:
        break
      if i != PAD_ID:
        out.append(i)
    return self._sp.decode(out)

  def pieces(self, ids: Iterable[int]) -> list[str]:
    """The SentencePiece piece of every id, padding and EOS included ('<pad>', '</s>'); a
    piece starting with '\u2581' begins a word."""
    return [self._sp.id_to_piece(i) for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist()]

  def decode_batch(self, rows: Iterable[Iterable[int]]) -> list[str]:
    """`decode` of each row of a [batch, length] array."""
    return [self.decode(row) for row in rows]

  def __repr__(self) -> str:
    return f'Tokenizer({self.path}, vocab_size={self.vocab_size})'


def load(path: str, vocab_size: Optional[int] = None) -> Tokenizer:
  """Loads a SentencePiece model file written by `train`/`load_or_train`.

  With `vocab_size` (the config saved with the checkpoints it is used with), a model of
  another size is refused as damaged: ids would silently mean other pieces.
  """
  if not epath.Path(path).is_file():
    raise TokenizerError(f'No SentencePiece model at {path}; {_PRECIOUS}.')
  tok = Tokenizer(path)
  if vocab_size is not None and tok.vocab_size != vocab_size:
    raise _damaged(path, f'{tok.vocab_size} pieces, but the checkpoints were trained with '
                   f'vocab_size={vocab_size}')
  return tok


def sample_sentences(source: Any, num_per_language: int, seed: int = 0) -> Iterator[str]:
  """Yields source and target text of a deterministic sample of pairs.

  Args:
    source: random access to `{'source': str, 'target': str}` with `len()`.
    num_per_language: pairs to sample (all pairs if the corpus is smaller).
    seed: the sample depends only on (len(source), num_per_language, seed).
  """
  n = len(source)
  if num_per_language >= n:
    indices = np.arange(n)
  else:
    rng = np.random.default_rng(seed)
    # Sorted: sequential reads are much faster on array_record files.
    indices = np.sort(rng.choice(n, size=num_per_language, replace=False))
  for start in range(0, len(indices), 4096):
    chunk = [int(i) for i in indices[start:start + 4096]]
    getitems = getattr(source, '__getitems__', None)
    for ex in (getitems(chunk) if getitems else [source[i] for i in chunk]):
      yield ex['source']
      yield ex['target']


def train(sentences: Iterable[str], vocab_size: int, model_path: str,
          user_defined_symbols: Sequence[str] = (),
          before_model: Optional[Callable[[bytes], None]] = None,
          byte_fallback: bool = False) -> Tokenizer:
  """Trains a BPE model on `sentences` and writes `model_path` (+ `.vocab`) atomically.
  `byte_fallback`: 256 pieces `<0x00>`..`<0xFF>` of `vocab_size` spell the UTF-8 bytes of a
  character without a piece (SentencePiece's byte fallback; see the module doc).

  `user_defined_symbols` become pieces of their own that BPE never splits or merges, cut out
  of the text wherever they occur (parsing's tree tokens, `parsing/linearize.py`); they count
  towards `vocab_size`. `before_model(model bytes)` runs before the model file is written
  (`load_or_train` writes the vocabulary's record there).
  """
  model_path = paths.absolute(model_path)
  prefix = os.path.splitext(os.path.basename(model_path))[0]
  tmp = leftovers.owned_temp_dir('t2t_jax-spm-')  # also removes those of killed runs
  try:
    count = [0]

    def nonempty() -> Iterator[str]:
      for s in sentences:
        if s and s.strip():
          count[0] += 1
          yield s

    try:
      spm.SentencePieceTrainer.train(
          sentence_iterator=nonempty(), model_prefix=os.path.join(tmp, prefix),
          model_type='bpe', vocab_size=vocab_size,
          pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
          user_defined_symbols=list(user_defined_symbols), character_coverage=1.0,
          normalization_rule_name='identity', byte_fallback=bool(byte_fallback),
          input_sentence_size=0, shuffle_input_sentence=False,
          num_threads=os.cpu_count() or 1, minloglevel=1)
    except RuntimeError as e:
      raise TokenizerError(f'SentencePiece training of {model_path} with vocab_size='
                           f'{vocab_size} on {count[0]} sentences failed: {e}') from e
    # The .vocab first, the .model last: readers wait for the .model.
    for suffix, target in (('.vocab', os.path.splitext(model_path)[0] + '.vocab'),
                           ('.model', model_path)):
      with open(os.path.join(tmp, prefix + suffix), 'rb') as f:
        data = f.read()
      if suffix == '.model' and before_model is not None:
        before_model(data)
      paths.write_atomic(target, data, overwrite=True)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  logging.info('Trained a %d-piece BPE vocabulary on %d sentences: %s', vocab_size,
               count[0], model_path)
  return Tokenizer(model_path)


def _checked(tok: Tokenizer, vocab_size: int) -> Tokenizer:
  if tok.vocab_size != vocab_size:
    raise TokenizerError(f'{tok.path} has vocab size {tok.vocab_size} but config.vocab_size '
                         f'is {vocab_size}; use another workdir or set vocab_size='
                         f'{tok.vocab_size} (the existing vocabulary is never overwritten).')
  return tok


def load_or_train(config: Any, workdir: str, sentences_fn: Callable[[], Iterable[str]],
                  process_index: int = 0, process_count: int = 1, *,
                  symbols_fn: Optional[Callable[[], Sequence[str]]] = None,
                  trained: bool = False, data_fingerprint: Optional[dict] = None,
                  checkpoint_vocabulary: Optional[dict] = None,
                  timeout_s: float = 7200.0, poll_s: float = 1.0) -> Tokenizer:
  """The workdir's vocabulary: loaded if `<workdir>/vocab/spm.model` exists, else trained.

  A given vocabulary (`vocab_record.given`: `vocab_model`, `init_from`'s) is copied, not
  trained. An existing one whose record (`vocab_record.py`) says it was made from other data,
  settings or file is made again, with one warning, while no checkpoint depends on it
  (`trained` False), and refused otherwise; one from before records existed is reused.

  Args:
    config: uses `vocab_size` and `vocab_sample_sentences`.
    workdir: the run's folder.
    sentences_fn: returns an iterable of training sentences of both languages (e.g.
      `lambda: sample_sentences(train_source, config.vocab_sample_sentences)`); called only
      by process 0 and only when training; at most 2 * vocab_sample_sentences are used.
    process_index, process_count: `jax.process_index()`, `jax.process_count()`; symbols_fn:
      the user-defined symbols of `train` (called like `sentences_fn`).
    trained: the workdir has checkpoints: its vocabulary must exist, match
      `config.vocab_size` and its record (TokenizerError naming the file otherwise), never be
      trained anew.
    data_fingerprint: what the training data is (`fingerprint.compute`), recorded with a
      vocabulary trained now and compared with an existing one's record; None: not compared.
    checkpoint_vocabulary: with `trained`, what the newest checkpoint saved of its
      vocabulary (`vocab_record.of_tokenizer`; None: unknown): it tells a replaced file from
      a damaged record when the two disagree.
    timeout_s, poll_s: how long processes other than 0 wait for the file, how often they look.

  Returns:
    The Tokenizer, whose vocab_size equals config.vocab_size (TokenizerError otherwise).
  """
  path, recorded = vocab_path(workdir), vocab_record.read(workdir)[0] if trained else None
  want = vocab_record.wanted(config, data_fingerprint, recorded)  # given files: provenance
  stale = _stale(workdir, want, trained, checkpoint_vocabulary)
  if stale is None:
    tok = load(path, config.vocab_size) if trained else _checked(Tokenizer(path),
                                                                 config.vocab_size)
    logging.info('Reusing the vocabulary %s', path)
    return tok
  if process_index == 0:
    if stale != _MISSING:
      logging.warning('The vocabulary %s must be %s again: %s; no checkpoint depends on it '
                      'yet', path, 'taken' if 'given' in want else 'trained', stale)
    return (_take_given(config, workdir, want) if 'given' in want else
            _train_recorded(config, workdir, want, sentences_fn, symbols_fn))
  logging.info('Process %d/%d waits for the vocabulary %s', process_index, process_count,
               path)
  deadline = time.monotonic() + timeout_s
  while _stale(workdir, want, False) is not None:
    if time.monotonic() > deadline:
      raise TokenizerError(f'Process {process_index} waited {timeout_s:g} s for process 0 to '
                           f'write {path}; it did not appear.')
    time.sleep(poll_s)
  return _checked(Tokenizer(path), config.vocab_size)


_MISSING = 'there is none'


def _take_given(config: Any, workdir: str, want: dict) -> Tokenizer:
  """Copies the given vocabulary (`vocab_record.given`, checked) into the workdir byte for
  byte, its record `want` written just before the model, as a trained one's."""
  model = _checked(Tokenizer(want['given']), config.vocab_size)._proto  # pylint: disable=protected-access
  paths.makedirs(os.path.dirname(vocab_path(workdir)))
  vocab_record.write(workdir, want, vocab_record.sha256(model))
  paths.write_atomic(vocab_path(workdir), model, overwrite=True)
  logging.info('Took the vocabulary %s as it is into %s', want['given'], vocab_path(workdir))
  return _checked(Tokenizer(vocab_path(workdir)), config.vocab_size)


def _train_recorded(config: Any, workdir: str, want: dict,
                    sentences_fn: Callable[[], Iterable[str]],
                    symbols_fn: Optional[Callable[[], Sequence[str]]]) -> Tokenizer:
  """Trains the workdir's vocabulary on at most 2 * vocab_sample_sentences sentences, its
  record `want` written just before the model."""
  limit = 2 * int(config.vocab_sample_sentences)

  def bounded() -> Iterator[str]:
    for i, s in enumerate(sentences_fn()):
      if i >= limit:
        return
      yield s

  symbols = symbols_fn() if symbols_fn is not None else ()
  return _checked(train(bounded(), config.vocab_size, vocab_path(workdir), symbols,
                        before_model=lambda model: vocab_record.write(
                            workdir, want, vocab_record.sha256(model)),
                        byte_fallback=config.get('byte_fallback', False)), config.vocab_size)


def _stale(workdir: str, want: dict, trained: bool,
           checkpoint_vocabulary: Optional[dict] = None) -> Optional[str]:
  """None when the workdir's vocabulary may be used for a run that `want`s it (its record,
  `vocab_record.wanted`); else why it is (to be) trained. With `trained` (checkpoints depend
  on it) a vocabulary that differs raises TokenizerError naming it; a missing or unreadable
  one is left to `load` to report, an unreadable record is only warned about, and a record
  that does not describe the file is judged by `checkpoint_vocabulary` (what the checkpoints
  saved of theirs, `vocab_record.of_tokenizer`; None: unknown): `_disagreeing_record`."""
  path, where = vocab_path(workdir), vocab_record.path(workdir)
  if not _appeared(path):
    return None if trained else _MISSING
  record, problem = vocab_record.read(workdir)
  if record is None:  # none: a vocabulary from before records existed
    if problem is not None and trained:
      logging.warning('%s is unreadable (%s); keeping the vocabulary %s unchecked (the '
                      'checkpoints were trained with it)', where, problem, path)
    return (None if problem is None or trained
            else f'its record {where} is unreadable ({problem})')
  actual = vocab_record.sha256(paths.read_bytes(path))
  if record['sha256'] != actual:
    if trained:
      return _disagreeing_record(path, where, record, actual, checkpoint_vocabulary)
    why = (f'it is not the vocabulary {where} describes (sha256 {record["sha256"][:12]}...): '
           'an interrupted training, or a replaced file')
  else:
    diff = vocab_record.difference(record, want)
    why = diff and f'it was trained from other data or settings ({diff})'
  if why and trained:
    Tokenizer(path)  # one that does not parse is reported as damaged
    raise TokenizerError(f'{path}: {why}; the checkpoints of this workdir were trained with '
                         'the vocabulary its record describes, so it cannot be trained again: '
                         'restore those files and settings, or train in a new --workdir '
                         '(nothing was changed)')
  return why


def _disagreeing_record(path: str, where: str, record: dict, actual: str,
                        checkpoint_vocabulary: Optional[dict]) -> None:
  """With checkpoints, a record whose sha256 is not the file's: the checkpoints' own sha256
  says which of the two is wrong. Matching the file, the record is damaged or edited: warned
  about, the vocabulary kept. Else TokenizerError, saying only what the sha256s show."""
  saved = (checkpoint_vocabulary or {}).get('sha256')
  shas = (f'sha256 {actual[:12]}... in the file, {str(record["sha256"])[:12]}... in the '
          'record' + (f', {str(saved)[:12]}... in the checkpoints' if saved else ''))
  if saved == actual:
    logging.warning('%s does not describe %s (%s): the record is damaged or was edited; the '
                    'checkpoints were trained with the file, which is kept (the record is '
                    'left as it is: restore it, or remove it to stop this warning)', where,
                    path, shas)
    return None
  Tokenizer(path)  # one that does not parse is reported as damaged
  if saved == record['sha256']:
    blame = ('the checkpoints of this workdir were trained with the vocabulary its record '
             'describes: the file was replaced')
  elif saved:
    blame = ('nor is it the vocabulary the checkpoints of this workdir were trained with: '
             'the file was replaced')
  else:  # checkpoints from before they saved their vocabulary
    blame = 'the file was replaced or the record edited'
  raise TokenizerError(f'{path}: it is not the vocabulary {where} describes ({shas}); {blame}; '
                       'it cannot be trained again: restore those files, or train in a new '
                       '--workdir (nothing was changed)')


def _appeared(path: str) -> bool:
  """Whether another process has written `path` by now (asking the store, not a cache)."""
  paths.forget(path)
  return epath.Path(path).is_file()


def vocab_path(workdir: str) -> str:
  """`<workdir>/vocab/spm.model`."""
  return layout.of(workdir).vocab
