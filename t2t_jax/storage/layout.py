"""The workdir's layout: every path the project writes there, what it is, and what a damaged
copy costs. One place names them all; modules ask `Workdir` for a path instead of joining
literals, and the damage tests iterate over `ENTRIES`, so a new file cannot appear without a
class and a test.

Classes (`Entry.kind`):
  PRECIOUS  the run's own work, which cannot be made again: checkpoints, the vocabulary of a
            trained run, metrics. Damage stops before any work with one line naming the file
            and what to do, or falls back to an older copy (checkpoints).
  DERIVED   made from other files that are still there (prepared corpus, token store, plots,
            averaged checkpoints, eval results): one warning line, then rebuilt.
  WRITTEN   written for people or other tools, never read back here (TensorBoard events,
            checkpoints set aside as unreadable, the vocabulary listing).
  LOCK      coordination files; recreated when missing, one line when unusable.

`docs/architecture.md` ("Files a run writes") is the same inventory as a table, with the
files written outside the workdir (outputs, the compilation cache, host caches).
"""

import dataclasses
import os
from typing import Tuple, Union

from t2t_jax.storage import paths

PRECIOUS, DERIVED, WRITTEN, LOCK = 'precious', 'derived', 'written', 'lock'


@dataclasses.dataclass(frozen=True)
class Entry:
  """One path of a workdir.

  Attributes:
    name: its path relative to the workdir; `<...>` marks a part that varies (a step).
    kind: PRECIOUS, DERIVED, WRITTEN or LOCK (see the module doc).
    writer: what writes it.
    readers: what reads it back ('' when nothing does).
    on_damage: what happens when it is missing, truncated or garbled.
  """
  name: str
  kind: str
  writer: str
  readers: str
  on_damage: str


VOCAB = Entry(
    'vocab/spm.model', PRECIOUS, 'train (process 0, once, before the first step)',
    'train, eval, decode, attention, export',
    'missing before any checkpoint: trained; otherwise one line naming the file, which cannot '
    'be retrained for the existing checkpoints (restore it, or use a new --workdir)')
VOCAB_RECORD = Entry(
    'vocab/spm.meta.json', PRECIOUS, 'train, before spm.model (`data/vocab_record.py`)',
    'train',
    'what the vocabulary was trained from (data fingerprint, vocab settings, its sha256); '
    'missing (a vocabulary from before records): accepted; unreadable: one warning line, '
    'then trained again with the vocabulary if no checkpoint exists, else kept (the '
    'checkpoints\' vocabulary hash still guards the vocabulary)')
VOCAB_LISTING = Entry(
    'vocab/spm.vocab', WRITTEN, 'train, beside spm.model', '',
    'nothing reads it (the pieces and their scores, for people)')
# Separate vocabularies (`share_vocab=False`): spm.* is the target side's, these the source's.
SOURCE_VOCAB = Entry(
    'vocab/source_spm.model', PRECIOUS, 'train with share_vocab=False (process 0, once, '
    'before the first step)', 'train, eval, decode, score, attention, export',
    VOCAB.on_damage)
SOURCE_VOCAB_RECORD = Entry(
    'vocab/source_spm.meta.json', PRECIOUS, 'train with share_vocab=False, before '
    'source_spm.model', 'train', VOCAB_RECORD.on_damage)
SOURCE_VOCAB_LISTING = Entry(
    'vocab/source_spm.vocab', WRITTEN, 'train with share_vocab=False, beside source_spm.model',
    '', VOCAB_LISTING.on_damage)
CHECKPOINTS = Entry(
    'checkpoints/<step>', PRECIOUS, 'train (orbax, every N steps / T minutes, last K kept)',
    'train (resume), eval, decode, attention, export, average',
    'falls back to the newest readable older step with one warning line; training moves the '
    'damaged step to checkpoints_unreadable/; none readable: one line')
