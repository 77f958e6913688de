"""Every path of the workdir layout (`storage/layout.ENTRIES`), damaged three ways (missing,
truncated, garbled) under a trained run, read by the code that reads it: the outcome is the
entry's class (`EXPECTED`), never a traceback, and nothing else in the workdir changes.

The readers run in this process (the functions the modes call), so the whole table costs
seconds; `tests/cli/` covers the same damage through main.py for the vocabulary.
"""

import glob
import hashlib
import json
import logging
import os
import shutil

import jax
import jax.numpy as jnp
import pytest

from t2t_jax import config as config_lib
from t2t_jax.errors import user_errors
from t2t_jax.data import corpora, prepared, token_store, tokenizer, vocabularies
from t2t_jax.inference import averaging, checkpoint_choice, compare, evaluate
from t2t_jax.storage import layout
from t2t_jax.storage import lease as lease_lib
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.runtime import checkpoint, profiling
from t2t_jax.training import best, metrics, plots, summary

# orbax's failed read of damaged files can leave a callback for a closed asyncio loop.
pytestmark = pytest.mark.filterwarnings('ignore::pytest.PytestUnraisableExceptionWarning')

DAMAGES = ('missing', 'truncated', 'garbled')
STOP, WARN, WORKS = 'stops in one line', 'warns and goes on', 'goes on'

# (entry, damage) -> outcome; an entry absent here has the same outcome for every damage.
EXPECTED = {
    layout.VOCAB: STOP, layout.VOCAB_LISTING: WORKS,
    layout.VOCAB_RECORD: {'missing': WORKS, 'truncated': WARN, 'garbled': WARN},
    layout.SOURCE_VOCAB: STOP, layout.SOURCE_VOCAB_LISTING: WORKS,  # separate vocabularies
    layout.SOURCE_VOCAB_RECORD: {'missing': WORKS, 'truncated': WARN, 'garbled': WARN},
    layout.CHECKPOINTS: {'missing': WORKS, 'truncated': WARN, 'garbled': WARN},
    layout.UNREADABLE: WORKS,
    layout.AVERAGED: {'missing': WORKS, 'truncated': WARN, 'garbled': WARN},
    layout.BEST: STOP,  # --checkpoint=best names it: nothing else would do
    layout.EARLY_STOP: {'missing': WORKS, 'truncated': WARN, 'garbled': WARN},
    layout.METRICS: {'missing': STOP, 'truncated': WARN, 'garbled': STOP},
    layout.METRICS_SET_ASIDE: WORKS,
    layout.TENSORBOARD: WORKS, layout.PROFILE: WORKS, layout.PLOTS: WORKS,
    layout.TRACKING: WARN,  # runs.json's ids lost: new runs (MLflow's, here)
    layout.EVAL_RESULT: {'missing': WORKS, 'truncated': WARN, 'garbled': WARN},
    layout.EVAL_TEXTS: STOP,  # the comparison of two evaluations has nothing else to read
    layout.TOKEN_STORE: {'missing': WORKS, 'truncated': WARN, 'garbled': WARN},
    layout.PREPARED: WARN, layout.DOWNLOADS: WORKS,
    layout.STORE_LOCK: WORKS, layout.RUN_LOCK: WORKS,
    layout.RUN_LEASE: {'missing': WORKS, 'truncated': WARN, 'garbled': WARN},
}
# Derived entries their reader makes again at once (averaged checkpoints and eval results are
# passed over and made again by the next average or eval).
REBUILT_BY_READER = (layout.PLOTS, layout.TOKEN_STORE, layout.PREPARED)
RESULT = {'checkpoint': 'averaged steps 5,10', 'examples': [], 'bleu': 1.0}
# Files whose halves hold different numbers of lines (20 and 30): a cut shows.
TEXTS = {'hypotheses.txt': ['a'] * 40, 'references.txt': ['a longer reference'] * 39 + ['x' * 400]}


def _config(workdir):
  with open(os.path.join(workdir, 'checkpoints', '10', 'config', 'metadata')) as f:
    return config_lib.from_json(json.load(f))


