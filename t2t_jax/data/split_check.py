"""The splits a run will need, checked before any data is prepared or any step is taken: a
missing `final_eval_split` fails in milliseconds, not after training."""

from typing import Any, Sequence

from t2t_jax.data import corpora, tasks, textfiles


def _expected_files(config: Any, split: str) -> str:
  """The files a split of a local corpus or treebank consists of, for error messages."""
  task = tasks.get(config.dataset)
  if task is not None:
    return task.expected_files(config, split)
  corpus_dir, src, tgt = corpora.local_corpus_location(config)
  return textfiles.expected_paths(corpus_dir, split, src, tgt)


def check_splits(config: Any, keys: Sequence[str]) -> None:
  """Refuses, before any data is prepared, a split named by the config `keys` (such as
  'final_eval_split') that a local corpus or treebank lacks, or that a local corpus has
  without one non-empty pair; an empty value names none. WMT has every split.

  Raises:
    MissingDataError: one line naming the key, its value and the files expected.
    DataError: one line naming the key, its value and the files of the empty split.
  """
  if config.dataset not in corpora.LOCAL_DATASETS:
    return
  task = tasks.get(config.dataset)
  if task is not None:
    present = task.present_splits(config)
  else:
    present = textfiles.discover_splits(*corpora.local_corpus_location(config))
  for key in keys:
    split = corpora.SPLIT_ALIASES.get(config[key], config[key])
    if split and split not in present:
      raise textfiles.MissingDataError(
          f'config key {key!r} is {config[key]!r}, but there is no {split!r} split: expected '
          f'{_expected_files(config, split)}.')
    # Only the splits the run uses: an empty test.en beside final_eval_split='' is no error.
    if split and task is None and not textfiles.has_pair(present[split]):
      raise corpora.DataError(
          f'config key {key!r} is {config[key]!r}, but the {split!r} split '
          f'({", ".join(present[split].paths)}) has no pair with both sides non-empty.')
