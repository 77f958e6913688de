"""The fifth "hostile new user" tour (issue 51): tries on what this round adds. The config
resolved once (equivalent spellings, factory conflicts, keys that do nothing, the new schedule
and clipping keys, `info --workdir`), runs moved with their files (workdir, corpus, factory
file), another program's checkpoints, the step's public building blocks, the exports' tokenizer
check and signals, and the measuring scripts.

  python tours/config_and_moved_runs_tries.py [--scratch=DIR] [--out=FILE.jsonl] [--only=NAME,...]

Each try states what a careful product does and gets one verdict:
  OK         it did that: ran (and the output is right), or refused in one line naming
             what the try damaged;
  WRONG      accepted and not what was asked, or refused though valid;
  TRACEBACK  a Python traceback reached the user;
  UNCLEAR    refused, but not in one line, or its line does not name the culprit;
  HANG       no answer within its time;
  LOST       a file that existed before the try is gone or changed.
"""

import argparse
import collections
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import harness  # noqa: E402
from tours.common import MAIN, SMALL, corpus, error_line  # noqa: E402

VERDICTS = ('OK', 'WRONG', 'TRACEBACK', 'UNCLEAR', 'HANG', 'LOST')
CONFIG = f'--config={os.path.join(ROOT, "configs", "quickstart.py")}'
WINDOW = 'import t2t_jax\n\ndef win(cfg):\n  return t2t_jax.Transformer(cfg.replace(decoder_window=8))\n'
GROW = 'import t2t_jax\n\ndef f(cfg):\n  return t2t_jax.Transformer(cfg.replace(d_ff=cfg.d_ff * 2))\n'


def _run(command, cwd, timeout=600, stdin=None):
  clock = harness.timed().start()
  try:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            input=stdin)
  except subprocess.TimeoutExpired:
    return None, clock.seconds
  return result, clock.seconds


def main_py(cwd, *args, stdin=None, timeout=600):
  return _run([sys.executable, MAIN, CONFIG, *SMALL, *args], cwd, timeout, stdin)


def python(cwd, code, timeout=300):
  return _run([sys.executable, '-c', code], cwd, timeout)


def _digests(paths):
  out = {}
  for path in paths:
    for folder, _, names in os.walk(path):
      for name in names:
        if name in ('.t2t_jax.lock', '.t2t_jax.lease'):  # the run's own lock: its note changes
          continue
        full = os.path.join(folder, name)
        with open(full, 'rb') as f:
          out[full] = hashlib.sha256(f.read()).hexdigest()
  return out


def verdict(result, expect, says=(), check=None):
  """`expect` 'ok' (with `check(result)` true) or 'error' (one line containing each of
  `says`)."""
  if result is None:
    return 'HANG'
  if 'Traceback (most recent call last)' in result.stderr:
    return 'TRACEBACK'
  if expect == 'ok':
    return 'OK' if result.returncode == 0 and (check is None or check(result)) else 'WRONG'
  if result.returncode == 0:
    return 'WRONG'
  line = error_line(result) or (result.stderr.strip().splitlines() or [''])[-1]
  one_line = result.stderr.rstrip().endswith(line)
  return 'OK' if one_line and all(s in line for s in says) else 'UNCLEAR'


class Tour:

  def __init__(self, scratch, out, only):
    self.scratch, self.out, self.only = scratch, out, only
    self.counts = collections.Counter()

  def record(self, name, outcome, result=None, seconds=0.0, note=''):
    self.counts[outcome] += 1
    tail = ''
    if result is not None:
      tail = (error_line(result) or (result.stderr.strip().splitlines() or [''])[-1])[:300]
    line = {'tour': 'fifth', 'try': name, 'verdict': outcome, 'seconds': round(seconds, 1),
            'rc': getattr(result, 'returncode', None), 'last_line': tail, 'note': note}
    print(json.dumps(line), flush=True)
    with open(self.out, 'a', encoding='utf-8') as f:
      f.write(json.dumps(line) + '\n')

  def main(self, name, cwd, args, expect, says=(), check=None, keep=(), stdin=None):
    """One main.py try; `keep`: paths whose files must not be lost or changed."""
    if self.only and not any(o in name for o in self.only):
      return None
    before = _digests(keep)
    result, seconds = main_py(cwd, *args, stdin=stdin)
    outcome = verdict(result, expect, says, check)
    after = _digests(keep)
    changed = sorted(p for p in before if after.get(p) != before[p])  # new files are not lost
    if changed:
      outcome = 'LOST'
    self.record(name, outcome, result, seconds, note=', '.join(changed)[:300])
    return result

  def library(self, name, code, says):
    """A library call that must raise ValueError/TypeError/ConfigError naming `says`: the
    snippet prints 'RAISED <type>: <message>' or 'RETURNED <value>'."""
    if self.only and not any(o in name for o in self.only):
      return
    result, seconds = python(self.scratch, code)
    if result is None:
      outcome = 'HANG'
    else:
      out = result.stdout.strip().splitlines()[-1:] or ['']
      if out[0].startswith('RETURNED') or result.returncode == 0 and not out[0].startswith(
          'RAISED'):
        outcome = 'WRONG'
      elif out[0].startswith('RAISED'):
        kind = out[0].split(':', 1)[0]
        expected = any(k in kind for k in ('ValueError', 'TypeError', 'ConfigError',
                                          'ExportError', 'Error'))
        generic = any(k in kind for k in ('KeyError', 'IndexError', 'AttributeError',
                                          'XlaRuntimeError'))
        outcome = ('TRACEBACK' if generic else 'OK' if expected and all(
            s in out[0] for s in says) else 'UNCLEAR')
      else:
        outcome = 'TRACEBACK'
    self.record(name, outcome, result, seconds, note=(result.stdout.strip()[-300:]
                                                      if result else ''))