@pytest.fixture(scope='module')
def trained(tiny_workdir, tmp_path_factory):
  """The tiny trained run with every other entry made: an older step, an averaged checkpoint,
  an eval result, plots, a checkpoint set aside, a lease."""
  root = str(tmp_path_factory.mktemp('layout') / 'run')
  shutil.copytree(tiny_workdir, root)
  wd = layout.Workdir(root)
  shutil.copytree(os.path.join(wd.checkpoints, '10'), os.path.join(wd.checkpoints, '5'))
  averaging.average_checkpoints(wd, 2)
  config = _config(root)
  config.update(dict(keep_best=1, early_stop_patience=1, eval_every_steps=10))
  keeper = best.BestKeeper(wd, config)
  params = checkpoint_choice.load_inference_params(wd, '10').params
  keeper.observe(10, {'loss': 3.0}, params, checkpoint.config_to_json(config))
  keeper.write_stop(20)
  evaluate.write_result(wd, 'dev', 10, RESULT)
  evaluate.write_result(wd, 'test', 10, RESULT, texts=TEXTS)
  writer = metrics.MetricsWriter(wd)  # more records: a truncated file keeps some whole ones
  for step in range(20, 220, 10):
    writer.write(step, {'loss': 5.0 - step / 100})
  writer.close()
  metrics.MetricsWriter(wd, config=_tracked(config)).close()  # an MLflow run, its id recorded
  plots.write_learning_curves(wd)
  _profile(wd)
  shutil.copy(wd.metrics, wd.metrics_set_aside(1))
  shutil.copytree(os.path.join(wd.checkpoints, '5'), os.path.join(wd.unreadable, '5-1'))
  lease_lib.Lease(wd.lease, settle_s=0.0).acquire().release()
  kept = lease_lib.Lease(wd.lease + '.kept', settle_s=0.0).acquire()  # a record to damage
  os.replace(wd.lease + '.kept', wd.lease)
  # Its heartbeat stopped (the record, moved, stays): else it warns into a later test's log.
  kept.release()
  with prepared.host_lock(wd.data_cache):
    pass
  with workdir_lib.WorkdirLock(root):
    pass
  _source_side(wd)
  return root


def _tracked(config):
  """`config` writing to MLflow too (its file store in the workdir's tracking/)."""
  pytest.importorskip('mlflow')
  return config_lib.from_json(dict(config.to_dict(), writers='jsonl,mlflow'))


def _source_side(wd):
  """The source side's files of a run with separate vocabularies (share_vocab=False): the
  tiny run's vocabulary, recorded as trained on the source text."""
  shutil.copy(wd.vocab, wd.source_vocab)
  shutil.copy(wd.vocab[:-len('.model')] + '.vocab', os.path.join(wd.root,
                                                                layout.SOURCE_VOCAB_LISTING.name))
  with open(wd.vocab_record, encoding='utf-8') as f:
    record = dict(json.load(f), trained_on='source')
  with open(wd.source_side.vocab_record, 'w', encoding='utf-8') as f:
    json.dump(record, f)


def _path(wd, entry):
  """The concrete path of `entry` in `wd` (its `<...>` parts resolved to what exists)."""
  pattern = os.path.join(wd.root, entry.name)
  for part in ('<step>', '<last>', '<n>', '<split>', '<key>', '<builder>', '<config>',
               '<version>'):
    pattern = pattern.replace(part, '*')
  found = sorted(glob.glob(pattern), key=lambda p: (len(p), p))
  assert found, f'{entry.name}: nothing in the trained workdir matches {pattern}'
  if entry is layout.CHECKPOINTS:
    return os.path.join(wd.checkpoints, '10')  # the newest: the one read first
  return found[0] if entry is not layout.PREPARED else next(
      p for p in found if os.path.basename(os.path.dirname(os.path.dirname(p))) != 'damaged')


def _files(path):
  if os.path.isfile(path):
    return [path]
  return sorted(p for p in glob.glob(os.path.join(path, '**'), recursive=True)
                if os.path.isfile(p))


