"""What a workdir's vocabulary was trained from: `vocab/spm.meta.json`, beside `spm.model`.

The record holds the settings that determine the vocabulary (`vocab_size`,
`vocab_sample_sentences`), the data fingerprint of the corpus it was sampled from
(`data/fingerprint.py`: the training files' sha256, or the TFDS name/config/version) and the
sha256 of the `spm.model` it describes. `tokenizer.load_or_train` writes it before the model
(so an interrupted training leaves a record that does not describe the model, never a model
without its record) and compares it with the run's own on every reuse: a vocabulary trained
from other data or settings is trained again while no checkpoint depends on it, and refused
once checkpoints do. A vocabulary from before records existed has none and is accepted.

Checkpoints save `of_tokenizer` (sha256 and size) as their `vocabulary` item, so that a
vocabulary replaced by another one (same size, still parses) is noticed at resume, eval and
decode, and so that a checkpoint of another run is told apart from a replaced vocabulary
(`checkpoint_mismatch`, `describes`).

Separate vocabularies (`share_vocab=False`, `vocabularies.py`): the target side's record and
model are the shared one's files, the source side's `vocab/source_spm.*` (every function taking
a workdir takes `layout.SourceSide` for them); each record says which side's text it was trained
on (`trained_on`; none: both languages), and the checkpoints' item holds the source side's
sha256 and size beside the target's (`source_sha256`, `source_vocab_size`; `side_item`).
"""

import hashlib
import json
from typing import Any, Dict, Optional, Tuple

from etils import epath

from t2t_jax import config as config_lib
from t2t_jax.data import fingerprint as fingerprint_lib
from t2t_jax.data import vocab_pair
from t2t_jax.storage import layout, paths

SETTINGS = ('vocab_size', 'vocab_sample_sentences')
_DATA_KEYS = ('dataset', 'source_lang', 'target_lang', 'train_split')


def path(workdir: str) -> str:
  """`<workdir>/vocab/spm.meta.json`."""
  return layout.of(workdir).vocab_record


def trained_on(config: Any) -> Optional[str]:
  """Which side's text `config`'s vocabulary is made from: None (both: one shared vocabulary),
  'target', or 'source' (the source side's view of the config, `vocabularies.side_config`)."""
  if getattr(config, 'share_vocab', True) and getattr(config, 'share_tokenizer', True):
    return None
  return getattr(config, 'vocab_side', 'target')


def given(config: Any) -> Optional[str]:
  """The vocabulary file a run takes as it is instead of training one, or None: `vocab_model`,
  or that of the run `config.init_from` names (`<workdir>/vocab/spm.model`); for the source
  side (`trained_on`) `source_vocab_model`, or that run's `vocab/source_spm.model`."""
  source = trained_on(config) == 'source'
  model = getattr(config, 'source_vocab_model' if source else 'vocab_model', '')
  if model:
    return model
  spec = getattr(config, 'init_from', '')
  if not spec:
    return None
  run = layout.of(config_lib.init_from_parts(spec)[0])
  return run.source_vocab if source else run.vocab