def library_call(body):
  return ('import jax, jax.numpy as jnp, numpy as np, t2t_jax\n'
          'try:\n' + ''.join(f'  {line}\n' for line in body.splitlines()) +
          '  print("RETURNED", repr(out)[:200])\n'
          'except Exception as e:\n'
          '  print("RAISED", type(e).__name__ + ":", str(e).replace("\\n", " ")[:400])\n')


SETUP = ('cfg = t2t_jax.TransformerConfig(vocab_size=32, d_model=16, d_ff=32, num_heads=2, '
         'num_layers=1, max_len=32)\n'
         'params = t2t_jax.init_params(cfg, jax.random.PRNGKey(0))\n'
         'ids = jnp.array([[5, 6, 7, 1]])\n')
LIBRARY = (
    # (name, call, words the message must hold)
    ('L1 apply_gradients with gradients of another shape', SETUP +
     'import optax\ntx = optax.adam(1e-3)\n'
     'state = t2t_jax.TrainState(step=jnp.zeros((), jnp.int32), params=params, '
     'opt_state=tx.init(params))\n'
     'bad = jax.tree_util.tree_map(lambda p: jnp.ones(p.shape[:-1] + (p.shape[-1] + 1,)), '
     'params)\n'
     'out = t2t_jax.apply_gradients(state, tx, bad, {"loss": jnp.array(1.0), '
     '"weight": jnp.array(4.0)})', ('grad_sums', 'shape')),
    ('L2 metric_sums with 1 source row and 2 target rows', SETUP +
     'batch = {"inputs": ids, "targets": jnp.concatenate([ids, ids]), '
     '"weights": jnp.ones((2, 4))}\n'
     'out = t2t_jax.metric_sums(t2t_jax.Transformer(cfg.replace(deterministic=True)), params, '
     'batch, None, 0.1)', ('rows',)),
    ('L3 objective with a vector aux loss', 'out = t2t_jax.objective({"loss": jnp.array(1.0), '
     '"aux_moe": jnp.ones(3)})', ('aux_moe',)),
    ('L4 beam_decode alpha=nan', SETUP + 'out = t2t_jax.beam_decode(t2t_jax.Transformer('
     'cfg.replace(deterministic=True)), 2, float("nan"), params, ids, jnp.array([8]), 8)',
     ('alpha',)),
    ('L5 beam_decode beam_size=2.5', SETUP + 'out = t2t_jax.beam_decode(t2t_jax.Transformer('
     'cfg.replace(deterministic=True)), 2.5, 0.6, params, ids, jnp.array([8]), 8)',
     ('beam_size',)),
    ('L6 beam_decode int max_lengths', SETUP + 'out = t2t_jax.beam_decode(t2t_jax.Transformer('
     'cfg.replace(deterministic=True)), 2, 0.6, params, ids, 8, 8)', ('max_lengths',)),
    ('L7 make_grad_fn on a mesh without a data axis', SETUP +
     'from jax.sharding import Mesh\nmesh = Mesh(np.array(jax.devices()[:1]), ("model",))\n'
     'out = t2t_jax.make_grad_fn(t2t_jax.Transformer(cfg), mesh, 0.1)', ('data',)),
    ('L8 make_grad_fn label_smoothing="x"', SETUP + 'mesh = t2t_jax.make_mesh()\n'
     'out = t2t_jax.make_grad_fn(t2t_jax.Transformer(cfg), mesh, "x")', ('label_smoothing',)),
    ('L9 resolve a non-idempotent factory',
     f'import ml_collections, os\nopen("grow.py", "w").write({GROW!r})\n'
     'from t2t_jax.configs import default\nc = default.get_config()\nc.model = "grow.py:f"\n'
     'out = t2t_jax.resolve(c)', ('again',)),
)