def _damage(path, how):
  if how == 'missing':
    (shutil.rmtree if os.path.isdir(path) else os.remove)(path)
    return
  for name in _files(path):  # every file of a folder: the strongest damage
    with open(name, 'r+b') as f:
      data = f.read()
      if how == 'truncated':
        f.truncate(len(data) // 2)
      else:
        middle = len(data) // 2
        f.seek(middle)
        f.write(b'\xff{junk\x00' * 4 if data else b'\xff{junk')


def _snapshot(root, skip):
  return {p: hashlib.sha256(open(p, 'rb').read()).hexdigest() for p in _files(root)
          if not any(p == s or p.startswith(s + os.sep) for s in skip)}


def _exercise(wd, entry, config):
  """Reads `entry` the way the project does; what that changes is under `_changes`."""
  if entry in (layout.VOCAB, layout.VOCAB_RECORD, layout.VOCAB_LISTING):
    tokenizer.load_or_train(config, wd, lambda: [], trained=True)
  elif entry in (layout.SOURCE_VOCAB, layout.SOURCE_VOCAB_RECORD, layout.SOURCE_VOCAB_LISTING):
    separate = config_lib.from_json(dict(config.to_dict(), share_vocab=False,
                                         share_embeddings=False))
    tokenizer.load_or_train(vocabularies.side_config(separate, 'source'), wd.source_side,
                            lambda: [], trained=True)
  elif entry in (layout.CHECKPOINTS, layout.UNREADABLE):
    shutil.rmtree(wd.averaged)  # training checkpoints are read after the averaged ones
    assert checkpoint_choice.load_inference_params(wd).step in (5, 10)
  elif entry is layout.AVERAGED:
    checkpoint_choice.load_inference_params(wd)
  elif entry is layout.BEST:
    assert checkpoint_choice.load_inference_params(wd, 'best').step == 10
  elif entry is layout.EARLY_STOP:
    best.stopped_before(wd)  # missing: a run that did not stop early
  elif entry in (layout.METRICS, layout.METRICS_SET_ASIDE):  # plots read metrics.jsonl only
    plots.load_curves(wd.metrics)
  elif entry is layout.TENSORBOARD:
    metrics.MetricsWriter(wd).close()
  elif entry is layout.TRACKING:  # a resume continues the recorded runs
    metrics.MetricsWriter(wd, config=_tracked(config), resuming=True).close()
  elif entry is layout.PROFILE:  # nothing reads it: a new trace goes beside the damaged one
    _profile(wd)
  elif entry is layout.PLOTS:
    plots.write_learning_curves(wd)
  elif entry is layout.EVAL_RESULT:
    assert summary._existing_result(wd, 'dev', 10, RESULT['checkpoint']) in (None, RESULT)
  elif entry is layout.EVAL_TEXTS:
    assert compare.read_eval(wd.eval_result('test', 10)) == tuple(TEXTS.values())
  elif entry in (layout.TOKEN_STORE, layout.PREPARED, layout.DOWNLOADS):
    source = corpora.load_split(config, 'train', wd.tfds)
    tok = tokenizer.load(wd.vocab, config.vocab_size)
    store = token_store.load_or_build(source, tok, wd.data_cache, num_workers=1)
    assert len(store) == len(source) == 1200
  elif entry is layout.STORE_LOCK:
    with prepared.host_lock(os.path.dirname(os.path.join(wd.root, entry.name))):
      pass
  elif entry is layout.RUN_LOCK:
    workdir_lib.WorkdirLock(wd).acquire().release()
  elif entry is layout.RUN_LEASE:
    lease_lib.Lease(wd.lease, settle_s=0.0, stale_s=1e-3, heartbeat_s=1e-4).acquire().release()
  else:
    raise AssertionError(f'no reader exercised for {entry.name}: add one')


def _profile(wd):
  """A trace of two steps of a tiny program into `wd.profile`, as a run with profile_steps."""
  profiler = profiling.StepProfiler('1:2', wd.profile)
  for number in (1, 2):
    with profiler.step(number) as done:
      done(jax.jit(lambda x: x * 2)(jnp.ones(4)))


def _changes(wd, entry, path):
  """What reading `entry` may change besides the entry itself."""
  return {layout.CHECKPOINTS: [wd.averaged], layout.UNREADABLE: [wd.averaged],
          layout.PREPARED: [os.path.join(wd.tfds, 'damaged'), wd.data_cache],
          layout.DOWNLOADS: [wd.data_cache],
          layout.TENSORBOARD: [wd.metrics]}.get(entry, []) + [path]


@pytest.mark.parametrize('how', DAMAGES)
@pytest.mark.parametrize('entry', layout.ENTRIES, ids=lambda e: e.name)
def test_damaged_entry_gives_its_class_of_outcome(trained, tmp_path, caplog, entry, how):
  root = str(tmp_path / 'run')
  shutil.copytree(trained, root)
  wd = layout.Workdir(root)
  path = _path(wd, entry)
  expected = EXPECTED[entry] if isinstance(EXPECTED[entry], str) else EXPECTED[entry][how]
  before = _snapshot(root, _changes(wd, entry, path))
  config = _config(root)
  _damage(path, how)
  caplog.set_level(logging.WARNING)
  try:
    _exercise(wd, entry, config)
    outcome = WARN if any(path in r.getMessage() or os.path.dirname(path) in r.getMessage()
                          for r in caplog.records if r.levelno >= logging.WARNING) else WORKS
    if outcome != expected and expected == WARN:
      pytest.fail(f'{entry.name} {how}: no warning naming it; got '
                  f'{[r.getMessage()[:200] for r in caplog.records]}')
  except user_errors() as e:  # what main.py prints as one line `error: ...`
    outcome = STOP
    assert '\n' not in str(e) and (path in str(e) or os.path.dirname(path) in str(e)), str(e)
  assert outcome == expected, f'{entry.name} {how}: {outcome}, expected {expected}'
  assert _snapshot(root, _changes(wd, entry, path)) == before  # nothing else touched
  if outcome != STOP and entry in REBUILT_BY_READER and how != 'missing':
    caplog.clear()
    _exercise(wd, entry, config)  # made again, intact: read without a word the second time
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and path in r.getMessage()], entry.name


