"""Tasks other than translation plug in here: a dataset name and the hooks that differ.

Translation is the default everywhere. A task (`config.dataset` naming it) supplies what the
layers below it cannot know: how its splits are read and fingerprinted (t2t_jax.data), which
symbols the vocabulary must keep whole (training), how decoded outputs are scored
(inference) and turned into output lines (`--mode=decode`). Its package registers it on
import (`t2t_jax/parsing/task.py` registers 'treebank'); `get` imports the module of a task that
ships with t2t_jax (`BUILTIN`) the first time that task is looked up, so that every caller
finds it whatever the program imported, while nothing below the task's package imports it at
import time (the layers in pyproject.toml hold).
"""

import dataclasses
import importlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Task:
  """The hooks of one task.

  Attributes:
    load_split: (config, split, data_dir, *, process_index, timeout_s, poll_s, per_host) ->
      a random-access source of {'source', 'target'} (as `corpora.load_split`).
    locate: config -> (folder, splits, sha256 of all files, {split: {file: sha256}}), the
      data fingerprint of its files (as `fingerprint.compute` records for a local corpus).
    vocabulary_symbols: the training targets -> the symbols SentencePiece keeps whole.
    decoded_scores: (pairs, hypotheses, tokenizer) -> the scores of decoded `hypotheses`
      of `pairs` (replacing BLEU), with 'hypotheses' and 'references' as output lines.
    decode_lines: (translator, lines, progress) -> the output line of every input line.
    present_splits: config -> the names of the splits its files hold ('train', 'dev', ...).
    expected_files: (config, split) -> the files a split consists of, for error messages.
  """
  load_split: Callable[..., Any]
  locate: Callable[[Any], tuple]
  vocabulary_symbols: Callable[[Iterable[str]], List[str]]
  decoded_scores: Callable[[Sequence[Dict[str, str]], Sequence[str], Any], Dict[str, Any]]
  decode_lines: Callable[..., List[str]]
  present_splits: Callable[[Any], Iterable[str]]
  expected_files: Callable[[Any, str], str]


_TASKS: Dict[str, Task] = {}

# The tasks that ship with t2t_jax: dataset name -> the module that registers it on import.
BUILTIN = {'treebank': 't2t_jax.parsing.task'}


def register(dataset: str, task: Task) -> None:
  """Makes `task` the one of `config.dataset == dataset`."""
  _TASKS[dataset] = task


def get(dataset: str) -> Optional[Task]:
  """The task registered for `dataset` (a built-in one is imported here), None for translation."""
  if dataset not in _TASKS and dataset in BUILTIN:
    importlib.import_module(BUILTIN[dataset])  # registers it
  return _TASKS.get(dataset)