def wanted(config: Any, data_fingerprint: Optional[Dict[str, Any]],
           recorded: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
  """The record a vocabulary made now for `config` would have (without its sha256): trained
  from its data and settings, or taken as it is (`given`: its path and sha256).

  `recorded`: the workdir's record when checkpoints depend on its vocabulary (a resumed run).
  A vocabulary that was given is then provenance: not named again, or no longer where it was
  (a moved `vocab_model`, a moved or deleted `init_from` parent), it is the recorded one; a
  file named again and readable is compared by content.
  """
  source = given(config)
  taken = recorded is not None and 'given_sha256' in recorded
  if taken and source is None:
    return {'given': recorded.get('given'), 'given_sha256': recorded['given_sha256']}
  if source is not None:
    try:
      digest = sha256(paths.read_bytes(source))
    except OSError as e:
      if taken:
        return {'given': recorded.get('given'), 'given_sha256': recorded['given_sha256']}
      key = 'source_vocab_model' if trained_on(config) == 'source' else 'vocab_model'
      key = key if getattr(config, key, '') else 'init_from'
      raise config_lib.ConfigError(f'--config.{key}={config[key]}: the vocabulary {source} '
                                   f'cannot be read ({type(e).__name__}: {e})') from None
    return {'given': source, 'given_sha256': digest}
  record = dict({k: int(config[k]) for k in SETTINGS}, data=data_fingerprint)
  if config.get('byte_fallback'):  # only when on: the records made before it stay equal
    record['byte_fallback'] = True
  if trained_on(config):  # a shared vocabulary's record stays as it always was
    record['trained_on'] = trained_on(config)
  return record


def sha256(model: bytes) -> str:
  return hashlib.sha256(model).hexdigest()


def write(workdir: str, record: Dict[str, Any], model_sha256: str) -> None:
  """Writes the record of the model whose bytes hash to `model_sha256` (atomically)."""
  data = json.dumps(dict(record, sha256=model_sha256), indent=1, sort_keys=True)
  paths.write_atomic(path(workdir), data.encode('utf-8'), overwrite=True)


def read(workdir: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
  """(record, None); (None, None) when there is none; (None, why) when it is unreadable."""
  where = path(workdir)
  paths.forget(where)
  if not epath.Path(where).exists():
    return None, None
  try:
    record = json.loads(paths.read_bytes(where).decode('utf-8'))
  except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError included
    return None, f'{type(e).__name__}: {e}'
  if not isinstance(record, dict) or not isinstance(record.get('sha256'), str):
    return None, 'not a vocabulary record'
  return record, None


def difference(saved: Dict[str, Any], current: Dict[str, Any]) -> Optional[str]:
  """What differs between the record `saved` and the run's `wanted` one, or None."""
  if 'given_sha256' in saved or 'given_sha256' in current:  # taken as it is: its bytes count
    if saved.get('given_sha256') == current.get('given_sha256'):
      return None
    return (f'the vocabulary given then ({saved.get("given") or "trained here"}) is not the '
            f'one given now ({current.get("given") or "trained here"}): sha256 '
            f'{str(saved.get("given_sha256") or saved.get("sha256"))[:12]}... then, '
            f'{str(current.get("given_sha256"))[:12]}... now')
  diffs = [f'{k} {saved.get(k)!r} then, {current[k]!r} now' for k in SETTINGS
           if saved.get(k) != current[k]]
  if saved.get('trained_on') != current.get('trained_on'):
    diffs.append(f'trained on {_text(saved)} then, on {_text(current)} now')
  before, now = saved.get('data'), current.get('data')
  if before and now:  # a library caller may not know its data
    diffs += [f'{k} {before.get(k)!r} then, {now.get(k)!r} now' for k in _DATA_KEYS
              if before.get(k) != now.get(k)]
    refusal, _ = fingerprint_lib.compare(before, now)
    if refusal and not diffs:
      diffs.append(refusal)
  return '; '.join(diffs) or None


def _text(record: Dict[str, Any]) -> str:
  return {'source': 'the source text', 'target': 'the target text'}.get(
      record.get('trained_on'), 'both languages')


def of_tokenizer(tok: Any) -> Dict[str, Any]:
  """What a checkpoint saves of the vocabulary it was trained with: sha256 and size, of a
  `VocabPair`'s target side, with the source side's as `source_sha256`, `source_vocab_size`."""
  target, source = vocab_pair.side(tok, 'target'), vocab_pair.side(tok, 'source')
  saved = {'sha256': target.fingerprint, 'vocab_size': target.vocab_size}
  # One model under both sides' language tokens (`language_tokens.Tagged`) is one vocabulary.
  if getattr(source, 'tok', source) is not getattr(target, 'tok', target):
    saved.update(source_sha256=source.fingerprint, source_vocab_size=source.vocab_size)
  return saved


def side_item(saved: Optional[Dict[str, Any]], which: str) -> Optional[Dict[str, Any]]:
  """What a checkpoint saved (`of_tokenizer`) of `which` side's vocabulary, as `sha256` and
  `vocab_size`; None when it saved none (a shared vocabulary has no source side's)."""
  if which == 'target' or not saved:
    return saved
  if 'source_sha256' not in saved:
    return None
  return {'sha256': saved['source_sha256'], 'vocab_size': saved.get('source_vocab_size')}


def mismatched_file(saved: Optional[Dict[str, Any]], tok: Any) -> Optional[Tuple[str, str]]:
  """(the file, how it differs) of the first of `tok`'s vocabularies (the shared one, or the
  target's then the source's) that is not the one a checkpoint saved (`saved`, `of_tokenizer`;
  `checkpoint_mismatch`); None when each is."""
  for which in ('target', 'source'):
    side = vocab_pair.side(tok, which)
    if which == 'source' and side is vocab_pair.side(tok, 'target'):
      break
    problem = checkpoint_mismatch(side_item(saved, which), None, side)
    if problem:
      return side.path, problem
  return None


def describe(saved: Optional[Dict[str, Any]]) -> str:
  """One line of what a checkpoint saved of its vocabularies (`of_tokenizer`), for
  `--mode=info` ('' when it saved none)."""
  if not saved:
    return ''
  target = _pieces(saved)
  source = side_item(saved, 'source')
  if source is None:
    return f'vocabulary (shared by source and target): {target}'
  return f'vocabularies: source {_pieces(source)}; target {target}'


def _pieces(saved: Dict[str, Any]) -> str:
  return f'{saved.get("vocab_size")} pieces, sha256 {str(saved.get("sha256"))[:12]}...'


def checkpoint_mismatch(saved: Optional[Dict[str, Any]], saved_vocab_size: Optional[int],
                        tok: Any) -> Optional[str]:
  """How the vocabulary a checkpoint saved (`saved`, None for checkpoints from before it was
  saved: then only its config's `saved_vocab_size`) differs from `tok`, or None."""
  mine = f'{tok.vocab_size} pieces, sha256 {tok.fingerprint[:12]}...'
  if saved and saved.get('sha256'):
    if saved['sha256'] == tok.fingerprint:
      return None
    return (f'the checkpoint\'s has {saved.get("vocab_size")} pieces, sha256 '
            f'{str(saved["sha256"])[:12]}...; the file has {mine}')
  if saved_vocab_size is None or int(saved_vocab_size) == tok.vocab_size:
    return None
  return f'the checkpoint\'s config has vocab_size={saved_vocab_size}; the file has {mine}'


def describes(workdir: str, tok: Any) -> bool:
  """Whether the workdir's record describes `tok` (the vocabulary was trained here)."""
  record, _ = read(workdir)
  return record is not None and record['sha256'] == tok.fingerprint
