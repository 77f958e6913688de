"""The data fingerprint saved with each training checkpoint, and what a change means on resume.

A resumed run continues the data iterator at a saved position and keeps the vocabulary trained
from the original text, so training files edited in place would silently mix two corpora. The
fingerprint records what the data was:

* a local corpus: `{'dataset': 'local', 'corpus_dir', 'source_lang', 'target_lang',
  'train_split', 'sha256' (all files together, as in the prepared dataset's name), 'files':
  {split: {file name: sha256}}}`;
* a treebank: the same with `corpus_dir` the treebank folder and its tree files;
* WMT from TFDS: `{'dataset', 'source_lang', 'target_lang', 'train_split', 'tfds_name',
  'tfds_config', 'tfds_version'}`;
* a mixture (`config.corpora`): the primary entry's (its dev and test are the run's) with
  `'corpora'`: every entry's own, with its `name` and `entry` (pair, weight and tag).

`compare` refuses a changed training split (or another dataset or TFDS version) and only notes
changed dev/test files, whose change makes metrics before and after incomparable but leaves the
checkpoint valid.
"""

import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from t2t_jax import config as config_lib
from t2t_jax.storage import paths

_WMT_KEYS = ('tfds_name', 'tfds_config', 'tfds_version')


def compute(config: Any, data_dir: Optional[str]) -> Dict[str, Any]:
  """The fingerprint of `config`'s data (see the module doc); reads no network.

  For a local corpus this hashes the files (the preparation reuses the result, see
  `corpora.file_digests`); missing or malformed corpus files raise `corpora.DataError`.
  """
  # Here, not at the top: checkpoint.py needs `compare` alone, and eval/decode should not pay
  # for importing TFDS.
  from t2t_jax.data import corpora, tasks, textfiles, wmt  # pylint: disable=import-outside-toplevel
  common = {'dataset': config.dataset, 'source_lang': config.source_lang,
            'target_lang': config.target_lang, 'train_split': config.train_split}
  if config.dataset in corpora.WMT_DATASETS:
    builder = wmt.wmt_builder(config.dataset, data_dir)  # the one corpora.py prepares
    return dict(common, tfds_name=builder.name, tfds_version=str(builder.version),
                tfds_config=builder.builder_config.name if builder.builder_config else '')
  if config.get('corpora'):
    return _of_mixture(config, data_dir, common)
  task = tasks.get(config.dataset)  # a treebank: t2t_jax/parsing/task.py
  if task is not None:
    folder, _, combined, files = task.locate(config)
    return dict(common, corpus_dir=folder, sha256=combined, files=files)
  corpus_dir, src, tgt = corpora.local_corpus_location(config)
  corpus_dir = paths.absolute(corpus_dir)
  splits = textfiles.discover_splits(corpus_dir, src, tgt)
  combined, files = corpora.file_digests(corpus_dir, splits, src, tgt)
  return dict(common, corpus_dir=corpus_dir, sha256=combined, files=files)


def _of_mixture(config: Any, data_dir: Optional[str], common: Dict[str, Any]) -> Dict[str, Any]:
  from t2t_jax.data import mixture  # pylint: disable=import-outside-toplevel
  parts = []
  for entry in mixture.entries(config):
    part = mixture.named(entry, lambda e=entry: compute(mixture.entry_config(config, e), data_dir))
    parts.append(dict(part, name=entry.name, entry=entry.key))
  primary = mixture.primary(config)
  main = parts[mixture.entries(config).index(primary)]
  combined = hashlib.sha256(json.dumps([[p['entry'], p['sha256']] for p in parts]).encode())
  return dict(common, corpus_dir=main['corpus_dir'], sha256=combined.hexdigest(),
              files=main['files'], corpora=parts, primary=primary.key)


def _compare_mixtures(saved: Dict[str, Any], current: Dict[str, Any]
                      ) -> Tuple[Optional[str], List[str]]:
  """`compare` of two fingerprints of which one at least is a mixture's: the same entries
  (pairs, weights, tags) in the same order, each compared as a corpus of its own."""
  then, now = saved.get('corpora') or [saved], current.get('corpora') or [current]
  entries = lambda parts: ', '.join(  # noqa: E731
      f'{p.get("corpus_dir")} ({p["entry"]})' if p.get('entry') else str(p.get('corpus_dir'))
      for p in parts)
  if [p.get('entry') for p in then] != [p.get('entry') for p in now]:
    return f'the mixture was {entries(then)}; it is {entries(now)}', []
  refusals, notes = [], []
  for before, after in zip(then, now):
    refusal, more = compare(before, after)
    refusals += [f'{after["name"]}: {refusal}'] if refusal else []
    notes += [f'{after["name"]}: {note}' for note in more]
  return ('; '.join(refusals) or None), notes


