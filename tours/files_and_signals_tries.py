"""The tries of issue 37 for `files_tour.py`: each of its 14 faults as the issue describes it,
and new tries of the same kinds (other modes against read-only and full targets, damaged
corpus files, damaged vocabulary records and checkpoint items, signals during decode, export,
attention and eval, concurrent runs). Each try states the outcome the project's rules call for
(a user's mistake or damage: one line, or one warning and a rebuild; nothing already written
is lost) and is classified as `common.classify` does, plus:
  interrupted  a signal ended the run: non-zero exit, no traceback, nothing partial left;
  misleading   a one-line error that blames the wrong thing (the issue's items 10, 11, 13);
  hang         no exit within the try's time limit.
"""

import glob
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

from benchmarks.shared import harness
from tours.common import (ROOT, SMALL, checked, classify, corpus, fill, finish, latest_step,
                          main_py, mounted, start, train_args, wait_for)


def edit_lines(path, every=3):
  """Changes every `every`-th line of a text file, keeping the line count."""
  with open(path, encoding='utf-8') as f:
    lines = f.read().split('\n')
  lines = [l.upper() if i % every == 0 else l for i, l in enumerate(lines)]
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines))


def increasing(metrics):
  steps = [json.loads(line)['step'] for line in open(metrics, encoding='utf-8')]
  return steps == sorted(set(steps))


def leftovers(folder):
  """What is in `folder` besides the filler (a mode that failed must leave nothing)."""
  return [os.path.join(folder, n) for n in os.listdir(folder) if n != 'filler']


NO_GUARD_SCRIPT = '''
import sys
from t2t_jax.configs import quickstart
from t2t_jax.data import token_store
from t2t_jax.training import train

token_store.PARALLEL_MIN_PAIRS = 1  # encoded in spawned processes, as 200,000 pairs would be
token_store.CHUNK_PAIRS = 500
config = quickstart.get_config()
config.vocab_size, config.vocab_sample_sentences = 400, 1200
config.local_corpus_dir = sys.argv[2]
data = train.Data(config, sys.argv[1], with_eval=False)
print('built', data.tokenizer.vocab_size)
'''