UNREADABLE = Entry(
    'checkpoints_unreadable/<step>', WRITTEN, 'train, when a checkpoint is damaged', '',
    'nothing reads it (kept for the user to inspect or delete)')
AVERAGED = Entry(
    'averaged/step_<last>_last_<n>', DERIVED, 'average; train at its end',
    'eval, decode, attention, export (preferred over training checkpoints; an average of the '
    'best, step_<last>_best_<n> from average_best, only when named by --checkpoint)',
    'skipped with one warning line for the next candidate; the next average writes it again')
BEST = Entry(
    'best/step_<step>', PRECIOUS, 'train with keep_best (the K best periodic evaluations)',
    'eval, decode, attention, export (--checkpoint=best); train (what is kept)',
    'one whose record does not read is not counted, with one warning line; only folders of '
    'this name under best/ are ever deleted, by the policy that wrote them')
EARLY_STOP = Entry(
    'best/early_stop.json', WRITTEN, 'train, when early_stop_patience stops it',
    'train (a rerun does not train further and says why)',
    'removed by the user to train on')
METRICS = Entry(
    'metrics.jsonl', PRECIOUS, 'train (one JSON object per line, appended)',
    'plot, train (dev BLEU history), the final report',
    'a torn last line is cut with one warning and training appends after it; --mode=plot '
    'stops in one line naming the file and line of any other unreadable line (training only '
    'warns); never rewritten')
METRICS_SET_ASIDE = Entry(
    'metrics.old-<n>.jsonl', WRITTEN,
    'train, starting at step 0 beside a metrics.jsonl of later steps (its checkpoints gone)',
    '', 'nothing reads it (the metrics of that run, moved aside with one warning line and '
    'kept for the user)')
TENSORBOARD = Entry(
    'tensorboard', WRITTEN, 'train (a new event file per run)', '',
    'nothing here reads it; a new run writes a new event file beside damaged ones')
TRACKING = Entry(
    'tracking', DERIVED, 'train with writers wandb or mlflow (runs.json: the W&B and MLflow '
    'run ids; wandb/: W&B\'s local files; mlruns/: MLflow\'s default file store)',
    'train (a resume continues the runs of runs.json); wandb sync and mlflow ui',
    'runs.json unreadable, or its MLflow run gone from the store: one warning line, then new '
    'runs (the earlier ones stay where they are)')
PROFILE = Entry(
    'profile', WRITTEN, 'train with profile_steps (`runtime/profiling.py`)', '',
    'nothing here reads it (TensorBoard and Perfetto do); a new trace goes beside damaged ones')
PLOTS = Entry(
    'plots', DERIVED, 'plot; train at its end', '',
    'made again from metrics.jsonl by --mode=plot and at the end of training')
EVAL_RESULT = Entry(
    'eval_<split>_<step>.json', DERIVED, 'eval (`<step>`: the checkpoint\'s step, `best_<step>` '
    'for `--checkpoint=best`, `ema_<step>` for the moving average); train at its end (final '
    'report)',
    'train (the final report reuses a result of the same checkpoint)',
    'an unreadable one is ignored with one warning line and evaluated again')
EVAL_TEXTS = Entry(
    'eval_<split>_<step>.texts', DERIVED, 'eval, beside its JSON (hypotheses.txt, '
    'references.txt; sentences.tsv with eval_sentence_scores)',
    'python -m t2t_jax.inference.compare, given the JSON',
    'one line naming the file; the next eval writes them again')
TOKEN_STORE = Entry(
    'data_cache/tokens-<key>', DERIVED, 'train (once per corpus and vocabulary)',
    'train', 'one warning line, then encoded again (`data/token_store.py`)')
PREPARED = Entry(
    'tfds/<builder>/<config>/<version>', DERIVED,
    'train (local corpora and treebanks, TFDS array_record, once)', 'train, eval',
    'one warning line, moved aside to tfds/damaged/, prepared again from the corpus files '
    '(size and crc32 of every file checked against t2t_jax-manifest.json, `data/prepared.py`)')