def library_tries(tour, s):
  del s
  for name, body, says in LIBRARY:
    tour.library(name, library_call(body), says)


def _train(tour, cwd, workdir, corpus_dir, steps, *extra):
  return main_py(cwd, f'--workdir={workdir}', f'--config.local_corpus_dir={corpus_dir}',
                 f'--config.num_train_steps={steps}', '--config.dataset=local', *extra)[0]


def resolution_tries(tour, s, trained):
  local = ['--config.dataset=local', f'--config.local_corpus_dir={s}/corpus']
  for name, args, expect, says in (
      ('R1 resume num_layers=1 as num_encoder_layers=1 num_decoder_layers=1',
       ['--config.num_encoder_layers=1', '--config.num_decoder_layers=1',
        '--config.num_train_steps=30'], 'ok', ()),
      ('R2 --config.weight_decay=0.1 with adam', ['--config.weight_decay=0.1'], 'error',
       ('weight_decay', 'no effect')),
      ('R3 --config.learning_rate=1e-3 with the rsqrt schedule', ['--config.learning_rate=1e-3'],
       'error', ('learning_rate', 'no effect')),
      ('R4 --config.lr_schedule=exp', ['--config.lr_schedule=exp'], 'error', ('lr_schedule',)),
      ('R5 min_learning_rate above the peak', ['--config.lr_schedule=linear',
                                               '--config.learning_rate=1e-4',
                                               '--config.min_learning_rate=1e-3'], 'error',
       ('min_learning_rate',)),
      ('R6 --config.clip_grad_norm=-1', ['--config.clip_grad_norm=-1.0'], 'error',
       ('clip_grad_norm',)),
  ):
    tour.main(name, s, [f'--workdir={trained}', *local, *args], expect, says,
              keep=[os.path.join(trained, 'checkpoints')] if expect == 'error' else ())
  tour.main('R7 sliding window factory with --config.decoder_window=8', s,
            [f'--workdir={s}/r7', *local, '--config.model=examples_variants.py:sliding_window',
             '--config.decoder_window=8', '--config.num_train_steps=1'], 'error',
            ('decoder_window=16', '--config.decoder_window=8'))
  tour.main('R8 info --workdir shows every key, decoder_window included', s,
            ['--mode=info', f'--workdir={trained}'], 'ok',
            check=lambda r: '  decoder_window' in r.stdout and '  num_decoder_layers' in r.stdout)
  tour.main('R9 eval --config.num_layers=2 on a 1-layer run', s,
            ['--mode=eval', f'--workdir={trained}', *local, '--config.num_layers=2'], 'error',
            ("'num_layers'", 'would change the model'))
  tour.main('R10 train cosine schedule with clipping', s,
            [f'--workdir={s}/r10', *local, '--config.lr_schedule=cosine',
             '--config.clip_grad_norm=1.0', '--config.num_train_steps=10'], 'ok')
  shutil.copy(os.path.join(ROOT, 'examples', 'variants.py'), os.path.join(s, 'other', 'x.py'))
  tour.main('R11 info --workdir from another folder, a module optimizer it cannot import',
            os.path.join(s, 'other'), ['--mode=info', f'--workdir={s}/r11'], 'ok',
            check=lambda r: 'cannot be loaded here' in r.stdout)