def _file_changes(saved: Dict[str, Any], current: Dict[str, Any], split: str) -> List[str]:
  """'<path> (what changed)' for each file of `split` that differs. A file is 'gone' or 'new'
  only within one folder; across two folders (a corpus named elsewhere, or none: the bundled
  one), each side's files are named with their own folder, since neither is gone."""
  before = saved.get('files', {}).get(split, {})
  now = current.get('files', {}).get(split, {})
  then_dir, now_dir = saved.get('corpus_dir') or current['corpus_dir'], current['corpus_dir']
  if then_dir != now_dir and set(before) != set(now):
    return [f'{then_dir} had {", ".join(sorted(before)) or "no files"}; {now_dir} has '
            f'{", ".join(sorted(now)) or "no files"}']
  changes = []
  for name in sorted(set(before) | set(now)):
    path = os.path.join(now_dir, name)
    if name not in now:
      changes.append(f'{path} (gone)')
    elif name not in before:
      changes.append(f'{path} (new)')
    elif before[name] != now[name]:
      changes.append(f'{path} (sha256 {before[name][:12]}... now {now[name][:12]}...)')
  return changes


def compare(saved: Dict[str, Any], current: Dict[str, Any]) -> Tuple[Optional[str], List[str]]:
  """(why resuming on `current` data is refused, or None; notes worth a warning).

  Args:
    saved: the fingerprint stored with a checkpoint.
    current: `compute` for the run about to resume.
  """
  if saved.get('dataset') != current.get('dataset'):
    return (f'dataset {saved.get("dataset")!r} then, {current.get("dataset")!r} now'), []
  if saved.get('corpora') or current.get('corpora'):
    return _compare_mixtures(saved, current)
  if 'files' not in current:  # WMT
    changed = [f'{k} {saved.get(k)!r} then, {current.get(k)!r} now' for k in _WMT_KEYS
               if saved.get(k) != current.get(k)]
    return ('TFDS ' + ', '.join(changed) if changed else None), []
  train = saved.get('train_split', 'train')
  changed = _file_changes(saved, current, train)
  refusal = (f'the {train} split changed since they were written: {", ".join(changed)}'
             if changed else None)
  notes = []
  for split in sorted((set(saved.get('files', {})) | set(current.get('files', {}))) - {train}):
    if files := _file_changes(saved, current, split):
      notes.append(f'the {split} split changed since the checkpoint was written '
                   f'({", ".join(files)}); its metrics before and after are not comparable')
  if saved.get('corpus_dir') != current['corpus_dir'] and not changed:
    notes.append(f'the corpus moved from {saved.get("corpus_dir")} to {current["corpus_dir"]} '
                 'with the same training files')
  return refusal, notes


def scored_difference(saved: Dict[str, Any], current: Dict[str, Any],
                      split: str) -> Optional[str]:
  """How the `split` an evaluation scores now (`current`, `compute` of its config) differs from
  that split of the data a checkpoint was trained with (`saved`), or None: another dataset or
  TFDS version, or files of the split changed, gone or new (a corpus found at another folder,
  e.g. a relative path read from another current folder, is named with the checkpoint's)."""
  if saved.get('dataset') != current.get('dataset'):
    return f'dataset {saved.get("dataset")!r} then, {current.get("dataset")!r} now'
  if current.get('primary') and saved.get('corpora'):  # the entry of the pair scored now
    saved = next((p for p in saved['corpora'] if p.get('entry') == current['primary']), saved)
  if 'files' not in current:  # WMT
    changed = [f'{k} {saved.get(k)!r} then, {current.get(k)!r} now' for k in _WMT_KEYS
               if saved.get(k) != current.get(k)]
    return ('TFDS ' + ', '.join(changed)) if changed else None
  changes = _file_changes(saved, current, split)
  if not changes:
    return None
  moved = (f' (the checkpoint recorded {saved.get("corpus_dir")})'
           if saved.get('corpus_dir') != current['corpus_dir'] else '')
  return (f'the {split} split of {current["corpus_dir"]}{moved} is not the one it recorded: '
          f'{", ".join(changes)}')


def folder_advice(saved_config: Dict[str, Any], config: Any) -> str:
  """'' or the sentence naming the data folder the run was trained on when this command names
  another (or none: the bundled corpus), and the flag that points at its place."""
  for key in ('local_corpus_dir', 'treebank_dir'):
    then, now = saved_config.get(key) or '', config.get(key) or ''
    if then and config_lib.absolute_value(key, then) != config_lib.absolute_value(key, now):
      reads = now or (f'no --config.{key}' + (' (the bundled corpus)'
                                              if key == 'local_corpus_dir' else ''))
      return (f'The run was trained on {then} (--config.{key}); this command reads {reads}: '
              f'name that data\'s place with --config.{key}=PATH (a moved copy is accepted '
              'by its content). ')
  return ''