@pytest.mark.parametrize('entry', [layout.RUN_LOCK, layout.STORE_LOCK],
                         ids=lambda e: e.name)
def test_a_folder_in_place_of_a_lock_stops_in_one_line(trained, tmp_path, entry):
  root = str(tmp_path / 'run')
  shutil.copytree(trained, root)
  wd = layout.Workdir(root)
  path = os.path.join(root, entry.name)
  os.remove(path)
  os.makedirs(os.path.join(path, 'x'))
  with pytest.raises(user_errors()) as e:
    _exercise(wd, entry, _config(root))
  assert path in str(e.value) and '\n' not in str(e.value)


def test_every_entry_is_exercised_and_named_once():
  names = [e.name for e in layout.ENTRIES]
  assert len(set(names)) == len(names) and set(EXPECTED) == set(layout.ENTRIES)
  assert {e.kind for e in layout.ENTRIES} == {layout.PRECIOUS, layout.DERIVED, layout.WRITTEN,
                                             layout.LOCK}


def test_workdir_paths_are_absolute_and_made_once(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  wd = layout.of('run')
  assert wd.root == str(tmp_path / 'run') and layout.of(wd) is wd and os.fspath(wd) == wd.root
  assert wd.vocab == str(tmp_path / 'run' / 'vocab' / 'spm.model')
  assert wd.source_vocab == wd.source_side.vocab == str(tmp_path / 'run' / 'vocab' /
                                                        'source_spm.model')
  assert wd.source_side.vocab_record == str(tmp_path / 'run' / 'vocab' / 'source_spm.meta.json')
  assert wd.source_side.root == wd.root and wd.source_side != wd
  assert wd.eval_result('dev', 7) == str(tmp_path / 'run' / 'eval_dev_7.json')
  assert wd.eval_result('dev', 7, 2) == str(tmp_path / 'run' / 'eval_dev_7.2.json')
  assert wd.averaged_checkpoint(9, 5) == str(tmp_path / 'run' / 'averaged' / 'step_9_last_5')
  assert layout.of('gs://bucket/run/').root == 'gs://bucket/run'


def test_the_documented_inventory_is_the_layout():
  with open(os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'architecture.md'),
            encoding='utf-8') as f:
    rows = [line for line in f.read().split('## Files a run writes')[1].split('\n## ')[0]
            .split('\n') if line.startswith('| `')]
  documented = [row.split('`')[1] for row in rows]
  assert documented[:len(layout.ENTRIES)] == [e.name for e in layout.ENTRIES]
  for row, entry in zip(rows, layout.ENTRIES):
    assert row == (f'| `{entry.name}` | {entry.kind} | {entry.writer} | '
                   f'{entry.readers or "-"} | {entry.on_damage} |')