def relocation_tries(tour, s):
  os.makedirs(os.path.join(s, 'F'))
  with open(os.path.join(s, 'F', 'myvar.py'), 'w', encoding='utf-8') as f:
    f.write(WINDOW)
  shutil.copytree(os.path.join(s, 'corpus'), os.path.join(s, 'A'))
  _train(tour, s, 'W1', 'A', 10, '--config.model=F/myvar.py:win')
  for old, new in (('A', 'B'), ('F', 'G'), ('W1', 'W2')):
    os.rename(os.path.join(s, old), os.path.join(s, new))
  model = '--config.model=G/myvar.py:win'
  tour.main('M1 eval, the recorded factory file gone', s,
            ['--mode=eval', '--workdir=W2', '--config.local_corpus_dir=B'], 'error',
            ('--config.model=NEW/PATH/myvar.py:win',))
  tour.main('M2 resume, corpus, factory and workdir moved', s,
            ['--workdir=W2', '--config.dataset=local', '--config.local_corpus_dir=B', model,
             '--config.num_train_steps=20'], 'ok')
  for mode, extra in (('eval', ['--config.local_corpus_dir=B']),
                      ('average', ['--config.average_last=2']),
                      ('info', []), ('plot', [])):
    tour.main(f'M3 {mode} in the moved workdir', s, [f'--mode={mode}', '--workdir=W2', model,
                                                     *extra], 'ok')
  tour.main('M4 decode in the moved workdir', s, ['--mode=decode', '--workdir=W2', model], 'ok',
            stdin='In the beginning\n', check=lambda r: len(r.stdout.splitlines()) == 1)
  with open(os.path.join(s, 'in.txt'), 'w', encoding='utf-8') as f:
    f.write('In the beginning\n')
  tour.main('M5 attention in the moved workdir', s, ['--mode=attention', '--workdir=W2', model,
                                                     '--input=in.txt', '--output=maps'], 'ok')
  tour.main('M6 export in the moved workdir', s, ['--mode=export', '--format=stablehlo',
                                                  '--workdir=W2', model, '--output=hlo'], 'ok')
  with open(os.path.join(s, 'B', 'train.en'), 'a', encoding='utf-8') as f:
    f.write('an added line\n')
  tour.main('M7 resume after a training file changed', s,
            ['--workdir=W2', '--config.dataset=local', '--config.local_corpus_dir=B', model,
             '--config.num_train_steps=30'], 'error', ('train.en',),
            keep=[os.path.join(s, 'W2', 'checkpoints')])
  with open(os.path.join(s, 'G', 'myvar.py'), 'a', encoding='utf-8') as f:
    f.write('# edited\n')
  shutil.copytree(os.path.join(s, 'G'), os.path.join(s, 'H'))
  tour.main('M8 eval with an edited copy of the factory file', s,
            ['--mode=eval', '--workdir=W2', '--config.model=H/myvar.py:win'], 'error',
            ("'model'",))


def foreign_tries(tour, s):
  code = ('import orbax.checkpoint as ocp, numpy as np\n'
          f'm = ocp.CheckpointManager("{s}/foreign/checkpoints", '
          'options=ocp.CheckpointManagerOptions(create=True))\n'
          'm.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave({"w": np.ones(3)})))\n'
          'm.wait_until_finished()\n')
  python(s, code)
  keep = [os.path.join(s, 'foreign')]
  for mode in ('info', 'eval', 'decode', 'train'):
    tour.main(f'F1 {mode} on another program\'s orbax checkpoints', s,
              [f'--mode={mode}', '--workdir=foreign', '--config.dataset=local',
               f'--config.local_corpus_dir={s}/corpus', '--config.num_train_steps=1'], 'error',
              ('not', 't2t_jax'), keep=keep,
              stdin='x\n')


def export_tries(tour, s, trained):
  code = ('import sentencepiece as spm\n'
          f'spm.SentencePieceTrainer.train(input="{s}/corpus/train.en", model_prefix="small", '
          'vocab_size=200, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)\n')
  python(s, code)
  tour.library('X1 export_stablehlo_model with a 200-piece vocabulary for a 400-token model',
               library_call(
                   'import ml_collections\n'
                   f'from t2t_jax.inference import checkpoint_choice\n'
                   f'inf = checkpoint_choice.load_inference_params("{trained}")\n'
                   'from t2t_jax.runtime import resolution\n'
                   'c = resolution.from_saved(inf.config_json)\n'
                   'cfg = t2t_jax.TransformerConfig.from_config(c)\n'
                   f'out = t2t_jax.export_stablehlo_model(t2t_jax.Transformer(cfg), inf.params, '
                   f'"{s}/small.model", "{s}/x1_out")'), ('200',))
  tour.main('X2 export --config.beam_size=0', s, ['--mode=export', '--format=stablehlo',
                                                  f'--workdir={trained}', '--config.beam_size=0',
                                                  f'--output={s}/x2'], 'error', ('beam_size',))