DOWNLOADS = Entry(
    'tfds/downloads', DERIVED, 'TFDS during preparation', 'TFDS during preparation',
    "TFDS's own download cache (local corpora are read in place; nothing is downloaded)")
STORE_LOCK = Entry(
    'data_cache/.t2t_jax-prepare.lock', LOCK, 'train (one process encodes the token store)',
    'train', 'recreated when missing; one line when it cannot be opened (e.g. a folder)')
RUN_LOCK = Entry(
    '.t2t_jax.lock', LOCK, 'train: the live training run (a local flock); average, eval, '
    'decode, attention and export take none: they only read checkpoints', 'train',
    'recreated when missing, its text is only a note; one line when it cannot be opened')
RUN_LEASE = Entry(
    '.t2t_jax.lease', LOCK, 'train, on object stores (a heartbeat lease)', 'train',
    'unreadable or stale: taken over with one warning line (`storage/lease.py`)')

ENTRIES: Tuple[Entry, ...] = (
    VOCAB, VOCAB_RECORD, VOCAB_LISTING, SOURCE_VOCAB, SOURCE_VOCAB_RECORD, SOURCE_VOCAB_LISTING,
    CHECKPOINTS, UNREADABLE, AVERAGED, BEST, EARLY_STOP,
    METRICS, METRICS_SET_ASIDE, TENSORBOARD, TRACKING, PROFILE, PLOTS, EVAL_RESULT, EVAL_TEXTS,
    TOKEN_STORE, PREPARED, DOWNLOADS, STORE_LOCK, RUN_LOCK, RUN_LEASE)


class Workdir(os.PathLike):
  """A run's directory, made absolute once, and the path of each of its entries.

  Accepted wherever a workdir string is (`os.fspath` gives the root), so it can be passed down
  a call chain without every module making the path absolute again (`of`).
  """

  # The files `vocab` and `vocab_record` name: the shared (or target) vocabulary's here, the
  # source side's in a `SourceSide`.
  _VOCAB_ENTRIES = (VOCAB, VOCAB_RECORD)

  def __init__(self, root: Union[str, os.PathLike]):
    self.root = paths.absolute(root)

  def __fspath__(self) -> str:
    return self.root

  def __str__(self) -> str:
    return self.root

  def __repr__(self) -> str:
    return f'{type(self).__name__}({self.root!r})'

  def __eq__(self, other) -> bool:
    return type(other) is type(self) and other.root == self.root  # a `SourceSide` is not

  def __hash__(self) -> int:
    return hash(self.root)

  def join(self, *parts: str) -> str:
    return os.path.join(self.root, *parts)

  @property
  def vocab(self) -> str:
    return self.join(self._VOCAB_ENTRIES[0].name)

  @property
  def vocab_record(self) -> str:
    return self.join(self._VOCAB_ENTRIES[1].name)

  @property
  def source_vocab(self) -> str:
    """The source side's vocabulary of a run with separate ones (`share_vocab=False`)."""
    return self.join(SOURCE_VOCAB.name)

  @property
  def source_side(self) -> 'Workdir':
    """This workdir as its source vocabulary's reader sees it (`SourceSide`)."""
    return SourceSide(self.root)

  @property
  def checkpoints(self) -> str:
    return self.join('checkpoints')

  @property
  def unreadable(self) -> str:
    return self.join('checkpoints_unreadable')

  @property
  def best(self) -> str:
    return self.join('best')

  @property
  def averaged(self) -> str:
    return self.join('averaged')

  def averaged_checkpoint(self, last_step: int, num: int, chosen: str = 'last') -> str:
    """`chosen`: 'last' (the last `num` training checkpoints) or 'best' (the `num` best kept
    ones, `--config.average_best`)."""
    return os.path.join(self.averaged, f'step_{last_step}_{chosen}_{num}')

  @property
  def metrics(self) -> str:
    return self.join(METRICS.name)

  def metrics_set_aside(self, n: int) -> str:
    """`metrics.old-<n>.jsonl`: the metrics of a run whose checkpoints are gone."""
    return self.join(METRICS_SET_ASIDE.name.replace('<n>', str(n)))

  @property
  def tensorboard(self) -> str:
    return self.join(TENSORBOARD.name)

  @property
  def tracking(self) -> str:
    return self.join(TRACKING.name)

  @property
  def tracking_runs(self) -> str:
    """`tracking/runs.json`: the W&B and MLflow run ids a resume continues."""
    return self.join(TRACKING.name, 'runs.json')

  @property
  def profile(self) -> str:
    return self.join(PROFILE.name)

  @property
  def plots(self) -> str:
    return self.join(PLOTS.name)

  def eval_result(self, split: str, step: Union[int, str], copy: int = 0) -> str:
    """`eval_<split>_<step>.json`, or `eval_<split>_<step>.<copy>.json` for copy > 0 (an
    existing result is never replaced); `step` may be a label (`best_400`, `ema_400`)."""
    return self.join(f'eval_{split}_{step}' + (f'.{copy}' if copy else '') + '.json')

  @staticmethod
  def eval_texts(result_path: str) -> str:
    """The folder of texts beside the eval result `result_path` (`eval_dev_7.1.json` ->
    `eval_dev_7.1.texts`)."""
    return result_path[:-len('.json')] + '.texts'

  def eval_result_pattern(self, split: str, step: int) -> str:
    """The glob, relative to the root, of every `eval_result(split, step, copy)`."""
    return f'eval_{split}_{step}*.json'

  @property
  def data_cache(self) -> str:
    return self.join('data_cache')

  @property
  def tfds(self) -> str:
    return self.join('tfds')

  @property
  def lock(self) -> str:
    return self.join(RUN_LOCK.name)

  @property
  def lease(self) -> str:
    return self.join(RUN_LEASE.name)