def issue37(t, source):
  """The 14 faults of issue 37, as the issue describes them."""
  scratch = t.scratch
  small = corpus(os.path.join(scratch, 'corpus'))
  other = os.path.join(scratch, 'other')  # another run: another corpus, another vocabulary
  result, _ = main_py(*train_args(other, small))
  if result.returncode != 0:
    sys.exit(f'training the other run failed:\n{result.stderr[-3000:]}')
  t.other = other
  # 1, 2 (+ decode and ctranslate2 beside them): --output in a read-only folder.
  empty = os.path.join(scratch, 'ro-target')
  os.makedirs(empty)
  w = t.copy()
  with mounted('ro', empty) as ro:
    if ro is None:
      t.record('read-only --output', 'skipped (cannot mount)')
    else:
      for name, args, item in (
          ('1 export stablehlo', ['--mode=export', '--format=stablehlo'], 'export'),
          ('2 attention', ['--mode=attention', f'--input={source}'], 'att'),
          ('new: decode', ['--mode=decode', f'--input={source}'], 'out.txt'),
          ('new: export ctranslate2', ['--mode=export', '--format=ctranslate2'], 'ct2')):
        t.run(f'{name} into a read-only folder', [*args, f'--workdir={w}',
              f'--output={ro}/{item}'], 'one-line error', check=lambda r: checked(
                  r, says=['ead-only', 'not writable']))
  # 3, 4 (+ nearly full: the disk fills during the work): nothing partial left; attention
  # then reruns to the same --output once there is room.
  for keep, how in ((0, 'full'), (48 << 10, 'nearly full')):
    for name, args, item in (('3 export', ['--mode=export', '--format=stablehlo'], 'export'),
                             ('4 attention', ['--mode=attention', f'--input={source}'], 'att')):
      with mounted('full', size_mb=4) as full:
        if full is None:
          t.record(f'{name} on a {how} disk', 'skipped (cannot mount)')
          continue
        fill(full, keep=keep)
        run = [*args, f'--workdir={w}', f'--output={full}/{item}']
        t.run(f'{name} on a {how} disk (nothing left)', run, 'one-line error',
              check=lambda r, full=full: 'wrong' if leftovers(full) else classify(r))
        if item == 'att' and keep:
          os.remove(os.path.join(full, 'filler'))
          t.run(f'{name}: rerun to the same --output once there is room', run, 'ok',
                expect_output=lambda r, full=full: os.path.isdir(f'{full}/att') and bool(
                    os.listdir(f'{full}/att')))
  # 5, 6, 13: damaged, mislabelled and folder corpus files.
  def bad_corpus(name, damage, says):
    folder = corpus(os.path.join(scratch, f'corpus{t.n}-{len(os.listdir(scratch))}'))
    damage(folder)
    t.run(name, train_args(os.path.join(scratch, f'fresh{t.n}-{len(os.listdir(scratch))}'),
                           folder), 'one-line error', check=lambda r: checked(r, says=says))

  def truncated_gz(folder):
    data = gzip.compress(open(os.path.join(folder, 'train.en'), 'rb').read())
    os.remove(os.path.join(folder, 'train.en'))
    open(os.path.join(folder, 'train.en.gz'), 'wb').write(data[:len(data) // 2])

  bad_corpus('5 truncated train.en.gz, train', truncated_gz, ['truncated', 'ends early'])
  bad_corpus('6 plain text named train.en.gz, train', lambda f: os.rename(
      os.path.join(f, 'train.en'), os.path.join(f, 'train.en.gz')), ['not gzip'])
  bad_corpus('13 train.es is a folder, train', lambda f: (os.remove(os.path.join(
      f, 'train.es')), os.makedirs(os.path.join(f, 'train.es'))), ['is a folder'])
  # 7: a run killed once its vocabulary is written, before any checkpoint; train.es edited
  # (same line count); the same command: the vocabulary is trained again with one warning.
  # Then, with checkpoints, another edit: refused in one line.
  c7 = corpus(os.path.join(scratch, 'corpus7'))
  w7 = os.path.join(scratch, 'killed')
  process = start(*train_args(w7, c7, 200))
  seen = wait_for(lambda: os.path.exists(os.path.join(w7, 'vocab', 'spm.model')))
  os.killpg(process.pid, signal.SIGKILL)
  finish(process)
  if not seen or os.path.isdir(os.path.join(w7, 'checkpoints')) and os.listdir(
      os.path.join(w7, 'checkpoints')):
    t.record('7 vocabulary of a killed run', 'skipped (no vocabulary before a checkpoint)')
  else:
    old = open(os.path.join(w7, 'vocab', 'spm.model'), 'rb').read()
    edit_lines(os.path.join(c7, 'train.es'))
    t.run('7 train.es edited after a kill before any checkpoint, same command', train_args(
        w7, c7, 20), 'warned', damaged='spm.model', expect_output=lambda r: 'trained again' in
        r.stderr and open(os.path.join(w7, 'vocab', 'spm.model'), 'rb').read() != old)
    edit_lines(os.path.join(c7, 'train.es'), every=5)
    t.run('7 train.es edited again, checkpoints depend on the vocabulary', train_args(
        w7, c7, 30), 'one-line error')
  # 8: average (and eval) beside a live training run whose keep_checkpoints deletes the
  # checkpoints they may be reading.
  w = t.copy()
  first = latest_step(w)
  process = start('--mode=train', f'--workdir={w}', *SMALL, '--config.checkpoint_every_steps=2',
                  '--config.keep_checkpoints=2', f'--config.num_train_steps={first + 200}')
  if not wait_for(lambda: latest_step(w) > first, timeout=300):
    t.record('8 average beside a live training run', 'skipped (training made no checkpoint)')
  else:
    for i in range(3):
      t.run(f'8 average beside a live training run ({i + 1})', ['--mode=average',
            f'--workdir={w}', '--config.average_last=2'], 'ok',
            expect_output=lambda r: os.path.isdir(os.path.join(w, 'averaged')))
    t.run('new: eval beside a live training run', ['--mode=eval', f'--workdir={w}',
          '--config.eval_bleu_sentences=8'], 'ok')
  result, hung = finish(process)
  t.record('8 the live training run itself', 'hang' if hung else classify(result), result,
           expected='ok')
  # 9: checkpoints deleted, metrics.jsonl kept: the old metrics set aside with one warning.
  w = t.copy()
  shutil.rmtree(os.path.join(w, 'checkpoints'))
  t.run('9 checkpoints deleted, metrics.jsonl kept, train', ['--mode=train', f'--workdir={w}',
        *SMALL, '--config.num_train_steps=20'], 'warned', damaged='metrics.jsonl',
        expect_output=lambda r: glob.glob(os.path.join(w, 'metrics.old-*.jsonl')) and increasing(
            os.path.join(w, 'metrics.jsonl')))
  # 10: a checkpoint of another run: blame the checkpoint, not the vocabulary.
  w = t.copy()
  shutil.copytree(os.path.join(other, 'checkpoints', '20'), os.path.join(w, 'checkpoints',
                                                                          '500'))
  for mode, extra in (('decode', [f'--input={source}']),
                      ('eval', ['--config.eval_bleu_sentences=8'])):
    t.run(f'10 another run\'s checkpoint as --checkpoint=500, {mode}', [
        f'--mode={mode}', f'--workdir={w}', '--checkpoint=500', *extra], 'one-line error',
        check=lambda r: checked(r, says=['checkpoint'], not_says='restore the file'))
  # 11: --output=FILE/x.txt with FILE a regular file.
  plain = os.path.join(scratch, 'a-file')
  open(plain, 'w').write('x\n')
  t.run('11 --output=FILE/x.txt, FILE a regular file, decode', [
      '--mode=decode', f'--workdir={w}', f'--input={source}', f'--output={plain}/x.txt'],
      'one-line error', check=lambda r: checked(r, says=['not a folder', 'not a directory',
                                                         'is a file'], not_says='already exists'))
  # 12: num_train_steps=0, refused before any work.
  t.run('12 --config.num_train_steps=0, fresh workdir', train_args(
      os.path.join(scratch, 'zero'), small, 0), 'one-line error', check=lambda r: checked(
          r, says=['num_train_steps']))
  # 14: a script without a main guard that calls the library at its top level.
  script = os.path.join(scratch, 'no_guard.py')
  open(script, 'w').write(textwrap.dedent(NO_GUARD_SCRIPT))
  began = harness.timed().start()
  process = subprocess.Popen([sys.executable, script, os.path.join(scratch, 'guard'), small],
                             cwd=scratch, env=dict(os.environ, PYTHONPATH=ROOT), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
  try:
    out, err = process.communicate(timeout=300)
    told = "put its calls under if __name__ == '__main__':" in err
    outcome = 'one-line error' if process.returncode != 0 and told else 'wrong'
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    out, err = process.communicate()
    outcome = 'hang'
  t.record('14 a script without a main guard (Data at top level, spawned encoding)', outcome,
           subprocess.CompletedProcess([], process.returncode, out, err),
           round(began.seconds, 1), 'one-line error')