def signal_tries(tour, s, trained, tries=8):
  for i in range(tries):
    name = f'S{i + 1} SIGTERM during --mode=export --format=stablehlo'
    if tour.only and not any(o in name for o in tour.only):
      continue
    output = os.path.join(s, f'sig{i}')
    shutil.rmtree(output, ignore_errors=True)  # a --scratch of an earlier tour: a fresh output
    process = subprocess.Popen([sys.executable, MAIN, CONFIG, *SMALL, '--mode=export',
                                '--format=stablehlo', f'--workdir={trained}',
                                f'--output={output}'], cwd=s, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(0.5 + 0.7 * i)
    running = process.poll() is None  # else it finished first: nothing to stop
    process.send_signal(signal.SIGTERM)
    try:
      _, stderr = process.communicate(timeout=120)
      result = subprocess.CompletedProcess(process.args, process.returncode, '', stderr)
      if not running:
        outcome = 'OK' if process.returncode == 0 and os.path.isdir(output) else 'WRONG'
      elif process.returncode == 0:
        outcome = 'WRONG'  # a stop request that ends in success: the signal was lost
      else:
        outcome = 'WRONG' if os.path.isdir(output) else (
            'TRACEBACK' if 'Traceback' in stderr else 'OK')
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)
      result, outcome = None, 'HANG'
    tour.record(name, outcome, result, note=f'signal after {0.5 + 0.7 * i:.1f} s' + (
        '' if running else ' (the export had finished)'))


def script_tries(tour, s):
  for name, args, says in (
      ('B1 same_machine.py HEAD HEAD --steps 0',
       [os.path.join(ROOT, 'benchmarks', 'studies', 'same_machine.py'), 'HEAD', 'HEAD',
        '--steps', '0'], ('--steps',)),
      ('B2 decode_ab --rows 0', ['-m', 'benchmarks.peers.decode_ab', '--rows', '0'],
       ('--rows',)),
      ('B3 check.py --smoke --budget 4', [os.path.join(ROOT, 'benchmarks', 'device', 'check.py'),
                                         '--smoke', '--budget', '4'], ('--budget',)),
      ('B4 check.py --smoke --scratch <a file>',
       [os.path.join(ROOT, 'benchmarks', 'device', 'check.py'), '--smoke',
        f'--scratch={s}/in.txt'], ('--scratch',)),
      ('B5 check.py --part 9 --stages numerics',
       [os.path.join(ROOT, 'benchmarks', 'device', 'check.py'), '--part', '9', '--stages',
        'numerics'], ('--part',)),
  ):
    if tour.only and not any(o in name for o in tour.only):
      continue
    result, seconds = _run([sys.executable, *args], ROOT, timeout=600)
    tour.record(name, verdict(result, 'error', says), result, seconds)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--scratch', default=None)
  parser.add_argument('--out', default=os.path.join(ROOT, 'benchmarks', 'results',
                                                    'config_and_moved_runs_tour.jsonl'))
  parser.add_argument('--only', default='')
  args = parser.parse_args()
  s = args.scratch or tempfile.mkdtemp(prefix='t2t_fifth_tour_')
  os.makedirs(os.path.join(s, 'other'), exist_ok=True)
  tour = Tour(s, args.out, [o for o in args.only.split(',') if o])
  if not os.path.isdir(os.path.join(s, 'corpus')):  # a --scratch of an earlier tour: reused
    corpus(os.path.join(s, 'corpus'), n_train=1200, n_dev=32)
  shutil.copy(os.path.join(ROOT, 'examples', 'variants.py'),
              os.path.join(s, 'examples_variants.py'))
  trained = os.path.join(s, 'trained')
  if not os.path.isdir(trained):
    _train(tour, s, trained, os.path.join(s, 'corpus'), 20, '--config.num_layers=1')
  # A run with a module optimizer factory, for R11 (importable from `s`, not from `s/other`).
  with open(os.path.join(s, 'my_opt.py'), 'w', encoding='utf-8') as f:
    f.write('import optax\n\ndef make(config, schedule):\n  return optax.adam(schedule)\n')
  if not os.path.isdir(os.path.join(s, 'r11')):
    _train(tour, s, os.path.join(s, 'r11'), os.path.join(s, 'corpus'), 10,
           '--config.optimizer=my_opt:make')
  groups = {'R': resolution_tries, 'M': relocation_tries, 'F': foreign_tries,
            'X': export_tries, 'S': signal_tries, 'B': script_tries, 'L': library_tries}
  for letter, group in groups.items():
    if tour.only and not any(o.startswith(letter) for o in tour.only):
      continue  # a group's setup runs only for its tries (the names start with its letter)
    if group in (resolution_tries, export_tries, signal_tries):
      group(tour, s, trained)
    else:
      group(tour, s)
  table = ' | '.join(f'{v} {tour.counts[v]}' for v in VERDICTS)
  print(f'fifth tour: {sum(tour.counts.values())} tries: {table}')
  if not args.scratch:
    shutil.rmtree(s, ignore_errors=True)


if __name__ == '__main__':
  main()