class SourceSide(Workdir):
  """A workdir whose `vocab` and `vocab_record` are the source side's files
  (`vocab/source_spm.*`, separate vocabularies), every other path the workdir's: what the
  vocabulary's readers and writers (`data/tokenizer.load_or_train`, `data/vocab_record.py`)
  take in place of the workdir to handle the source side as they handle the shared one."""

  _VOCAB_ENTRIES = (SOURCE_VOCAB, SOURCE_VOCAB_RECORD)


# The lock processes of one host take in turn to prepare or encode into a shared folder
# (`data/prepared.host_lock`): STORE_LOCK in a workdir, and in the host caches of remote ones.
PREPARE_LOCK_NAME = os.path.basename(STORE_LOCK.name)


def of(workdir: Union[str, os.PathLike, Workdir]) -> Workdir:
  """`workdir` as a `Workdir` (itself when it is one already)."""
  return workdir if isinstance(workdir, Workdir) else Workdir(workdir)


# What each mode of main.py writes, and how a read-only or full target stops it (README
# "Damaged, read-only or full"). `tests/cli/test_mode_targets.py` runs every mode of
# `main.MODES` against a read-only and a full target from this table: a mode without a row
# fails it.
WORKDIR_TARGET, OUTPUT_TARGET, NO_TARGET = 'workdir', '--output', ''
SPM_TEMP = '$TMPDIR/t2t_jax-spm-<pid>-* (vocabulary training; a dead run\'s: removed)'
ATOMIC_TEMP = '.<name>.tmp* beside each file written (temp file + rename)'
XLA_CACHE = ('~/.cache/t2t_jax/xla (--compilation_cache; JAX\'s own, a failed write only '
             'warns)')
ORBAX_TEMP = '<checkpoint>.orbax-checkpoint-tmp* while orbax saves (renamed when complete)'


@dataclasses.dataclass(frozen=True)
class ModeWrites:
  """One mode of main.py and every path it writes.

  Attributes:
    mode: its `--mode` name.
    target: WORKDIR_TARGET, OUTPUT_TARGET or NO_TARGET: where the user points it to write.
    writes: every path it writes: workdir entries (`Entry.name`), its output, temporary
      files and folders, caches.
    check: where a read-only or full target stops it; the work comes after.
  """
  mode: str
  target: str
  writes: Tuple[str, ...]
  check: str


_WORKDIR_CHECK = ('main.py: `workdir.check_writable` (a probe file) before any work; a disk '
                  'that fills later: one line at the write (`workdir.writing`)')
_OUTPUT_CHECK = ('`outputs.check_writable` (its folder is a folder; a probe file) before '
                 'any work; a disk that fills later: one line at the write, ')

MODE_WRITES: Tuple[ModeWrites, ...] = (
    ModeWrites('train', WORKDIR_TARGET, tuple(entry.name for entry in ENTRIES) + (
        SPM_TEMP, ATOMIC_TEMP, ORBAX_TEMP, XLA_CACHE),
               _WORKDIR_CHECK + '; train also at its start'),
    ModeWrites('eval', WORKDIR_TARGET, (EVAL_RESULT.name, EVAL_TEXTS.name, ATOMIC_TEMP,
                                        XLA_CACHE),
               _WORKDIR_CHECK),
    ModeWrites('average', WORKDIR_TARGET, (AVERAGED.name, ORBAX_TEMP, XLA_CACHE),
               _WORKDIR_CHECK),
    ModeWrites('plot', WORKDIR_TARGET, (PLOTS.name, ATOMIC_TEMP), _WORKDIR_CHECK),
    ModeWrites('decode', OUTPUT_TARGET, (
        '--output (a new file; stdout without it)', ATOMIC_TEMP, XLA_CACHE),
        _OUTPUT_CHECK + 'the file claimed empty before the work is removed'),
    ModeWrites('score', OUTPUT_TARGET, (
        '--output (a new file; stdout without it)', ATOMIC_TEMP, XLA_CACHE),
        _OUTPUT_CHECK + 'the file claimed empty before the work is removed'),
    ModeWrites('attention', OUTPUT_TARGET, (
        '--output (a new or empty folder)', '--output/sentence_<n>/*', ATOMIC_TEMP,
        XLA_CACHE), _OUTPUT_CHECK + 'what the run wrote into --output is removed'),
    ModeWrites('export', OUTPUT_TARGET, (
        '--output (a new folder)', '<folder of --output>/.<name>.<pid>-*.tmp (renamed to '
        '--output when complete; a dead run\'s: removed)',
        '$TMPDIR/tmp* (ctranslate2: a copy of the vocabulary)', XLA_CACHE),
        _OUTPUT_CHECK + 'the temporary folder is removed'),
    ModeWrites('import', WORKDIR_TARGET, (
        'vocab/spm.model', 'vocab/spm.meta.json', 'vocab/source_spm.model',
        'vocab/source_spm.meta.json', 'averaged/step_0_last_1', ATOMIC_TEMP, ORBAX_TEMP),
               _WORKDIR_CHECK + '; a workdir that holds a vocabulary or checkpoints is refused'),
    ModeWrites('info', NO_TARGET, (), 'writes nothing: it prints the sizes'),
    ModeWrites('serve', NO_TARGET, (XLA_CACHE,), 'writes nothing: it answers HTTP requests'),
    ModeWrites('plan', OUTPUT_TARGET, (
        '--output (a new JSON file; optional)', ATOMIC_TEMP,
        '<compilation cache>/plan (plan/cache.py; a failed write is skipped)'),
        _OUTPUT_CHECK + 'nothing is left but the printed plan'),
)


def mode_writes(mode: str) -> ModeWrites:
  """The row of `mode` (KeyError when it has none)."""
  return {row.mode: row for row in MODE_WRITES}[mode]
