"""A user's tour of four surfaces of main.py, judged only against README.md and docs/.

Run from the repository root:

    python tours/workdir_keys_streams_tries.py --scratch=/tmp/tour_scratch --out=/tmp/tour.jsonl

It trains tiny runs (d_model 32, 1 layer, 400-piece vocabulary, 10 steps) on a small local
corpus cut from the bundled Bible corpus (t2t_jax/data/bible_en_es/*.gz) inside --scratch, then
tries real `python main.py ...` commands, one verdict per try, grouped by surface:

1. workdir  - a run needs nothing outside its workdir once it has a checkpoint: runs trained
              with --config.vocab_model, a --config.model factory file, an optimizer factory
              file and --config.init_from fine-tunes; then those inputs (vocab model, factory
              file, parent run, corpus, the workdir itself) are moved, renamed, deleted or
              edited, and every mode is run: decode, eval, score, info, export, average,
              attention, resume, fine-tune again (docs/modes.md "A run's config, resolved once").
2. keys     - every key is checked against the mode and decode strategy it is given to
              (docs/modes.md "Which key does what, where"): keys where they do nothing,
              strategy-inert keys, model keys at decode, training keys at eval, export with
              decoding options, bad values, resume with changed keys, keep_best without eval.
3. streams  - --input=- / FILE / named pipes for decode and score: non-UTF-8 bytes, BOM, empty
              lines, CRLF, short/long target_prefix_file, SIGINT/SIGTERM during a streaming
              decode into --output and into stdout and rerunning; score with stdin.
4. files    - outputs that exist, read-only places (a read-only bind mount: the tour runs as
              root), SIGTERM/SIGINT during training and during its final evaluation
              (final_eval_split=test), then rerun.

Verdicts, one per try:
  OK        did what a careful product should: ran correctly, or refused in ONE line
            `error: ...` naming the right key/file/flag, no traceback
  WRONG     accepted but not what was asked, refused though valid, or a false message
  TRACEBACK a Python traceback (or a "Fatal Python error" dump with an abort) reached the user
  UNCLEAR   refused, but not in one `error:` line, or the line does not name the culprit
  HANG      no answer within its time limit
  LOST      a file that existed before is gone or silently changed

Each JSON line of --out: surface, name, command (as run), expected, observed (exit status and
the last stderr line, trimmed), verdict (and a note where the check needs one). The verdict is
computed by the check written beside each try; it encodes what the docs promise.

Uses only subprocess, os, shutil, signal and json (argv is read from /proc/self/cmdline,
pauses are waits on child processes); it imports nothing from t2t_jax or tours/.
"""

import json
import os
import shutil
import signal
import subprocess

MAIN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = shutil.which('python') or shutil.which('python3')
TB = 'Traceback (most recent call last)'
FATAL = 'Fatal Python error'


def crashed(text):
  return TB in text or FATAL in text
DEFAULT_TIMEOUT = 300


# --------------------------------------------------------------------------- small helpers

def _argv():
  with open('/proc/self/cmdline', 'rb') as f:
    parts = f.read().split(b'\0')
  parts = [p.decode() for p in parts if p]
  for i, p in enumerate(parts):
    if p.endswith('workdir_keys_streams_tries.py'):
      return parts[i + 1:]
  return parts[1:]


def parse_args():
  scratch, out = None, None
  for a in _argv():
    if a.startswith('--scratch='):
      scratch = a.split('=', 1)[1]
    elif a.startswith('--out='):
      out = a.split('=', 1)[1]
  if not scratch or not out:
    raise SystemExit('usage: python tours/workdir_keys_streams_tries.py --scratch=DIR --out=FILE.jsonl')
  return os.path.abspath(scratch), os.path.abspath(out)


def sleep(seconds):
  subprocess.run(['sleep', str(seconds)], check=False)


def quote(a):
  a = str(a)
  if a and all(c.isalnum() or c in '-_=./:,+@%' for c in a):
    return a
  return "'" + a.replace("'", "'\\''") + "'"


def cmdline(cmd):
  return ' '.join(quote(a) for a in cmd)


def sh(script, check=True):
  """Setup step (not a try)."""
  r = subprocess.run(['bash', '-c', script], cwd=MAIN, capture_output=True, text=True)
  if check and r.returncode != 0:
    raise RuntimeError(f'setup failed: {script}\n{r.stderr[-2000:]}')
  return r


def read_bytes(path):
  try:
    with open(path, 'rb') as f:
      return f.read()
  except (FileNotFoundError, IsADirectoryError):
    return None


def write(path, data, mode='w'):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, mode) as f:
    f.write(data)


def snapshot(path):
  """Content of a file, or of every file under a folder (what LOST compares)."""
  if os.path.isfile(path):
    return {'': read_bytes(path)}
  if os.path.isdir(path):
    snap = {}
    for root, _, files in os.walk(path):
      for name in files:
        p = os.path.join(root, name)
        snap[os.path.relpath(p, path)] = read_bytes(p)
    return snap
  return None


def lines(path):
  data = read_bytes(path)
  if data is None:
    return None
  if not data:
    return []
  text = data.decode('utf-8', 'replace')
  return text.split('\n')[:-1] if text.endswith('\n') else text.split('\n')


def last_line(text):
  """The last non-empty stderr line that is not a progress bar."""
  pieces = [p.strip() for chunk in text.split('\n') for p in chunk.split('\r')]
  pieces = [p for p in pieces if p]
  for p in reversed(pieces):
    if p.startswith('[#') or p.startswith('[.'):
      continue
    return p
  return ''


def trim(line, n=400):
  return line if len(line) <= n else line[:n] + '...'


def warning_lines(text):
  out = []
  for line in text.split('\n'):
    s = line.strip()
    if (s[:1] == 'W' and s[1:5].isdigit()) or 'warning' in s.lower():
      out.append(s)
  return out


def has_words(line, words):
  low = line.lower()
  for w in words:
    alts = w if isinstance(w, tuple) else (w,)
    if not any(a.lower() in low for a in alts):
      return False
  return True


class Result:
  def __init__(self, rc, out, err, timed_out):
    self.rc, self.out, self.err, self.timed_out = rc, out, err, timed_out
    self.last = last_line(err)

  @property
  def traceback(self):
    return crashed(self.err) or crashed(self.out)


# --------------------------------------------------------------------------- the tour

class Tour:

  def __init__(self, scratch, out_path):
    self.s = scratch
    self.out_path = out_path
    self.results = []
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    open(out_path, 'w').close()

  def p(self, *parts):
    return os.path.join(self.s, *parts)

  # -- records

  def record(self, surface, name, command, expected, observed, verdict, note=''):
    row = {'surface': surface, 'name': f'{surface}.{name}', 'command': command,
           'expected': expected, 'observed': trim(observed, 500), 'verdict': verdict}
    if note:
      row['note'] = note
    self.results.append(row)
    with open(self.out_path, 'a') as f:
      f.write(json.dumps(row, ensure_ascii=False) + '\n')
    print(f'{verdict:9s} {row["name"]}: {observed[:160]}', flush=True)

  # -- running

  def exec(self, cmd, timeout=DEFAULT_TIMEOUT, stdin=None, cwd=MAIN):
    full = ['timeout', '-k', '10', str(timeout)] + cmd
    try:
      r = subprocess.run(full, cwd=cwd, input=stdin,
                         stdin=None if stdin is not None else subprocess.DEVNULL,
                         capture_output=True, timeout=timeout + 30)
      out = r.stdout.decode('utf-8', 'replace')
      err = r.stderr.decode('utf-8', 'replace')
      return Result(r.returncode, out, err, r.returncode in (124, 137)), cmdline(full)
    except subprocess.TimeoutExpired as e:
      return Result(-9, (e.stdout or b'').decode('utf-8', 'replace'),
                    (e.stderr or b'').decode('utf-8', 'replace'), True), cmdline(full)

  def judge(self, res, kind, words=(), pred=None, guards=None, bad=(), vague=()):
    """Returns (verdict, note)."""
    if res.timed_out:
      return 'HANG', 'no answer within the time limit'
    if res.traceback:
      return 'TRACEBACK', 'Fatal Python error dump' if FATAL in res.err else ''
    for path, before in (guards or {}).items():
      if snapshot(path) != before:
        return 'LOST', f'{path} changed or vanished'
    refused_ok = res.rc != 0 and res.last.startswith('error:') and has_words(res.last, words)
    if refused_ok and bad:
      false_parts = [b for b in bad if b in res.last]
      if false_parts:
        return 'WRONG', f'the error line says {false_parts}, which is false here'
    if refused_ok and vague:
      vague_parts = [v for v in vague if v in res.last]
      if vague_parts:
        return 'UNCLEAR', f'the error line only says {vague_parts}: it does not say what to do instead'
    if kind == 'ok':
      if res.rc != 0:
        return 'WRONG', 'refused though valid'
      if pred:
        good, note = pred(res)
        return ('OK' if good else 'WRONG'), note
      return 'OK', ''
    if kind == 'refuse':
      if res.rc == 0:
        hits = [w for w in warning_lines(res.err) if 'changed' in w] or \
            [w for w in warning_lines(res.err) if has_words(w, words) and 'custom data configuration' not in w]
        return 'WRONG', 'accepted; docs say refused' + (f'; warned: {trim(hits[0], 300)}' if hits else '; no warning')
      if refused_ok:
        return 'OK', ''
      if res.rc != 0 and res.last.startswith('error:'):
        return 'UNCLEAR', f'error line does not name {words}'
      return 'UNCLEAR', 'not one error: line'
    if kind == 'warn':
      if res.rc != 0:
        return 'WRONG', 'refused; docs say one warning line and the run goes on'
      hits = [w for w in warning_lines(res.err) if has_words(w, words)]
      if not hits:
        return 'WRONG', f'no warning naming {words}'
      if pred:
        good, note = pred(res)
        return ('OK' if good else 'WRONG'), hits[0][-300:] + ('; ' + note if note else '')
      return 'OK', hits[0][-300:]
    if kind == 'ok_or_refuse':
      if res.rc == 0:
        if pred:
          good, note = pred(res)
          return ('OK' if good else 'WRONG'), note
        return 'OK', ''
      if refused_ok:
        return 'OK', ''
      return 'UNCLEAR', 'refused, but not in one error: line naming ' + str(words)
    raise ValueError(kind)

  def t(self, surface, name, cmd, expected, kind='ok', words=(), pred=None, guard=(),
        timeout=DEFAULT_TIMEOUT, stdin=None, bad=(), vague=()):
    guards = {g: snapshot(g) for g in guard}
    res, command = self.exec(cmd, timeout=timeout, stdin=stdin)
    verdict, note = self.judge(res, kind, words, pred, guards, bad, vague)
    observed = f'exit {res.rc}; {trim(res.last)}'
    self.record(surface, name, command, expected, observed, verdict, note)
    return res


def main_py(*args):
  return [PY, 'main.py'] + [str(a) for a in args]


def cfg_args(d):
  out = []
  for k, v in d.items():
    out.append(f'--config.{k}={v}')
  return out


def tiny(corpus, **over):
  d = {'dataset': 'local', 'local_corpus_dir': corpus, 'd_model': 32, 'd_ff': 64,
       'num_heads': 4, 'num_layers': 1, 'vocab_size': 400, 'vocab_sample_sentences': 1200,
       'max_len': 64, 'max_length': 32, 'bucket_lengths': '(16,32)', 'tokens_per_batch': 2048,
       'warmup_steps': 10, 'num_train_steps': 10, 'checkpoint_every_steps': 10,
       'eval_every_steps': 0, 'eval_bleu_sentences': 0, 'final_eval_split': ''}
  for k, v in over.items():
    if v is None:
      d.pop(k, None)
    else:
      d[k] = v
  return cfg_args(d)


def out_has_lines(n):
  def pred(res):
    got = [l for l in res.out.split('\n')]
    if res.out.endswith('\n'):
      got = got[:-1]
    return len(got) == n, f'{len(got)} stdout lines, expected {n}'
  return pred


def file_lines(path, n):
  def pred(res):
    got = lines(path)
    if got is None:
      return False, f'{path} not written'
    return len(got) == n, f'{len(got)} lines in output, expected {n}'
  return pred


def same_file(path, ref):
  def pred(res):
    a, b = read_bytes(path), read_bytes(ref)
    if a is None:
      return False, f'{path} not written'
    return a == b, 'identical to the plain-LF run' if a == b else \
        f'differs from the plain-LF run: {a[:120]!r} vs {b[:120]!r}'
  return pred


def stdout_has(*words):
  def pred(res):
    return has_words(res.out + res.err, words), f'output names {words}' if has_words(
        res.out + res.err, words) else f'output does not name {words}'
  return pred


# --------------------------------------------------------------------------- setup

VERSES_EN = [
    'In the beginning God created the heaven and the earth.',
    'And God said, Let there be light: and there was light.',
    'And God saw the light, that it was good.',
    'And the evening and the morning were the first day.',
    'And God called the firmament Heaven.',
]
VERSES_ES = [
    'EN el principio crió Dios los cielos y la tierra.',
    'Y dijo Dios: Sea la luz: y fué la luz.',
    'Y vió Dios que la luz era buena.',
    'Y fué la tarde y la mañana un día.',
    'Y llamó Dios á la expansión Cielos.',
]


def make_corpus(tour):
  data = os.path.join(MAIN, 't2t_jax', 'data', 'bible_en_es')
  spec = {'corpus': (0, 1500, 40, 40), 'corpus_ft': (1500, 1500, 40, 40),
          'corpus_c': (0, 1500, 40, 40), 'corpus_fe': (0, 1500, 40, 400)}
  for name, (skip, ntrain, ndev, ntest) in spec.items():
    d = tour.p(name)
    os.makedirs(d, exist_ok=True)
    for split, n, off in (('train', ntrain, skip), ('dev', ndev, 0), ('test', ntest, 0)):
      for lang in ('en', 'es'):
        sh(f'gzip -dc {data}/{split}.{lang}.gz | tail -n +{off + 1} | head -n {n} > {d}/{split}.{lang}')


def make_inputs(tour):
  s = tour.p
  write(s('in', 'lf.txt'), ''.join(v + '\n' for v in VERSES_EN))
  write(s('in', 'two.txt'), ''.join(v + '\n' for v in VERSES_EN[:2]))
  write(s('in', 'crlf.txt'), ''.join(v + '\r\n' for v in VERSES_EN))
  write(s('in', 'bom.txt'), '\ufeff' + ''.join(v + '\n' for v in VERSES_EN))
  write(s('in', 'noeol.txt'), '\n'.join(VERSES_EN))
  write(s('in', 'empty_lines.txt'), VERSES_EN[0] + '\n\n' + VERSES_EN[1] + '\n\n')
  write(s('in', 'empty.txt'), '')
  write(s('in', 'bad_utf8.txt'), (VERSES_EN[0] + '\n').encode() + b'And God \xff\xfe said\n' +
        (VERSES_EN[2] + '\n').encode(), mode='wb')
  write(s('in', 'tgt_lf.txt'), ''.join(v + '\n' for v in VERSES_ES))
  write(s('in', 'tgt_crlf.txt'), ''.join(v + '\r\n' for v in VERSES_ES))
  write(s('in', 'tgt_bom.txt'), '\ufeff' + ''.join(v + '\n' for v in VERSES_ES))
  write(s('in', 'tgt_empty_hyp.txt'), ''.join((v if i != 2 else '') + '\n'
                                              for i, v in enumerate(VERSES_ES)))
  write(s('in', 'tgt_short.txt'), ''.join(v + '\n' for v in VERSES_ES[:3]))
  write(s('in', 'tgt_bad_utf8.txt'), (VERSES_ES[0] + '\n').encode() + b'Y dijo \xe9\xff Dios\n' +
        ''.join(v + '\n' for v in VERSES_ES[2:]).encode(), mode='wb')
  prefixes = ['Y', 'Y dijo', '', 'Y fué', 'Y llamó']
  write(s('in', 'prefix_lf.txt'), ''.join(p + '\n' for p in prefixes))
  write(s('in', 'prefix_crlf.txt'), ''.join(p + '\r\n' for p in prefixes))
  write(s('in', 'prefix_short.txt'), ''.join(p + '\n' for p in prefixes[:3]))
  write(s('in', 'prefix_long.txt'), ''.join(p + '\n' for p in prefixes + ['Y', 'Y']))
  write(s('in', 'prefix_bad_utf8.txt'), b'Y\nY \xff\n\nY\nY\n', mode='wb')
  many = []
  for i in range(3000):
    many.append(VERSES_EN[i % 5] + f' {i}')
  write(s('in', 'many.txt'), ''.join(v + '\n' for v in many))


FACTORY = '''import t2t_jax
import flax.linen as nn
import functools


class SwiGLU(nn.Module):
  cfg: t2t_jax.TransformerConfig

  @nn.compact
  def __call__(self, x):
    dense = functools.partial(nn.Dense, use_bias=False, dtype=self.cfg.dtype)
    gate, up = dense(self.cfg.d_ff, name='gate')(x), dense(self.cfg.d_ff, name='up')(x)
    return dense(self.cfg.d_model, name='down')(nn.silu(gate) * up)


def swiglu(cfg):
  return t2t_jax.Transformer(cfg, feed_forward=SwiGLU)
'''

FACTORY_EDITED = '''import t2t_jax


def swiglu(cfg):
  # edited: now the paper's feed-forward
  return t2t_jax.Transformer(cfg)
'''

FACTORY_SAME_SHAPES = FACTORY.replace('nn.silu(gate)', 'nn.relu(gate)')

OPTIMIZER = '''import optax


def lion(config, schedule):
  return optax.chain(optax.clip_by_global_norm(1.0), optax.lion(schedule, b1=0.9, b2=0.99))
'''


# --------------------------------------------------------------------------- 1. workdir

def workdir_surface(tour):
  S, p = 'workdir', tour.p
  C = p('corpus')
  base, other, voc, fac = p('runs', 'base'), p('runs', 'other300'), p('runs', 'voc'), p('runs', 'fac')
  par, ft, ftfac, opt = p('runs', 'parent'), p('runs', 'ft'), p('runs', 'ftfac'), p('runs', 'opt')
  two, tgt2 = p('in', 'two.txt'), p('in', 'tgt_lf.txt')
  write(p('in', 'tgt_two.txt'), ''.join(v + '\n' for v in VERSES_ES[:2]))
  tgt2 = p('in', 'tgt_two.txt')
  n = [0]

  def o(tag):
    n[0] += 1
    return p('out', f'w{n[0]:03d}_{tag}')

  def every_mode(prefix, wd, extra_train, steps, exp_note, skip=()):
    """decode, eval, score, info, export, average, attention, resume on one workdir."""
    if 'decode' not in skip:
      out = o('decode.txt')
      tour.t(S, f'{prefix}.decode', main_py('--mode=decode', f'--workdir={wd}', f'--input={two}', f'--output={out}'),
             f'decode runs from the workdir alone ({exp_note})', 'ok', pred=file_lines(out, 2))
    if 'eval' not in skip:
      tour.t(S, f'{prefix}.eval', main_py('--mode=eval', f'--workdir={wd}'),
             f'eval runs from the workdir and the corpus ({exp_note})', 'ok')
    if 'score' not in skip:
      out = o('score.tsv')
      tour.t(S, f'{prefix}.score', main_py('--mode=score', f'--workdir={wd}', f'--input={two}', f'--targets={tgt2}', f'--output={out}'),
             f'score runs from the workdir alone ({exp_note})', 'ok', pred=file_lines(out, 2))
    if 'info' not in skip:
      tour.t(S, f'{prefix}.info', main_py('--mode=info', f'--workdir={wd}'),
             f'info prints the recorded run, inputs as provenance ({exp_note})', 'ok')
    if 'export' not in skip:
      out = o('hlo')
      tour.t(S, f'{prefix}.export', main_py('--mode=export', '--format=stablehlo', f'--workdir={wd}', f'--output={out}'),
             f'the StableHLO export is built and self-checked ({exp_note})', 'ok',
             pred=lambda r, out=out: (os.path.isfile(os.path.join(out, 'serve.py')), 'serve.py in the export'))
    if 'average' not in skip:
      tour.t(S, f'{prefix}.average', main_py('--mode=average', f'--workdir={wd}', '--config.average_last=1'),
             f'average writes averaged/ ({exp_note})', 'ok',
             pred=lambda r: (os.path.isdir(os.path.join(wd, 'averaged')), 'averaged/ present'))
    if 'attention' not in skip:
      out = o('att')
      tour.t(S, f'{prefix}.attention', main_py('--mode=attention', f'--workdir={wd}', f'--input={two}', f'--output={out}'),
             f'attention maps from the workdir alone ({exp_note})', 'ok',
             pred=lambda r, out=out: (os.path.isdir(os.path.join(out, 'sentence_0')) or os.path.isdir(os.path.join(out, 'sentence_1')), 'sentence folders written'))
    if 'resume' not in skip:
      tour.t(S, f'{prefix}.resume', main_py(f'--workdir={wd}', *extra_train(steps)),
             f'the same training command resumes to step {steps} ({exp_note})', 'ok',
             pred=lambda r: (f'step {steps}' in r.err, f'reached step {steps}' if f'step {steps}' in r.err else f'no "step {steps}" logged'),
             timeout=600)

  # --- setup runs (each is a try: training with the inputs under test)
  tour.t(S, 'base.train', main_py(f'--workdir={base}', *tiny(C)), 'a tiny run trains 10 steps and checkpoints', timeout=600)
  tour.t(S, 'other_vocab.train', main_py(f'--workdir={other}', *tiny(C, vocab_size=300)),
         'a second tiny run with a 300-piece vocabulary trains', timeout=600)
  os.makedirs(p('inputs', 'voc'), exist_ok=True)
  shutil.copy(os.path.join(base, 'vocab', 'spm.model'), p('inputs', 'voc', 'my.model'))
  shutil.copy(os.path.join(other, 'vocab', 'spm.model'), p('inputs', 'other300.model'))
  other400 = p('runs', 'other400')
  tour.t(S, 'other_corpus_vocab.train', main_py(f'--workdir={other400}', *tiny(p('corpus_ft'))),
         'a tiny run on another corpus (another 400-piece vocabulary) trains', timeout=600)
  shutil.copy(os.path.join(other400, 'vocab', 'spm.model'), p('inputs', 'other400.model'))
  write(p('inputs', 'fac', 'fac.py'), FACTORY)
  write(p('inputs', 'opt', 'opt.py'), OPTIMIZER)

  def voc_args(steps, vm=p('inputs', 'voc', 'my.model')):
    return tiny(C, vocab_model=vm, vocab_sample_sentences=None, num_train_steps=steps)
  tour.t(S, 'vocab_model.train', main_py(f'--workdir={voc}', *voc_args(10)),
         'a run with --config.vocab_model copies it into vocab/ and trains', timeout=600,
         pred=lambda r: (read_bytes(os.path.join(voc, 'vocab', 'spm.model')) == read_bytes(p('inputs', 'voc', 'my.model')), 'vocab/spm.model is the given file byte for byte'))

  fac_spec = p('inputs', 'fac', 'fac.py') + ':swiglu'

  def fac_args(steps, spec=fac_spec):
    return tiny(C, model=spec, num_train_steps=steps)
  tour.t(S, 'factory.train', main_py(f'--workdir={fac}', *fac_args(10)),
         'a run with a --config.model factory file trains', timeout=600)
  tour.t(S, 'parent.train', main_py(f'--workdir={par}', *tiny(C)), 'a parent run for fine-tuning trains', timeout=600)

  def ft_args(steps, init=par):
    d = tiny(p('corpus_ft'), vocab_sample_sentences=None, num_train_steps=steps)
    return d + ([f'--config.init_from={init}'] if init else [])
  tour.t(S, 'finetune.train', main_py(f'--workdir={ft}', *ft_args(10)),
         'a fine-tune from the parent on another corpus trains; vocab copied', timeout=600,
         pred=lambda r: (read_bytes(os.path.join(ft, 'vocab', 'spm.model')) == read_bytes(os.path.join(par, 'vocab', 'spm.model')), "vocab/spm.model is the parent's"))

  def ftfac_args(steps, spec=fac_spec):
    return tiny(p('corpus_ft'), vocab_sample_sentences=None, num_train_steps=steps, model=spec,
                init_from=fac)
  tour.t(S, 'finetune_factory.train', main_py(f'--workdir={ftfac}', *ftfac_args(10)),
         'a fine-tune of the factory run, naming the same factory, trains', timeout=600)

  def opt_args(steps):
    return tiny(C, optimizer=p('inputs', 'opt', 'opt.py') + ':lion', num_train_steps=steps)
  tour.t(S, 'optimizer_factory.train', main_py(f'--workdir={opt}', *opt_args(10)),
         'a run with an optimizer factory file trains', timeout=600)

  # --- the vocab model moved, then deleted
  shutil.move(p('inputs', 'voc'), p('inputs', 'voc_moved'))
  every_mode('moved_vocab_model', voc, lambda st: voc_args(st), 20,
             'docs: a vocab_model that has moved is no error at resume, decode, eval, score, info or export')
  tour.t(S, 'moved_vocab_model.resume_named_at_new_place',
         main_py(f'--workdir={voc}', *voc_args(30, p('inputs', 'voc_moved', 'my.model'))),
         'named again at its new place, same content: resumes', timeout=600)
  tour.t(S, 'moved_vocab_model.resume_named_other_file',
         main_py(f'--workdir={voc}', *voc_args(40, p('inputs', 'other400.model'))),
         'another vocab file named: refused in one line naming both sha256', 'refuse', words=['sha256'],
         timeout=600)
  ftv = p('runs', 'ft_voc')
  tour.t(S, 'moved_vocab_model.finetune_again',
         main_py(f'--workdir={ftv}', *tiny(C, vocab_sample_sentences=None, init_from=voc)),
         'a fine-tune of the run whose vocab_model moved trains', timeout=600)
  shutil.rmtree(p('inputs', 'voc_moved'))
  out = o('decode.txt')
  tour.t(S, 'deleted_vocab_model.decode', main_py('--mode=decode', f'--workdir={voc}', f'--input={two}', f'--output={out}'),
         'decode runs with the vocab_model deleted', pred=file_lines(out, 2))
  tour.t(S, 'deleted_vocab_model.resume', main_py(f'--workdir={voc}', *voc_args(50)),
         'the original training command resumes with the vocab_model deleted', timeout=600)

  # --- the factory file moved, then deleted, then edited
  shutil.move(p('inputs', 'fac'), p('inputs', 'fac_moved'))
  moved_spec = p('inputs', 'fac_moved', 'fac.py') + ':swiglu'
  out = o('decode.txt')
  tour.t(S, 'moved_factory.decode', main_py('--mode=decode', f'--workdir={fac}', f'--input={two}', f'--output={out}'),
         'decode runs with the factory file moved (recorded source loads)', pred=file_lines(out, 2))
  tour.t(S, 'moved_factory.resume_named_at_new_place', main_py(f'--workdir={fac}', *fac_args(20, moved_spec)),
         'named at its new place with the same sha256: resumes', timeout=600)
  tour.t(S, 'moved_factory.resume_old_command', main_py(f'--workdir={fac}', *fac_args(30)),
         'the original command (file gone from that path) resumes from the recorded source', timeout=600)
  shutil.rmtree(p('inputs', 'fac_moved'))
  every_mode('deleted_factory', fac, lambda st: fac_args(st), 40,
             'docs: the recorded source loads when the file is gone')
  ftfac2 = p('runs', 'ftfac2')
  tour.t(S, 'deleted_factory.finetune_again',
         main_py(f'--workdir={ftfac2}', *ftfac_args(10)),
         "a new fine-tune naming the gone factory file loads its parent's recorded one", timeout=600)
  tour.t(S, 'deleted_factory.finetune_resume', main_py(f'--workdir={ftfac}', *ftfac_args(20)),
         'the fine-tune of the factory run resumes with the factory file gone', timeout=600)
  ftfac3 = p('runs', 'ftfac3')
  tour.t(S, 'deleted_factory.finetune_without_model_key',
         main_py(f'--workdir={ftfac3}', *tiny(p('corpus_ft'), vocab_sample_sentences=None, init_from=fac)),
         "a fine-tune that does not name --config.model: the model is the source's (trains) or one line",
         'ok_or_refuse', words=['model'], timeout=600)
  write(p('inputs', 'fac', 'fac.py'), FACTORY_EDITED)
  tour.t(S, 'edited_factory.resume', main_py(f'--workdir={fac}', *fac_args(50)),
         'an edited factory file at the recorded path: refused in one line (another model)', 'refuse',
         words=[('fac.py', 'model', 'sha256')], timeout=600)
  out = o('decode.txt')
  tour.t(S, 'edited_factory.decode', main_py('--mode=decode', f'--workdir={fac}', f'--input={two}', f'--output={out}'),
         'decode with an edited file at the recorded path: the recorded model decodes, or one line',
         'ok_or_refuse', words=[('fac.py', 'model', 'sha256')], pred=file_lines(out, 2))
  out = o('decode.txt')
  tour.t(S, 'edited_factory.decode_naming_it',
         main_py('--mode=decode', f'--workdir={fac}', f'--input={two}', f'--output={out}', f'--config.model={fac_spec}'),
         'decode naming the edited file: refused in one line (model key / sha256)', 'refuse',
         words=[('fac.py', 'model', 'sha256')])
  shutil.rmtree(p('inputs', 'fac'))

  # --- a second factory run: plain deletion, then an edit that keeps every parameter shape
  fac2 = p('runs', 'fac2')
  write(p('inputs', 'fac2', 'fac.py'), FACTORY)
  fac2_spec = p('inputs', 'fac2', 'fac.py') + ':swiglu'
  tour.t(S, 'factory2.train', main_py(f'--workdir={fac2}', *tiny(C, model=fac2_spec, num_train_steps=150, checkpoint_every_steps=50)),
         'a 150-step run with a factory file trains', timeout=600)
  sref = o('score.tsv')
  tour.t(S, 'factory2.score_reference', main_py('--mode=score', f'--workdir={fac2}', f'--input={two}', f'--targets={tgt2}', f'--output={sref}'),
         'scores with the factory file in place (the reference)', pred=file_lines(sref, 2))
  os.remove(p('inputs', 'fac2', 'fac.py'))
  out = o('score.tsv')
  tour.t(S, 'deleted_factory_plain.score', main_py('--mode=score', f'--workdir={fac2}', f'--input={two}', f'--targets={tgt2}', f'--output={out}'),
         'factory file deleted (never moved): the recorded source loads, the same scores', pred=same_file(out, sref))
  out = o('decode.txt')
  tour.t(S, 'deleted_factory_plain.decode', main_py('--mode=decode', f'--workdir={fac2}', f'--input={two}', f'--output={out}'),
         'factory file deleted: decode runs from the recorded source', pred=file_lines(out, 2))
  out = o('ct2')
  tour.t(S, 'deleted_factory_plain.export_ctranslate2', main_py('--mode=export', '--format=ctranslate2', f'--workdir={fac2}', f'--output={out}'),
         'docs: --format=ctranslate2 refuses a variant, in one line', 'refuse', [('model', 'variant', 'ctranslate2')])
  write(p('inputs', 'fac2_new', 'fac.py'), FACTORY_SAME_SHAPES)
  tour.t(S, 'edited_factory_new_place.resume',
         main_py(f'--workdir={fac2}', *tiny(C, model=p('inputs', 'fac2_new', 'fac.py') + ':swiglu', num_train_steps=200, checkpoint_every_steps=50)),
         'docs: an edited file named at another place is another model and refused, naming model', 'refuse', ['model'],
         timeout=600)
  write(p('inputs', 'fac2', 'fac.py'), FACTORY_SAME_SHAPES)
  out = o('score.tsv')
  tour.t(S, 'edited_factory_same_shapes.score', main_py('--mode=score', f'--workdir={fac2}', f'--input={two}', f'--targets={tgt2}', f'--output={out}'),
         'docs: the recorded file edited where it is (silu -> relu, same shapes) runs with one warning naming it and both sha256',
         'warn', ['fac.py', 'sha256'], pred=lambda r: (read_bytes(out) != read_bytes(sref), 'the edited code scores (other numbers than the reference)'))
  tour.t(S, 'edited_factory_same_shapes.resume', main_py(f'--workdir={fac2}', *tiny(C, model=fac2_spec, num_train_steps=200, checkpoint_every_steps=50)),
         'docs: the recorded file edited where it is resumes with one warning naming it and both sha256', 'warn',
         ['fac.py', 'sha256'], timeout=600)
  shutil.rmtree(p('inputs', 'fac2'))
  shutil.rmtree(p('inputs', 'fac2_new'))

  # --- the parent of a fine-tune moved, then deleted
  shutil.move(par, p('runs', 'parent_moved'))
  tour.t(S, 'moved_parent.finetune_resume_old_command', main_py(f'--workdir={ft}', *ft_args(20)),
         'the fine-tune resumes with its parent moved away (init_from path gone)', timeout=600)
  tour.t(S, 'moved_parent.finetune_resume_new_path',
         main_py(f'--workdir={ft}', *ft_args(30, p('runs', 'parent_moved'))),
         'the fine-tune resumes with init_from naming the moved parent', timeout=600)
  shutil.rmtree(p('runs', 'parent_moved'))
  tour.t(S, 'deleted_parent.finetune_resume_without_init_from', main_py(f'--workdir={ft}', *ft_args(40, None)),
         'the fine-tune resumes with its parent deleted and init_from left out', timeout=600)
  tour.t(S, 'deleted_parent.info', main_py('--mode=info', f'--workdir={ft}'),
         'info shows where the fine-tune started (the gone parent)', pred=stdout_has(par))
  every_mode('deleted_parent', ft, lambda st: ft_args(st), 50,
             'docs: once it has a checkpoint, its parent is history', skip=('info',))
  ft2 = p('runs', 'ft_of_ft')
  tour.t(S, 'deleted_parent.finetune_from_orphan',
         main_py(f'--workdir={ft2}', *tiny(C, vocab_sample_sentences=None, init_from=ft)),
         'a fine-tune of the fine-tune whose parent is gone trains', timeout=600)
  tour.t(S, 'deleted_parent.new_finetune_from_gone_parent',
         main_py(f'--workdir={p("runs", "ft_gone")}', *tiny(C, vocab_sample_sentences=None, init_from=par)),
         'a new fine-tune from a deleted parent: refused in one line naming init_from / the path', 'refuse',
         words=[('init_from', par)], timeout=600)

  # --- a corpus moved, edited, not named
  rc_ = p('runs', 'corp')
  cc, cc2 = p('corpus_c'), p('corpus_c_moved')
  tour.t(S, 'corpus.train', main_py(f'--workdir={rc_}', *tiny(cc)), 'a run on its own corpus folder trains', timeout=600)
  shutil.move(cc, cc2)
  tour.t(S, 'moved_corpus.resume_old_command', main_py(f'--workdir={rc_}', *tiny(cc, num_train_steps=20)),
         'resume naming the gone corpus folder: refused in one line naming that folder',
         'refuse', words=[cc], timeout=600)
  tour.t(S, 'moved_corpus.resume_new_dir', main_py(f'--workdir={rc_}', *tiny(cc2, num_train_steps=20)),
         'resume naming the moved, byte-identical corpus resumes', timeout=600)
  out = o('decode.txt')
  tour.t(S, 'moved_corpus.decode', main_py('--mode=decode', f'--workdir={rc_}', f'--input={two}', f'--output={out}'),
         'decode does not read the corpus: runs', pred=file_lines(out, 2))
  tour.t(S, 'moved_corpus.eval_without_naming_it', main_py('--mode=eval', f'--workdir={rc_}'),
         'eval reads the corpus: runs from the workdir, or one line naming the folder and the flag',
         'ok_or_refuse', words=['local_corpus_dir'])
  tour.t(S, 'moved_corpus.eval_new_dir', main_py('--mode=eval', f'--workdir={rc_}', f'--config.local_corpus_dir={cc2}'),
         'eval naming the moved corpus runs')
  tour.t(S, 'moved_corpus.resume_bundled', main_py(f'--workdir={rc_}', *tiny(None, dataset=None, local_corpus_dir=None, num_train_steps=30)),
         'resume naming no corpus (the bundled one): refused, told the folder trained on and the flag', 'refuse',
         words=['local_corpus_dir', cc2], bad=['bible_en_es/train.en (gone)'], timeout=600)
  shutil.copy(os.path.join(cc2, 'train.es'), p('train.es.bak'))
  with open(os.path.join(cc2, 'train.es'), 'a') as f:
    f.write('Una línea más.\n')
  with open(os.path.join(cc2, 'train.en'), 'a') as f:
    f.write('One more line.\n')
  tour.t(S, 'edited_corpus.resume_train_file_changed', main_py(f'--workdir={rc_}', *tiny(cc2, num_train_steps=30)),
         'a changed training file: refused in one line naming it', 'refuse', words=['train.'], timeout=600)
  sh(f'head -n 1500 {cc2}/train.en > {cc2}/t && mv {cc2}/t {cc2}/train.en')
  shutil.copy(p('train.es.bak'), os.path.join(cc2, 'train.es'))
  sh(f"sed -i '1s/^/X /' {cc2}/dev.es")
  tour.t(S, 'edited_corpus.resume_dev_file_changed', main_py(f'--workdir={rc_}', *tiny(cc2, num_train_steps=30)),
         'a changed dev file only warns; the run resumes', 'warn', words=['dev'], timeout=600)

  # --- the workdir itself moved
  vm = p('runs', 'voc_moved_wd')
  shutil.move(voc, vm)
  every_mode('moved_workdir', vm, lambda st: voc_args(st), 60, 'the workdir moved to another path')
  tour.t(S, 'moved_workdir.finetune_from_it',
         main_py(f'--workdir={p("runs", "ft_of_moved")}', *tiny(C, vocab_sample_sentences=None, init_from=vm)),
         'a fine-tune from the moved workdir trains', timeout=600)
  cp = p('runs', 'base_copy')
  shutil.copytree(base, cp)
  tour.t(S, 'copied_workdir.resume', main_py(f'--workdir={cp}', *tiny(C, num_train_steps=20)),
         'a copy of a workdir resumes on its own', timeout=600)

  # --- the optimizer factory file deleted
  shutil.rmtree(p('inputs', 'opt'))
  out = o('decode.txt')
  tour.t(S, 'deleted_optimizer_factory.decode', main_py('--mode=decode', f'--workdir={opt}', f'--input={two}', f'--output={out}'),
         'decode does not optimise: runs with the optimizer factory file gone', pred=file_lines(out, 2))
  tour.t(S, 'deleted_optimizer_factory.info', main_py('--mode=info', f'--workdir={opt}'),
         'info prints the run with the optimizer factory file gone')
  tour.t(S, 'deleted_optimizer_factory.eval', main_py('--mode=eval', f'--workdir={opt}'),
         'eval does not optimise: runs')
  tour.t(S, 'deleted_optimizer_factory.resume', main_py(f'--workdir={opt}', *opt_args(20)),
         'resume: the factory is not recorded (docs: not hashed), so one line naming --config.optimizer (and only true advice) is fine',
         'ok_or_refuse', words=['optimizer'], bad=['--config.model='], timeout=600)

  # --- the workdir's own files damaged or mixed with another run
  vr = p('runs', 'base_vr')
  shutil.copytree(base, vr)
  shutil.copy(p('inputs', 'other300.model'), os.path.join(vr, 'vocab', 'spm.model'))
  out = o('decode.txt')
  tour.t(S, 'replaced_vocab.decode', main_py('--mode=decode', f'--workdir={vr}', f'--input={two}', f'--output={out}'),
         'a replaced vocab/spm.model stops decode in one line naming it', 'refuse', words=['spm.model'])
  tour.t(S, 'replaced_vocab.resume', main_py(f'--workdir={vr}', *tiny(C, num_train_steps=20)),
         'a replaced vocab/spm.model stops resume in one line naming it', 'refuse', words=['spm.model'], timeout=600)
  out = o('decode.txt')
  tour.t(S, 'checkpoint_of_other_run.decode',
         main_py('--mode=decode', f'--workdir={base}', f'--checkpoint={os.path.join(other, "checkpoints", "10")}', f'--input={two}', f'--output={out}'),
         "--checkpoint=PATH of another run: refused in one line naming the checkpoint", 'refuse',
         words=[('checkpoint', 'checkpoints/10')])


# --------------------------------------------------------------------------- 2. keys

def keys_surface(tour):
  S, p = 'keys', tour.p
  C = p('corpus')
  base = p('runs', 'base')
  two = p('in', 'two.txt')
  tgt2 = p('in', 'tgt_two.txt')
  n = [0]

  def o(tag='decode.txt'):
    n[0] += 1
    return p('out', f'k{n[0]:03d}_{tag}')

  def dec(name, keys, expected, kind='ok', words=(), nlines=2, extra=()):
    out = o()
    return tour.t(S, f'decode.{name}', main_py('--mode=decode', f'--workdir={base}', f'--input={two}', f'--output={out}', *extra, *keys),
                  expected, kind, words, file_lines(out, nlines) if kind in ('ok', 'warn', 'ok_or_refuse') else None)

  dec('beam_size_with_sample_typed', ['--config.decode_strategy=sample', '--config.beam_size=8'],
      'beam_size typed with decode_strategy=sample typed: one warning line naming beam_size, decodes', 'warn', ['beam_size'])
  dec('temperature_with_beam', ['--config.temperature=0.7'],
      'temperature against the recorded beam strategy: refused in one line naming temperature', 'refuse', ['temperature'])
  dec('temperature_with_beam_typed', ['--config.decode_strategy=beam', '--config.temperature=0.7'],
      'temperature with decode_strategy=beam typed: one warning line naming temperature', 'warn', ['temperature'])
  dec('length_penalty_with_greedy_typed', ['--config.decode_strategy=greedy', '--config.length_penalty_alpha=1.0'],
      'length_penalty_alpha with greedy typed: one warning line, decodes', 'warn', ['length_penalty_alpha'])
  dec('beam_size_with_greedy_typed', ['--config.decode_strategy=greedy', '--config.beam_size=2'],
      'beam_size with greedy typed: one warning line, decodes', 'warn', ['beam_size'])
  dec('top_k_without_sample', ['--config.top_k=5'],
      'top_k with the beam strategy: refused in one line naming top_k', 'refuse', ['top_k'])
  dec('top_p_without_sample', ['--config.top_p=0.5'],
      'top_p with the beam strategy: refused in one line naming top_p', 'refuse', ['top_p'])
  dec('sample_seed_without_sample', ['--config.sample_seed=3'],
      'sample_seed with the beam strategy: refused in one line naming sample_seed', 'refuse', ['sample_seed'])
  dec('model_key_d_model_differs', ['--config.d_model=64'],
      'a model key that differs from the checkpoint: refused naming d_model', 'refuse', ['d_model'])
  dec('model_key_d_model_same', ['--config.d_model=32'],
      'a model key equal to the checkpoint: accepted (refused only when it differs)', 'ok')
  dec('model_key_num_layers_expanded', ['--config.num_encoder_layers=1', '--config.num_decoder_layers=1'],
      'the same depth written out: the same model, accepted', 'ok')
  dec('model_key_vocab_size_differs', ['--config.vocab_size=500'],
      'vocab_size differs: refused naming vocab_size', 'refuse', ['vocab_size'])
  dec('training_key_warmup_steps', ['--config.warmup_steps=99'],
      'a training key at decode: one warning line naming warmup_steps, decodes', 'warn', ['warmup_steps'])
  dec('training_key_mesh', ["--config.mesh=data:-1"],
      'mesh at decode: one warning line naming mesh, decodes', 'warn', ['mesh'])
  dec('eval_key_eval_sentence_scores', ['--config.eval_sentence_scores=True'],
      'eval_sentence_scores at decode: one warning line, decodes', 'warn', ['eval_sentence_scores'])
  dec('data_key_local_corpus_dir', [f'--config.local_corpus_dir={C}'],
      'local_corpus_dir at decode: no effect, one warning line', 'warn', ['local_corpus_dir'])
  dec('init_from_at_decode', [f'--config.init_from={base}'],
      'init_from at decode: no effect, one warning line', 'warn', ['init_from'])
  dec('vocab_model_other_file', [f'--config.vocab_model={p("inputs", "other400.model")}'],
      'modes.md: a vocab_model named again at decode is compared by content; another file is refused, naming both sha256',
      'refuse', ['sha256'])
  dec('vocab_model_same_file', [f'--config.vocab_model={os.path.join(base, "vocab", "spm.model")}'],
      "the workdir's own vocabulary named at decode: decodes (a no-effect warning is fine)", 'ok')
  dec('sample_seed_huge', ['--config.decode_strategy=sample', f'--config.sample_seed={2**70}'],
      'a 2**70 sample_seed: used, or refused in one line naming sample_seed', 'ok_or_refuse', ['sample_seed'])
  dec('sample_seed_negative', ['--config.decode_strategy=sample', '--config.sample_seed=-7'],
      'a negative sample_seed: used, or refused in one line naming sample_seed', 'ok_or_refuse', ['sample_seed'])
  dec('beam_size_negative', ['--config.beam_size=-3'],
      'beam_size=-3: refused in one line naming beam_size', 'refuse', ['beam_size'])
  dec('beam_size_zero', ['--config.beam_size=0'],
      'beam_size=0: refused in one line naming beam_size', 'refuse', ['beam_size'])
  dec('nbest_above_beam', ['--config.nbest=8'],
      'nbest 8 > beam_size 4: refused naming nbest', 'refuse', ['nbest'])
  dec('nbest_negative', ['--config.nbest=-1'],
      'nbest=-1: refused naming nbest', 'refuse', ['nbest'])
  dec('decode_batch_sentences_negative', ['--config.decode_batch_sentences=-4'],
      'decode_batch_sentences=-4: refused naming it', 'refuse', ['decode_batch_sentences'])
  dec('top_p_above_one', ['--config.decode_strategy=sample', '--config.top_p=1.5'],
      'top_p=1.5: refused naming top_p', 'refuse', ['top_p'])
  dec('temperature_negative', ['--config.decode_strategy=sample', '--config.temperature=-1'],
      'temperature=-1: refused naming temperature', 'refuse', ['temperature'])
  dec('temperature_zero', ['--config.decode_strategy=sample', '--config.temperature=0'],
      'temperature=0: greedy-like, or refused naming temperature', 'ok_or_refuse', ['temperature'])
  dec('top_k_negative', ['--config.decode_strategy=sample', '--config.top_k=-2'],
      'top_k=-2: refused naming top_k', 'refuse', ['top_k'])
  dec('max_decode_extra_negative', ['--config.max_decode_extra=-60'],
      'max_decode_extra=-60: refused naming it', 'refuse', ['max_decode_extra'])
  dec('no_repeat_ngram_size_negative', ['--config.no_repeat_ngram_size=-1'],
      'no_repeat_ngram_size=-1: refused naming it', 'refuse', ['no_repeat_ngram_size'])
  dec('output_scores_with_nbest_typed', ['--config.nbest=2', '--config.output_scores=True'],
      'output_scores typed with nbest=2 typed: one warning line; 2 lines per input', 'warn', ['output_scores'],
      nlines=4)
  dec('decode_threads_with_sharded_typed', ['--config.decode_parallelism=sharded', '--config.decode_threads=2'],
      'decode_threads with sharded typed: one warning line naming decode_threads', 'warn', ['decode_threads'])
  dec('sample_nbest_3', ['--config.decode_strategy=sample', '--config.nbest=3'],
      'sampling 3 per input writes 6 n-best lines', 'ok', nlines=6)
  dec('unknown_key', ['--config.beam_sise=4'],
      'a misspelt key: refused in one line naming it', 'refuse', ['beam_sise'])
  dec('decode_strategy_bogus', ['--config.decode_strategy=topk'],
      'an unknown decode_strategy: refused naming the choices', 'refuse', ['decode_strategy'])
  dec('checkpoint_missing_step', [], '--checkpoint=99999: refused in one line naming it', 'refuse', ['99999'],
      extra=['--checkpoint=99999'])
  dec('checkpoint_best_without_keep_best', [], '--checkpoint=best with no best/ kept: refused in one line', 'refuse',
      [('best', 'keep_best')], extra=['--checkpoint=best'])
  dec('checkpoint_ema_without_ema_decay', [], '--checkpoint=ema on a run without ema_decay: refused in one line', 'refuse',
      [('ema',)], extra=['--checkpoint=ema'])

  # score
  def score(name, keys, expected, kind='ok', words=()):
    out = o('score.tsv')
    return tour.t(S, f'score.{name}', main_py('--mode=score', f'--workdir={base}', f'--input={two}', f'--targets={tgt2}', f'--output={out}', *keys),
                  expected, kind, words, file_lines(out, 2) if kind != 'refuse' else None)
  score('nbest', ['--config.nbest=2'], 'nbest at score: one warning line (not used by the mode), scores', 'warn', ['nbest'])
  score('decode_strategy', ['--config.decode_strategy=sample'], 'decode_strategy at score: one warning line, scores', 'warn', ['decode_strategy'])
  score('beam_size', ['--config.beam_size=2'], 'beam_size at score: no effect, one warning line', 'warn', ['beam_size'])
  score('temperature', ['--config.temperature=0.5'], 'temperature at score: no effect, one warning line', 'warn', ['temperature'])
  score('model_key_differs', ['--config.num_heads=2'], 'num_heads differs at score: refused naming num_heads', 'refuse', ['num_heads'])

  # eval
  def ev(name, keys, expected, kind='ok', words=(), extra=()):
    return tour.t(S, f'eval.{name}', main_py('--mode=eval', f'--workdir={base}', *extra, *keys), expected, kind, words)
  ev('training_key_learning_rate', ['--config.learning_rate=0.001'],
     'a training key at eval: one warning line naming learning_rate', 'warn', ['learning_rate'])
  ev('training_key_trainable', ["--config.trainable=decoder/.*"],
     'trainable at eval: one warning line', 'warn', ['trainable'])
  ev('eval_bleu_sentences', ['--config.eval_bleu_sentences=0'],
     'eval_bleu_sentences at eval: one warning line, evaluates', 'warn', ['eval_bleu_sentences'])
  ev('nbest', ['--config.nbest=2'], 'nbest at eval: one warning line', 'warn', ['nbest'])
  ev('temperature_with_beam', ['--config.temperature=0.5'],
     'temperature against the beam strategy at eval: refused naming temperature', 'refuse', ['temperature'])
  ev('model_key_num_heads', ['--config.num_heads=2'], 'num_heads differs: refused naming num_heads', 'refuse', ['num_heads'])
  ev('label_smoothing_used', ['--config.label_smoothing=0.2'], 'label_smoothing is used by eval: evaluates')
  ev('tokens_per_batch_negative', ['--config.tokens_per_batch=-5'], 'tokens_per_batch=-5: refused naming it', 'refuse', ['tokens_per_batch'])
  ev('split_bogus', [], '--split=valid: refused in one line naming the choices', 'refuse', [('split', 'valid')], extra=['--split=valid'])

  # export (stablehlo)
  def ex(name, keys, expected, kind='refuse', words=()):
    out = o('hlo')
    return tour.t(S, f'export.{name}', main_py('--mode=export', '--format=stablehlo', f'--workdir={base}', f'--output={out}', *keys),
                  expected, kind, words,
                  (lambda r: (os.path.isfile(os.path.join(out, 'manifest.json')), 'manifest written')) if kind == 'ok' else None)
  ex('temperature', ['--config.temperature=0.7'], 'an export carries no decoding options: refused naming temperature', 'refuse', ['temperature'])
  ex('nbest', ['--config.nbest=2'], 'export with nbest: refused naming nbest', 'refuse', ['nbest'])
  ex('target_prefix_file', [f'--config.target_prefix_file={p("in", "prefix_lf.txt")}'], 'export with a target prefix file: refused', 'refuse', ['target_prefix_file'])
  ex('sample_seed', ['--config.sample_seed=1'], 'export with sample_seed: refused', 'refuse', ['sample_seed'])
  ex('no_repeat_ngram_size', ['--config.no_repeat_ngram_size=3'], 'export with no_repeat_ngram_size: refused', 'refuse', ['no_repeat_ngram_size'])
  ex('decode_strategy_greedy', ['--config.decode_strategy=greedy'], 'export with decode_strategy: refused', 'refuse', ['decode_strategy'])
  ex('output_scores', ['--config.output_scores=True'], 'export with output_scores: refused', 'refuse', ['output_scores'])
  ex('beam_size_2', ['--config.beam_size=2'], 'beam_size is used by export: exports with beam 2', 'ok')
  ex('training_key_dropout', ['--config.dropout_rate=0.3'], 'dropout_rate at export: one warning line, exports', 'warn', ['dropout_rate'])

  def ct2(name, keys, expected, kind='refuse', words=(), flags=()):
    out = o('ct2')
    return tour.t(S, f'export_ctranslate2.{name}', main_py('--mode=export', '--format=ctranslate2', f'--workdir={base}', f'--output={out}', *flags, *keys),
                  expected, kind, words,
                  (lambda r: (os.path.isfile(os.path.join(out, 'model.bin')), 'model.bin written')) if kind != 'refuse' else None)
  ct2('temperature', ['--config.temperature=0.7'], 'CTranslate2 export with temperature: refused naming it', 'refuse', ['temperature'])
  ct2('top_k', ['--config.decode_strategy=sample', '--config.top_k=5'], 'CTranslate2 export with sampling options: refused naming them', 'refuse', [('top_k', 'decode_strategy')])
  ct2('beam_size_2', ['--config.beam_size=2'], 'beam_size is used by export: a CTranslate2 model with beam 2 in its decoding file', 'ok')
  ct2('quantization_bogus', [], '--quantization=int3: refused in one line naming the choices', 'refuse', [('quantization', 'int3')],
      flags=['--quantization=int3'])

  # attention, average, info, plot
  out = o('att')
  tour.t(S, 'attention.nbest', main_py('--mode=attention', f'--workdir={base}', f'--input={two}', f'--output={out}', '--config.nbest=2'),
         'nbest at attention: one warning line, draws', 'warn', ['nbest'])
  out = o('att')
  tour.t(S, 'attention.top_k_without_sample', main_py('--mode=attention', f'--workdir={base}', f'--input={two}', f'--output={out}', '--config.top_k=3'),
         'top_k with the beam strategy at attention: refused naming top_k', 'refuse', ['top_k'])
  av = p('runs', 'base_av')
  shutil.copytree(base, av)
  tour.t(S, 'average.beam_size', main_py('--mode=average', f'--workdir={av}', '--config.average_last=1', '--config.beam_size=2'),
         'beam_size at average: one warning line, averages', 'warn', ['beam_size'])
  tour.t(S, 'average.average_best_without_keep_best', main_py('--mode=average', f'--workdir={av}', '--config.average_best=2'),
         'average_best with no best/ kept: refused in one line', 'refuse', [('best',)])
  tour.t(S, 'average.average_last_zero', main_py('--mode=average', f'--workdir={av}', '--config.average_last=0'),
         'average_last=0: refused naming average_last', 'refuse', ['average_last'])
  tour.t(S, 'average.average_last_negative', main_py('--mode=average', f'--workdir={av}', '--config.average_last=-2'),
         'average_last=-2: refused naming average_last', 'refuse', ['average_last'])
  tour.t(S, 'info.workdir_with_decode_key', main_py('--mode=info', f'--workdir={base}', '--config.beam_size=2'),
         'info shows every key it is given', 'ok', pred=lambda r: ('beam_size                 = 2' in r.out, 'shows beam_size = 2' if 'beam_size                 = 2' in r.out else 'beam_size=2 not shown'))
  tour.t(S, 'info.bad_heads', main_py('--mode=info', '--config.d_model=30', '--config.num_heads=4'),
         'd_model 30 with 4 heads: refused naming the keys', 'refuse', [('d_model', 'num_heads')])
  tour.t(S, 'plot.with_keys', main_py('--mode=plot', f'--workdir={av}', '--config.beam_size=2'),
         'plot reads no key: draws (a warning is fine)', 'ok')

  # train: refusals before work
  def tr(name, over, expected, kind='refuse', words=(), timeout=600, pred=None, base_over=None, corpus=C, wd=None):
    wd = wd or p('runs', f'k_{name}')
    return tour.t(S, f'train.{name}', main_py(f'--workdir={wd}', *tiny(corpus, **(base_over or {})), *cfg_args(over)),
                  expected, kind, words, pred, timeout=timeout)
  tr('warmup_above_steps_cosine', {'lr_schedule': 'cosine', 'learning_rate': 0.001, 'warmup_steps': 100},
     'warmup_steps > num_train_steps with cosine: refused naming warmup_steps', 'refuse', ['warmup_steps'])
  tr('warmup_above_steps_linear', {'lr_schedule': 'linear', 'learning_rate': 0.001, 'warmup_steps': 11},
     'warmup_steps 11 > num_train_steps 10 with linear: refused naming warmup_steps', 'refuse', ['warmup_steps'])
  tr('warmup_above_steps_rsqrt', {'warmup_steps': 100}, 'rsqrt with warmup > steps is allowed: trains', 'ok')
  tr('warmup_zero_rsqrt', {'warmup_steps': 0}, 'rsqrt with warmup 0 divides by zero: refused naming warmup_steps (or trains finitely)',
     'ok_or_refuse', ['warmup_steps'],
     pred=lambda r: ('loss nan' not in r.err and 'loss inf' not in r.err, 'finite loss' if 'loss nan' not in r.err else 'NaN loss'))
  tr('learning_rate_with_rsqrt', {'learning_rate': 0.001}, 'learning_rate with rsqrt: refused naming learning_rate', 'refuse', ['learning_rate'])
  tr('min_learning_rate_with_rsqrt', {'min_learning_rate': 1e-5}, 'min_learning_rate with rsqrt: refused', 'refuse', ['min_learning_rate'])
  tr('min_learning_rate_with_constant_typed', {'lr_schedule': 'constant', 'learning_rate': 0.001, 'min_learning_rate': 1e-5},
     'min_learning_rate with constant typed: one warning line, trains', 'warn', ['min_learning_rate'])
  tr('weight_decay_with_adam', {'weight_decay': 0.1}, 'weight_decay with adam: refused naming weight_decay', 'refuse', ['weight_decay'])
  tr('adam_b2_with_adafactor_typed', {'optimizer': 'adafactor', 'adam_b2': 0.99},
     'adam_b2 with adafactor typed: one warning line, trains', 'warn', ['adam_b2'])
  tr('keep_best_with_eval0_typed', {'keep_best': 2}, 'keep_best with eval_every_steps=0 typed: one warning line, recorded as 0',
     'warn', ['keep_best'])
  tr('early_stop_with_eval0_typed', {'early_stop_patience': 3}, 'early_stop_patience with eval_every_steps=0 typed: one warning line',
     'warn', ['early_stop_patience'])
  tr('keep_best_config_eval_on', {'keep_best': 2}, 'keep_best with periodic evaluation on: trains, keeps the best in best/',
     'ok', base_over={'eval_every_steps': 5, 'eval_bleu_sentences': None}, timeout=600,
     pred=lambda r: (os.path.isdir(p('runs', 'k_keep_best_config_eval_on', 'best')), 'best/ written'))
  tr('best_metric_bleu_without_bleu_sentences', {'keep_best': 2, 'best_metric': 'bleu'},
     'best_metric=bleu with eval_bleu_sentences=0: refused in one line', 'refuse', [('eval_bleu_sentences', 'best_metric')],
     base_over={'eval_every_steps': 5})
  tr('eval_bleu_sentences_with_eval0', {}, 'eval_bleu_sentences typed with eval_every_steps=0 typed: one warning line',
     'warn', ['eval_bleu_sentences'], base_over={'eval_bleu_sentences': 5})
  tr('seed_huge', {'seed': 2**70}, 'seed 2**70: trains, or refused in one line naming seed', 'ok_or_refuse', ['seed'])
  tr('seed_negative', {'seed': -5}, 'seed -5: trains, or refused naming seed', 'ok_or_refuse', ['seed'])
  tr('shuffle_seed_huge', {'shuffle_seed': 2**70}, 'shuffle_seed 2**70: trains, or refused naming shuffle_seed', 'ok_or_refuse', ['shuffle_seed'])
  tr('num_train_steps_negative', {'num_train_steps': -10}, 'num_train_steps=-10: refused naming it', 'refuse', ['num_train_steps'])
  tr('tokens_per_batch_zero', {'tokens_per_batch': 0}, 'tokens_per_batch=0: refused naming it', 'refuse', ['tokens_per_batch'])
  tr('vocab_size_negative', {'vocab_size': -400}, 'vocab_size=-400: refused naming it', 'refuse', ['vocab_size'])
  tr('d_model_not_divisible', {'d_model': 30}, 'd_model 30 with 4 heads: refused naming them', 'refuse', [('d_model', 'num_heads')])
  tr('dropout_rate_above_one', {'dropout_rate': 1.5}, 'dropout_rate=1.5: refused naming it', 'refuse', ['dropout_rate'])
  tr('grad_accum_steps_zero', {'grad_accum_steps': 0}, 'grad_accum_steps=0: refused naming it', 'refuse', ['grad_accum_steps'])
  tr('bucket_lengths_unsorted', {'bucket_lengths': '(32,16)'}, 'unsorted buckets: sorted and used, or refused naming bucket_lengths',
     'ok_or_refuse', ['bucket_lengths'])
  tr('bucket_lengths_below_max_length', {'bucket_lengths': '(8,16)'}, 'largest bucket 16 < max_length 32: refused naming bucket_lengths/max_length',
     'refuse', [('bucket_lengths', 'max_length')])
  tr('trainable_matches_nothing', {'trainable': 'nothing/.*'}, 'trainable that matches nothing: refused, naming the top-level paths',
     'refuse', ['trainable'])
  tr('final_eval_split_bogus', {'final_eval_split': 'valid'}, 'final_eval_split=valid: refused naming it', 'refuse', ['final_eval_split'])
  tr('share_vocab_false_shared_embeddings', {'share_vocab': False}, 'share_vocab=False with share_embeddings=True: refused in one line',
     'refuse', ['share_embeddings'])
  tr('vocab_model_with_vocab_sample_sentences', {'vocab_model': p('inputs', 'other300.model')},
     'vocab_sample_sentences typed with vocab_model typed (the key that makes it inert): one warning line naming it',
     'warn', ['vocab_sample_sentences'],
     base_over={'vocab_size': 300})
  tr('vocab_model_other_vocab_size', {'vocab_model': p('inputs', 'other300.model')},
     'vocab_model of 300 pieces with vocab_size=400: refused naming both', 'refuse', ['vocab_size'],
     base_over={'vocab_sample_sentences': None})
  tr('vocab_model_missing_file', {'vocab_model': p('inputs', 'nope.model')},
     'a vocab_model that does not exist: refused naming the file', 'refuse', ['nope.model'],
     base_over={'vocab_sample_sentences': None})
  tr('local_corpus_dir_missing', {}, 'a local_corpus_dir that does not exist: refused naming it', 'refuse',
     [('local_corpus_dir', 'no_such_corpus')], corpus=p('no_such_corpus'))
  tr('nbest_at_train', {'nbest': 2}, 'nbest at train: no effect, one warning line', 'warn', ['nbest'])
  tr('temperature_at_train', {'temperature': 0.5}, 'temperature against the beam strategy at train: refused naming temperature', 'refuse', ['temperature'])
  tr('unknown_key', {'num_layer': 2}, 'a misspelt key: refused naming it', 'refuse', ['num_layer'])
  tr('model_factory_missing_attr', {'model': p('inputs', 'other300.model') + ':f'},
     'a --config.model that is not a Python file: refused in one line before the workdir is created', 'refuse', ['model'])
  wd = p('runs', 'k_local_corpus_dir_wmt')
  tour.t(S, 'train.local_corpus_dir_without_local', main_py(f'--workdir={wd}', '--config=configs/wmt_base.py', f'--config.local_corpus_dir={C}'),
         'local_corpus_dir without dataset=local (wmt_base.py): refused in one line naming local_corpus_dir', 'refuse',
         ['local_corpus_dir'], timeout=120)

  # resume with changed keys
  bm = p('runs', 'k_bm')
  bm_over = {'eval_every_steps': 5, 'eval_bleu_sentences': 4, 'keep_best': 1, 'best_metric': 'loss'}
  tour.t(S, 'resume.setup_keep_best_run', main_py(f'--workdir={bm}', *tiny(C), *cfg_args(bm_over)),
         'a run with keep_best=1 and best_metric=loss trains and keeps its best', 'ok', timeout=600,
         pred=lambda r: (os.path.isdir(os.path.join(bm, 'best')), 'best/ written'))
  tour.t(S, 'resume.changed_best_metric', main_py(f'--workdir={bm}', *tiny(C, num_train_steps=20), *cfg_args(dict(bm_over, best_metric='bleu'))),
         'resume with best_metric=bleu: refused in one line naming best_metric', 'refuse', ['best_metric'], timeout=600)
  tour.t(S, 'resume.dropped_keep_best', main_py(f'--workdir={bm}', *tiny(C, num_train_steps=20), *cfg_args(dict(bm_over, keep_best=0))),
         'resume with keep_best turned off: trains on (or one line)', 'ok_or_refuse', ['keep_best'], timeout=600)
  out = o()
  tour.t(S, 'resume.decode_checkpoint_best', main_py('--mode=decode', f'--workdir={bm}', '--checkpoint=best', f'--input={two}', f'--output={out}'),
         '--checkpoint=best decodes from the kept best', 'ok', pred=file_lines(out, 2))
  lr = p('runs', 'k_lr')
  shutil.copytree(base, lr)
  tour.t(S, 'resume.changed_lr_schedule', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=20), '--config.lr_schedule=constant', '--config.learning_rate=0.001'),
         'resume with another lr_schedule: one warning line naming the change, trains on', 'warn',
         ['changes at step', 'lr_schedule'], timeout=600)
  tour.t(S, 'resume.changed_optimizer', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30), '--config.optimizer=adafactor'),
         'resume with another optimizer: refused naming optimizer', 'refuse', ['optimizer'], timeout=600)
  tour.t(S, 'resume.changed_d_ff', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30, d_ff=128)),
         'resume with another d_ff: refused naming d_ff', 'refuse', ['d_ff'], timeout=600)
  tour.t(S, 'resume.changed_trainable', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30), "--config.trainable=decoder/.*|shared_embedding/.*"),
         'a run resumes only with the same trainable: refused naming trainable', 'refuse', ['trainable'], timeout=600)
  tour.t(S, 'resume.changed_vocab_sample_sentences', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30, vocab_sample_sentences=1000)),
         'vocab settings differ once a checkpoint exists: refused in one line', 'refuse', ['vocab_sample_sentences'], timeout=600)
  tour.t(S, 'resume.changed_label_smoothing', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30), '--config.label_smoothing=0.2'),
         'a hyperparameter may change on resume: trains on', 'ok', timeout=600)
  tour.t(S, 'resume.cosine_warmup_above_new_total', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=40, warmup_steps=100), '--config.lr_schedule=cosine', '--config.learning_rate=0.001'),
         'cosine with warmup 100 > 40 steps on resume: refused naming warmup_steps', 'refuse', ['warmup_steps'], timeout=600)


# --------------------------------------------------------------------------- 3. streams

def streams_surface(tour):
  S, p = 'streams', tour.p
  st = p('runs', 'st')
  n = [0]

  def o(tag='decode.txt'):
    n[0] += 1
    return p('out', f's{n[0]:03d}_{tag}')

  tour.t('workdir', 'stream_model.train', main_py(f'--workdir={st}', *tiny(p('corpus'), num_train_steps=150, checkpoint_every_steps=50)),
         'a 150-step tiny run that emits non-empty translations trains', timeout=600)

  def dec(name, expected, kind='ok', words=(), pred=None, input_arg=None, stdin=None, extra=(), out=None):
    out = out or o()
    args = ['--mode=decode', f'--workdir={st}', f'--output={out}']
    if input_arg is not None:
      args.append(f'--input={input_arg}')
    res = tour.t(S, f'decode.{name}', main_py(*args, *extra), expected, kind, words,
                 pred(out) if callable(pred) else None, stdin=stdin)
    return out, res

  ref, _ = dec('file_lf', 'a 5-line file decodes into 5 lines', pred=lambda out: file_lines(out, 5), input_arg=p('in', 'lf.txt'))
  dec('stdin_dash', '--input=- decodes stdin, the same 5 lines', input_arg='-',
      stdin=read_bytes(p('in', 'lf.txt')), pred=lambda out: same_file(out, ref))
  dec('stdin_default', 'no --input reads stdin (help: default stdin), the same 5 lines',
      stdin=read_bytes(p('in', 'lf.txt')), pred=lambda out: same_file(out, ref))
  dec('crlf_file', 'CRLF input decodes like LF input (no \\r in the text)', input_arg=p('in', 'crlf.txt'),
      pred=lambda out: same_file(out, ref))
  dec('crlf_stdin', 'CRLF on stdin decodes like LF input', input_arg='-', stdin=read_bytes(p('in', 'crlf.txt')),
      pred=lambda out: same_file(out, ref))
  dec('bom_file', 'a UTF-8 BOM is not part of the first sentence: the same 5 lines', input_arg=p('in', 'bom.txt'),
      pred=lambda out: same_file(out, ref))
  dec('no_final_newline', 'a last line without newline is decoded: the same 5 lines', input_arg=p('in', 'noeol.txt'),
      pred=lambda out: same_file(out, ref))

  def empties(out):
    def pred(res):
      got = lines(out)
      good = got is not None and len(got) == 4 and got[1] == '' and got[3] == ''
      return good, f'lines: {got!r}'[:200]
    return pred
  dec('empty_lines', 'empty lines are kept as empty output lines (4 lines)', input_arg=p('in', 'empty_lines.txt'), pred=empties)
  dec('empty_file', 'an empty input gives an empty output', input_arg=p('in', 'empty.txt'),
      pred=lambda out: lambda r: (read_bytes(out) == b'', f'output {read_bytes(out)!r}'[:100]))
  dec('non_utf8_file', 'a line that is not UTF-8: refused in one line naming the file (and line)', 'refuse',
      [('bad_utf8', 'line 2', 'utf')], input_arg=p('in', 'bad_utf8.txt'))
  dec('non_utf8_stdin', 'non-UTF-8 bytes on stdin: refused in one line naming the line / encoding', 'refuse',
      [('line 2', 'utf', 'stdin')], input_arg='-', stdin=read_bytes(p('in', 'bad_utf8.txt')))
  dec('input_missing', 'a missing --input: refused in one line naming it', 'refuse', ['nope.txt'], input_arg=p('in', 'nope.txt'))
  dec('input_is_directory', 'an --input that is a folder: refused in one line naming it', 'refuse', [p('in')], input_arg=p('in'))

  # target prefixes
  def prefixed(out):
    def pred(res):
      got = lines(out)
      want = ['Y', 'Y dijo', '', 'Y fué', 'Y llamó']
      good = got is not None and len(got) == 5 and all(g.startswith(w) for g, w in zip(got, want))
      return good, f'lines: {got!r}'[:240]
    return pred
  pref_ref, _ = dec('prefix_equal', 'a 5-line prefix file: every output starts with its prefix', input_arg=p('in', 'lf.txt'),
                    extra=[f'--config.target_prefix_file={p("in", "prefix_lf.txt")}'], pred=prefixed)
  dec('prefix_crlf', 'a CRLF prefix file decodes as the LF one', input_arg=p('in', 'lf.txt'),
      extra=[f'--config.target_prefix_file={p("in", "prefix_crlf.txt")}'], pred=lambda out: same_file(out, pref_ref))
  dec('prefix_with_stdin', 'prefixes with --input=-', input_arg='-', stdin=read_bytes(p('in', 'lf.txt')),
      extra=[f'--config.target_prefix_file={p("in", "prefix_lf.txt")}'], pred=lambda out: same_file(out, pref_ref))
  dec('prefix_short', 'a prefix file with fewer lines than the input: refused in one line naming it', 'refuse',
      [('prefix_short', 'target_prefix_file')], input_arg=p('in', 'lf.txt'),
      extra=[f'--config.target_prefix_file={p("in", "prefix_short.txt")}'])
  dec('prefix_short_stdin', 'a short prefix file with streamed stdin: refused (or stopped) in one line naming it', 'refuse',
      [('prefix_short', 'target_prefix_file')], input_arg='-', stdin=read_bytes(p('in', 'lf.txt')),
      extra=[f'--config.target_prefix_file={p("in", "prefix_short.txt")}'])
  dec('prefix_long', 'a prefix file with more lines than the input: refused in one line naming it', 'refuse',
      [('prefix_long', 'target_prefix_file')], input_arg=p('in', 'lf.txt'),
      extra=[f'--config.target_prefix_file={p("in", "prefix_long.txt")}'])
  dec('prefix_long_stdin', 'a long prefix file with streamed stdin: refused in one line naming it', 'refuse',
      [('prefix_long', 'target_prefix_file')], input_arg='-', stdin=read_bytes(p('in', 'lf.txt')),
      extra=[f'--config.target_prefix_file={p("in", "prefix_long.txt")}'])
  dec('prefix_non_utf8', 'a prefix file with non-UTF-8 bytes: refused in one line naming it', 'refuse',
      [('prefix_bad_utf8', 'target_prefix_file', 'utf')], input_arg=p('in', 'lf.txt'),
      extra=[f'--config.target_prefix_file={p("in", "prefix_bad_utf8.txt")}'])
  dec('prefix_missing', 'a missing prefix file: refused in one line naming it', 'refuse',
      [('nope_prefix', 'target_prefix_file')], input_arg=p('in', 'lf.txt'),
      extra=[f'--config.target_prefix_file={p("in", "nope_prefix.txt")}'])

  # named pipes
  fifo = p('in', 'fifo1')
  os.mkfifo(fifo)
  writer = subprocess.Popen(['bash', '-c', f'cat {p("in", "lf.txt")} > {fifo}'])
  dec('fifo_input', 'a named pipe --input decodes like the file', input_arg=fifo, pred=lambda out: same_file(out, ref))
  writer.wait(timeout=30)
  streaming_via_fifo(tour, st, o('decode.txt'))
  streaming_via_stdin(tour, st)

  # signals during a streaming decode
  for sig, signame in ((signal.SIGINT, 'sigint'), (signal.SIGTERM, 'sigterm')):
    out = o('decode.txt')
    signal_stream(tour, st, sig, f'decode.{signame}_streaming_into_output', out)
    before = snapshot(out)
    out_tag = 'rerun_same_output_after_' + signame
    tour.t(S, f'decode.{out_tag}', main_py('--mode=decode', f'--workdir={st}', '--input=-', f'--output={out}'),
           'the rerun names an --output that exists: refused in one line naming it; the partial output unchanged',
           'refuse', [out], guard=[out], stdin=read_bytes(p('in', 'lf.txt')))
    out2 = o('decode.txt')
    tour.t(S, f'decode.rerun_new_output_after_{signame}', main_py('--mode=decode', f'--workdir={st}', '--input=-', f'--output={out2}'),
           'the rerun into a new --output decodes everything', stdin=read_bytes(p('in', 'lf.txt')),
           pred=same_file(out2, ref))
    del before
    signal_stream(tour, st, sig, f'decode.{signame}_streaming_into_stdout', None)
  out = o('decode.txt')
  signal_file_decode(tour, st, signal.SIGINT, 'decode.sigint_file_input_into_output', p('in', 'many.txt'), out)
  tour.t(S, 'decode.rerun_file_input_after_sigint', main_py('--mode=decode', f'--workdir={st}', f'--input={p("in", "many.txt")}', f'--output={out}'),
         'rerun into the same --output: decodes (none left) or refused in one line naming the output; nothing lost',
         'ok_or_refuse', [out], guard=[out] if os.path.exists(out) else [],
         pred=file_lines(out, 3000))

  # score
  def score(name, expected, kind='ok', words=(), inp=None, tgt=None, stdin=None, pred=None, out=True):
    outp = o('score.tsv') if out else None
    args = ['--mode=score', f'--workdir={st}']
    if inp is not None:
      args.append(f'--input={inp}')
    if tgt is not None:
      args.append(f'--targets={tgt}')
    if outp:
      args.append(f'--output={outp}')
    res = tour.t(S, f'score.{name}', main_py(*args), expected, kind, words,
                 pred(outp) if pred else None, stdin=stdin)
    return outp, res
  sref, _ = score('files', 'scores 5 pairs', inp=p('in', 'lf.txt'), tgt=p('in', 'tgt_lf.txt'), pred=lambda out: file_lines(out, 5))
  score('input_dash', '--input=- with --targets=FILE: the same scores', inp='-', tgt=p('in', 'tgt_lf.txt'),
        stdin=read_bytes(p('in', 'lf.txt')), pred=lambda out: same_file(out, sref))
  score('targets_dash', '--targets=- with --input=FILE: the same scores', inp=p('in', 'lf.txt'), tgt='-',
        stdin=read_bytes(p('in', 'tgt_lf.txt')), pred=lambda out: same_file(out, sref))
  score('both_dash', 'both from stdin: refused in one line', 'refuse', [('stdin', '-')], inp='-', tgt='-',
        stdin=read_bytes(p('in', 'lf.txt')))
  score('no_targets', 'score without --targets: refused in one line naming --targets', 'refuse', ['targets'],
        inp=p('in', 'lf.txt'))
  def eos_only(out):
    def pred(res):
      got = lines(out)
      good = got is not None and len(got) == 5 and got[2].split('\t')[1:2] == ['1']
      return good, f'line 3: {got[2] if got and len(got) > 2 else None!r}'
    return pred
  score('empty_hypothesis', 'docs: an empty target line is scored as the empty translation, EOS alone (1 token)',
        inp=p('in', 'lf.txt'), tgt=p('in', 'tgt_empty_hyp.txt'), pred=eos_only)
  score('empty_hypothesis_stdin', 'an empty target line on --targets=-: scored as EOS alone',
        inp=p('in', 'lf.txt'), tgt='-', stdin=read_bytes(p('in', 'tgt_empty_hyp.txt')), pred=eos_only)
  write(p('in', 'src_empty_line.txt'), VERSES_EN[0] + '\n\n' + VERSES_EN[2] + '\n')
  write(p('in', 'tgt_three.txt'), ''.join(v + '\n' for v in VERSES_ES[:3]))
  score('empty_source_line', 'docs: an empty source line is named by file and line', 'refuse', [('src_empty_line', 'line 2')],
        inp=p('in', 'src_empty_line.txt'), tgt=p('in', 'tgt_three.txt'))
  score('count_mismatch', 'fewer targets than inputs: refused in one line naming the files', 'refuse', [('tgt_short', 'line')],
        inp=p('in', 'lf.txt'), tgt=p('in', 'tgt_short.txt'))
  score('crlf_targets', 'CRLF targets score the same as LF targets', inp=p('in', 'lf.txt'), tgt=p('in', 'tgt_crlf.txt'),
        pred=lambda out: same_file(out, sref))
  score('bom_targets', 'a BOM on the targets file scores the same as without', inp=p('in', 'lf.txt'), tgt=p('in', 'tgt_bom.txt'),
        pred=lambda out: same_file(out, sref))
  score('crlf_input', 'a CRLF source file scores the same as LF', inp=p('in', 'crlf.txt'), tgt=p('in', 'tgt_lf.txt'),
        pred=lambda out: same_file(out, sref))
  score('non_utf8_targets', 'non-UTF-8 targets: refused in one line naming the file/line', 'refuse',
        [('tgt_bad_utf8', 'line 2', 'utf')], inp=p('in', 'lf.txt'), tgt=p('in', 'tgt_bad_utf8.txt'))
  fifo2 = p('in', 'fifo2')
  os.mkfifo(fifo2)
  writer = subprocess.Popen(['bash', '-c', f'cat {p("in", "tgt_lf.txt")} > {fifo2}'])
  score('fifo_targets', 'targets from a named pipe: the same scores', inp=p('in', 'lf.txt'), tgt=fifo2,
        pred=lambda out: same_file(out, sref))
  try:
    writer.wait(timeout=5)
  except subprocess.TimeoutExpired:
    writer.kill()
  score('to_stdout', 'no --output: the scores go to stdout (5 lines)', inp=p('in', 'lf.txt'), tgt=p('in', 'tgt_lf.txt'),
        out=False, pred=lambda out: out_has_lines(5))
  outa = o('att')
  tour.t(S, 'attention.input_dash', main_py('--mode=attention', f'--workdir={st}', '--input=-', f'--output={outa}'),
         'attention maps from stdin, or refused in one line saying attention reads a file, not stdin', 'ok_or_refuse', ['input'],
         stdin=read_bytes(p('in', 'two.txt')), vague=['no such file'])


def streaming_via_fifo(tour, st, out):
  """One line into a named pipe gives its line out before the pipe is closed (docs: Streaming)."""
  fifo = os.path.join(tour.s, 'in', 'fifo_stream')
  os.mkfifo(fifo)
  cmd = main_py('--mode=decode', f'--workdir={st}', f'--input={fifo}', f'--output={out}')
  errf = open(os.path.join(tour.s, 'out', 'fifo_stream.err'), 'wb')
  dec = subprocess.Popen(cmd, cwd=MAIN, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errf)
  writer = subprocess.Popen(['bash', '-c', f'(printf "%s\\n" "{VERSES_EN[0]}"; sleep 120) > {fifo}'],
                            start_new_session=True)
  appeared, waited = False, 0.0
  while waited < 100:
    got = lines(out)
    if got and len(got) >= 1:
      appeared = True
      break
    try:
      dec.wait(timeout=0.5)
      break
    except subprocess.TimeoutExpired:
      waited += 0.5
  os.killpg(writer.pid, signal.SIGKILL)
  writer.wait()
  try:
    rc = dec.wait(timeout=60)
    hang = False
  except subprocess.TimeoutExpired:
    dec.kill()
    rc, hang = dec.wait(), True
  errf.close()
  err = read_bytes(errf.name).decode('utf-8', 'replace')
  if hang:
    verdict = 'HANG'
  elif crashed(err):
    verdict = 'TRACEBACK'
  else:
    verdict = 'OK' if appeared and rc == 0 and lines(out) and len(lines(out)) == 1 else 'WRONG'
  tour.record('streams', 'decode.fifo_line_out_before_close', cmdline(cmd) + f'  # one line written into {fifo}, pipe held open',
              'the line is translated into --output while the pipe stays open; exits 0 once it closes',
              f'exit {rc}; {last_line(err)}', verdict,
              f'line appeared after {waited:.1f}s with the pipe open' if appeared else 'no line before the pipe closed')


def streaming_via_stdin(tour, st):
  cmd = main_py('--mode=decode', f'--workdir={st}', '--input=-')
  errf = open(os.path.join(tour.s, 'out', 'stdin_stream.err'), 'wb')
  dec = subprocess.Popen(cmd, cwd=MAIN, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf)
  dec.stdin.write((VERSES_EN[0] + '\n').encode())
  dec.stdin.flush()
  got, note = None, ''

  def alarm(*_):
    raise TimeoutError
  old = signal.signal(signal.SIGALRM, alarm)
  signal.alarm(100)
  try:
    got = dec.stdout.readline()
  except TimeoutError:
    note = 'no stdout line within 100 s while stdin stayed open'
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
  dec.stdin.close()
  try:
    rest = dec.stdout.read()
    rc = dec.wait(timeout=60)
    hang = False
  except subprocess.TimeoutExpired:
    dec.kill()
    rc, hang, rest = dec.wait(), True, b''
  errf.close()
  err = read_bytes(errf.name).decode('utf-8', 'replace')
  if hang:
    verdict = 'HANG'
  elif crashed(err):
    verdict = 'TRACEBACK'
  else:
    verdict = 'OK' if got and rc == 0 and not rest else 'WRONG'
  tour.record('streams', 'decode.stdin_line_out_before_eof', cmdline(cmd) + '  # one line on stdin, stdin held open',
              'the translation is written to stdout and flushed before stdin closes',
              f'exit {rc}; {last_line(err)}', verdict, note or f'stdout line before EOF: {got!r}'[:200])


def signal_stream(tour, st, sig, name, out):
  """Stream 3 lines, wait for them, then signal the decode while stdin stays open."""
  sig_name = 'SIGINT' if sig == signal.SIGINT else 'SIGTERM'
  args = ['--mode=decode', f'--workdir={st}', '--input=-'] + ([f'--output={out}'] if out else [])
  cmd = main_py(*args)
  errf = open(os.path.join(tour.s, 'out', name + '.err'), 'wb')
  dec = subprocess.Popen(cmd, cwd=MAIN, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE if out is None else subprocess.DEVNULL, stderr=errf)
  dec.stdin.write(''.join(v + '\n' for v in VERSES_EN[:3]).encode())
  dec.stdin.flush()
  got_lines, waited = [], 0.0

  def alarm(*_):
    raise TimeoutError
  if out is None:
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(100)
    try:
      for _ in range(3):
        got_lines.append(dec.stdout.readline())
    except TimeoutError:
      pass
    finally:
      signal.alarm(0)
      signal.signal(signal.SIGALRM, old)
  else:
    while waited < 100:
      got = lines(out)
      if got and len(got) >= 3:
        got_lines = got
        break
      try:
        dec.wait(timeout=0.5)
        break
      except subprocess.TimeoutExpired:
        waited += 0.5
  before = read_bytes(out) if out else None
  dec.send_signal(sig)
  try:
    rc = dec.wait(timeout=30)
    hang = False
  except subprocess.TimeoutExpired:
    dec.kill()
    rc, hang = dec.wait(), True
  rest = b''
  if out is None:
    try:
      rest = dec.stdout.read()
    except Exception:  # pylint: disable=broad-except
      pass
  errf.close()
  err = read_bytes(errf.name).decode('utf-8', 'replace')
  last = last_line(err)
  after = read_bytes(out) if out else None
  note = f'{len(got_lines)} lines out before the signal'
  errs = [l for l in err.split('\n') if l.startswith('error:')]
  if errs:
    note += f'; said: {trim(errs[0], 240)}'
  if FATAL in err:
    note += '; then "Fatal Python error: ... at interpreter shutdown" and SIGABRT'
  if hang:
    verdict = 'HANG'
  elif crashed(err):
    verdict = 'TRACEBACK'
  elif len(got_lines) < 3:
    verdict, note = 'WRONG', note + ' (expected 3 streamed lines before signalling)'
  elif out and (after is None or not before or not after.startswith(before)):
    verdict, note = 'LOST', f'--output before {before!r:.80} after {after!r:.80}'
  else:
    err_tail = [l for l in err.split('\n') if l.strip() and not l.startswith(('I1', 'I0', 'W1', 'W0', '['))]
    one_line = len(err_tail) <= 1
    verdict = 'OK' if one_line else 'UNCLEAR'
    note += f'; non-log stderr lines after start: {len(err_tail)}'
  cmd_s = cmdline(cmd) + f'  # 3 lines on stdin held open, {sig_name} after they are out'
  tour.record('streams', name, cmd_s,
              f'{sig_name} ends the streaming decode in one line; what was written stays',
              f'exit {rc}; {last}', verdict, note)


def signal_file_decode(tour, st, sig, name, inp, out):
  cmd = main_py('--mode=decode', f'--workdir={st}', f'--input={inp}', f'--output={out}', '--config.decode_batch_sentences=4')
  errf = open(os.path.join(tour.s, 'out', name + '.err'), 'wb')
  dec = subprocess.Popen(cmd, cwd=MAIN, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errf)
  waited = 0.0
  while waited < 120:
    err = read_bytes(errf.name) or b''
    if b'/3000 sentences' in err:
      break
    try:
      dec.wait(timeout=0.5)
      break
    except subprocess.TimeoutExpired:
      waited += 0.5
  dec.send_signal(sig)
  try:
    rc = dec.wait(timeout=30)
    hang = False
  except subprocess.TimeoutExpired:
    dec.kill()
    rc, hang = dec.wait(), True
  errf.close()
  err = read_bytes(errf.name).decode('utf-8', 'replace')
  got = lines(out)
  if hang:
    verdict = 'HANG'
  elif crashed(err):
    verdict = 'TRACEBACK'
  elif rc == 0 and (got is None or len(got) != 3000):
    verdict = 'WRONG'
  else:
    verdict = 'OK' if last_line(err).startswith('error:') or rc == 0 else 'UNCLEAR'
  tour.record('streams', name, cmdline(cmd) + '  # SIGINT while decoding a 3000-line file',
              'Ctrl-C stops the decode in one line; the output is whole, partial-but-kept, or removed (said which)',
              f'exit {rc}; {last_line(err)}', verdict,
              f'--output after: {"absent" if got is None else str(len(got)) + " lines"}' +
              ''.join(f'; said: {trim(l, 240)}' for l in err.split('\n') if l.startswith('error:'))[:300] +
              ('; then a Fatal Python error dump' if FATAL in err else ''))


# --------------------------------------------------------------------------- 4. files and signals

class ReadOnly:
  """A read-only bind mount of a folder (the tour runs as root, so chmod does not stop it)."""

  def __init__(self, path):
    self.path = path

  def __enter__(self):
    sh(f'mount --bind {self.path} {self.path} && mount -o remount,ro,bind {self.path}')
    return self

  def __exit__(self, *a):
    sh(f'umount {self.path}', check=False)


def files_surface(tour):
  S, p = 'files', tour.p
  C = p('corpus')
  base, st = p('runs', 'base'), p('runs', 'st')
  two, tgt2 = p('in', 'two.txt'), p('in', 'tgt_two.txt')
  n = [0]

  def o(tag='decode.txt'):
    n[0] += 1
    return p('out', f'f{n[0]:03d}_{tag}')

  ex = o()
  write(ex, 'precious text\n')
  tour.t(S, 'decode.output_exists', main_py('--mode=decode', f'--workdir={base}', f'--input={two}', f'--output={ex}'),
         '--output exists: refused in one line naming it, the file unchanged', 'refuse', [ex], guard=[ex])
  ex2 = o('score.tsv')
  write(ex2, 'precious scores\n')
  tour.t(S, 'score.output_exists', main_py('--mode=score', f'--workdir={base}', f'--input={two}', f'--targets={tgt2}', f'--output={ex2}'),
         'score --output exists: refused in one line naming it, the file unchanged', 'refuse', [ex2], guard=[ex2])
  d = o('dir')
  os.makedirs(d)
  tour.t(S, 'decode.output_is_directory', main_py('--mode=decode', f'--workdir={base}', f'--input={two}', f'--output={d}'),
         '--output that is a folder: refused in one line naming it', 'refuse', [d])
  nd = os.path.join(o('newparent'), 'sub', 'out.txt')
  tour.t(S, 'decode.output_parent_missing', main_py('--mode=decode', f'--workdir={base}', f'--input={two}', f'--output={nd}'),
         '--output in a folder that does not exist: made, or refused in one line naming it', 'ok_or_refuse', ['newparent'],
         pred=file_lines(nd, 2))
  pf = o('parentfile')
  write(pf, 'x\n')
  tour.t(S, 'decode.output_parent_is_file', main_py('--mode=decode', f'--workdir={base}', f'--input={two}', f'--output={pf}/out.txt'),
         "--output's folder is a file: refused in one line naming it", 'refuse', [pf], guard=[pf])
  rod = o('rodir')
  os.makedirs(rod)
  with ReadOnly(rod):
    tour.t(S, 'decode.output_in_read_only_folder', main_py('--mode=decode', f'--workdir={base}', f'--input={two}', f'--output={rod}/out.txt'),
           '--output in a read-only folder: refused before work, in one line naming it', 'refuse', [rod])
    tour.t(S, 'score.output_in_read_only_folder', main_py('--mode=score', f'--workdir={base}', f'--input={two}', f'--targets={tgt2}', f'--output={rod}/s.tsv'),
           'score --output in a read-only folder: refused in one line naming it', 'refuse', [rod])
    tour.t(S, 'export.output_in_read_only_folder', main_py('--mode=export', '--format=stablehlo', f'--workdir={base}', f'--output={rod}/hlo'),
           'export --output in a read-only folder: refused in one line naming it', 'refuse', [rod])
    tour.t(S, 'attention.output_in_read_only_folder', main_py('--mode=attention', f'--workdir={base}', f'--input={two}', f'--output={rod}/att'),
           'attention --output in a read-only folder: refused in one line naming it', 'refuse', [rod])
  hx = o('hlo_exists')
  os.makedirs(hx)
  write(os.path.join(hx, 'keep.txt'), 'keep\n')
  tour.t(S, 'export.output_nonempty_folder', main_py('--mode=export', '--format=stablehlo', f'--workdir={base}', f'--output={hx}'),
         'export into a non-empty folder: refused in one line naming it; nothing changed', 'refuse', [hx], guard=[hx])
  he = o('hlo_empty')
  os.makedirs(he)
  tour.t(S, 'export.output_empty_folder', main_py('--mode=export', '--format=stablehlo', f'--workdir={base}', f'--output={he}'),
         'export into an existing empty folder: exported, or refused in one line (help: a new directory)', 'ok_or_refuse', [he],
         pred=lambda r: (os.path.isfile(os.path.join(he, 'manifest.json')), 'manifest written'))
  ax = o('att_exists')
  os.makedirs(ax)
  write(os.path.join(ax, 'keep.txt'), 'keep\n')
  tour.t(S, 'attention.output_nonempty_folder', main_py('--mode=attention', f'--workdir={base}', f'--input={two}', f'--output={ax}'),
         'attention into a non-empty folder: refused in one line, nothing overwritten', 'refuse', [ax], guard=[ax])
  af = o('att_file')
  write(af, 'keep\n')
  tour.t(S, 'attention.output_is_file', main_py('--mode=attention', f'--workdir={base}', f'--input={two}', f'--output={af}'),
         'attention --output that is a file: refused in one line, file unchanged', 'refuse', [af], guard=[af])

  # read-only workdirs
  ro = p('runs', 'base_ro')
  shutil.copytree(base, ro)
  with ReadOnly(ro):
    tour.t(S, 'eval.read_only_workdir', main_py('--mode=eval', f'--workdir={ro}'),
           'eval writes into the workdir: refused before work in one line naming it', 'refuse', [ro])
    tour.t(S, 'average.read_only_workdir', main_py('--mode=average', f'--workdir={ro}'),
           'average writes into the workdir: refused in one line naming it', 'refuse', [ro])
    tour.t(S, 'plot.read_only_workdir', main_py('--mode=plot', f'--workdir={ro}'),
           'plot writes into the workdir: refused in one line naming it', 'refuse', [ro])
    tour.t(S, 'train.read_only_workdir_resume', main_py(f'--workdir={ro}', *tiny(C, num_train_steps=20)),
           'training resume into a read-only workdir: refused in one line naming it', 'refuse', [ro], timeout=600)
    out = o()
    tour.t(S, 'decode.read_only_workdir', main_py('--mode=decode', f'--workdir={ro}', f'--input={two}', f'--output={out}'),
           'decode only reads the workdir: decodes', pred=file_lines(out, 2))
    out = o('score.tsv')
    tour.t(S, 'score.read_only_workdir', main_py('--mode=score', f'--workdir={ro}', f'--input={two}', f'--targets={tgt2}', f'--output={out}'),
           'score only reads the workdir: scores', pred=file_lines(out, 2))
    out = o('hlo')
    tour.t(S, 'export.read_only_workdir', main_py('--mode=export', '--format=stablehlo', f'--workdir={ro}', f'--output={out}'),
           'export only reads the workdir: exports',
           pred=lambda r: (os.path.isfile(os.path.join(out, 'manifest.json')), 'manifest written'))
    tour.t(S, 'info.read_only_workdir', main_py('--mode=info', f'--workdir={ro}'), 'info only reads: prints')

  # workdir problems
  wf = o('wdfile')
  write(wf, 'not a workdir\n')
  tour.t(S, 'train.workdir_is_file', main_py(f'--workdir={wf}', *tiny(C)), '--workdir that is a file: refused in one line naming it',
         'refuse', [wf], guard=[wf], timeout=600)
  out = o()
  tour.t(S, 'decode.workdir_missing', main_py('--mode=decode', f'--workdir={p("runs", "nope")}', f'--input={two}', f'--output={out}'),
         'decode of a workdir that does not exist: refused in one line naming it', 'refuse', [p('runs', 'nope')])
  emp = p('runs', 'empty_wd')
  os.makedirs(emp)
  out = o()
  tour.t(S, 'decode.workdir_without_checkpoint', main_py('--mode=decode', f'--workdir={emp}', f'--input={two}', f'--output={out}'),
         'decode of a workdir without checkpoint: refused in one line naming it', 'refuse', [emp])
  dv = p('runs', 'base_dv')
  shutil.copytree(base, dv)
  with open(os.path.join(dv, 'vocab', 'spm.model'), 'r+b') as f:
    f.truncate(100)
  out = o()
  tour.t(S, 'decode.truncated_vocab', main_py('--mode=decode', f'--workdir={dv}', f'--input={two}', f'--output={out}'),
         'a damaged vocab/spm.model stops decode in one line naming it', 'refuse', ['spm.model'])
  tm = p('runs', 'base_tm')
  shutil.copytree(base, tm)
  with open(os.path.join(tm, 'metrics.jsonl'), 'a') as f:
    f.write('{"step": 11, "loss": 1.')
  tour.t(S, 'train.torn_metrics_line_resume', main_py(f'--workdir={tm}', *tiny(C, num_train_steps=20)),
         'a torn last metrics line is cut with one warning and training appends', 'warn', ['metrics'], timeout=600)
  ev = p('runs', 'base_ev')
  shutil.copytree(base, ev)
  tour.t(S, 'eval.first', main_py('--mode=eval', f'--workdir={ev}'), 'eval writes eval_dev_<step>.json')
  jsons = sorted(f for f in os.listdir(ev) if f.startswith('eval_dev_') and f.endswith('.json'))
  guard = [os.path.join(ev, j) for j in jsons]
  tour.t(S, 'eval.second_does_not_overwrite', main_py('--mode=eval', f'--workdir={ev}'),
         'a second eval of the same checkpoint keeps the first JSON (a new name or reuse)', guard=guard,
         pred=lambda r: (True, f'{len(jsons)} JSON before, {len([f for f in os.listdir(ev) if f.startswith("eval_dev_") and f.endswith(".json")])} after'))

  train_signals(tour)


def wait_for(errpath, needle, proc, limit):
  waited = 0.0
  while waited < limit:
    data = read_bytes(errpath) or b''
    if needle in data:
      return True
    try:
      proc.wait(timeout=0.5)
      return False
    except subprocess.TimeoutExpired:
      waited += 0.5
  return False


def train_signals(tour):
  S, p = 'files', tour.p
  # SIGTERM mid-training, a concurrent second run, rerun
  wd = p('runs', 'sig_train')
  args = main_py(f'--workdir={wd}', *tiny(p('corpus'), num_train_steps=3000, checkpoint_every_steps=1000, log_every_steps=20))
  errp = p('out', 'sig_train.err')
  errf = open(errp, 'wb')
  proc = subprocess.Popen(args, cwd=MAIN, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errf)
  started = wait_for(errp, b'step 40/', proc, 240)
  tour.t(S, 'train.second_run_same_workdir', main_py(f'--workdir={wd}', *tiny(p('corpus'), num_train_steps=3000, checkpoint_every_steps=1000, log_every_steps=20)),
         'a second training run on a live workdir: refused in one line (the lock)', 'refuse', [('lock', 'another', 'running')], timeout=600)
  proc.send_signal(signal.SIGTERM)
  try:
    rc = proc.wait(timeout=120)
    hang = False
  except subprocess.TimeoutExpired:
    proc.kill()
    rc, hang = proc.wait(), True
  errf.close()
  err = read_bytes(errp).decode('utf-8', 'replace')
  ckpts = sorted(os.listdir(os.path.join(wd, 'checkpoints'))) if os.path.isdir(os.path.join(wd, 'checkpoints')) else []
  verdict = 'HANG' if hang else 'TRACEBACK' if crashed(err) else (
      'OK' if rc == 0 and ckpts and started else 'WRONG')
  tour.record(S, 'train.sigterm_mid_training', cmdline(args) + '  # SIGTERM after step 40',
              'SIGTERM finishes the step, writes a checkpoint and exits 0', f'exit {rc}; {last_line(err)}', verdict,
              f'checkpoints after: {ckpts}')
  steps = [int(c) for c in ckpts if c.isdigit()]
  tour.t(S, 'train.rerun_after_sigterm', main_py(f'--workdir={wd}', *tiny(p('corpus'), num_train_steps=max(steps) + 20 if steps else 60, checkpoint_every_steps=1000, log_every_steps=20)),
         'the same command (fewer steps to finish quickly) resumes from the SIGTERM checkpoint',
         pred=lambda r: ('resum' in r.err.lower() or 'restor' in r.err.lower(), 'log says it resumed/restored' if ('resum' in r.err.lower() or 'restor' in r.err.lower()) else 'no resume in the log'),
         timeout=600)

  # two SIGTERMs: the second exits at once
  wd2 = p('runs', 'sig_train2')
  args = main_py(f'--workdir={wd2}', *tiny(p('corpus'), num_train_steps=3000, checkpoint_every_steps=20, log_every_steps=20))
  errp = p('out', 'sig_train2.err')
  errf = open(errp, 'wb')
  proc = subprocess.Popen(args, cwd=MAIN, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errf)
  wait_for(errp, b'step 60/', proc, 240)
  proc.send_signal(signal.SIGTERM)
  proc.send_signal(signal.SIGTERM)
  try:
    rc = proc.wait(timeout=60)
    hang = False
  except subprocess.TimeoutExpired:
    proc.kill()
    rc, hang = proc.wait(), True
  errf.close()
  err = read_bytes(errp).decode('utf-8', 'replace')
  verdict = 'HANG' if hang else 'TRACEBACK' if crashed(err) else 'OK'
  tour.record(S, 'train.two_sigterms', cmdline(args) + '  # two SIGTERMs back to back after step 60',
              'a second signal exits at once, without a traceback', f'exit {rc}; {last_line(err)}', verdict)
  tour.t(S, 'train.rerun_after_two_sigterms', main_py(f'--workdir={wd2}', *tiny(p('corpus'), num_train_steps=100, checkpoint_every_steps=20, log_every_steps=20)),
         'rerun resumes from the newest readable checkpoint', timeout=600)

  # signals during the final evaluation
  for sig, sname in ((signal.SIGTERM, 'sigterm'), (signal.SIGINT, 'sigint')):
    wd3 = p('runs', f'fe_{sname}')
    over = dict(num_train_steps=150, checkpoint_every_steps=50, final_eval_split='test', average_last=2)
    args = main_py(f'--workdir={wd3}', *tiny(p('corpus_fe'), **over))
    errp = p('out', f'fe_{sname}.err')
    errf = open(errp, 'wb')
    proc = subprocess.Popen(args, cwd=MAIN, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errf)
    reached = wait_for(errp, b'inference parameters', proc, 400)
    if reached:
      sleep(0.5)
      reached = proc.poll() is None
    done_before = b'test BLEU' in (read_bytes(errp) or b'')
    proc.send_signal(sig)
    try:
      rc = proc.wait(timeout=120)
      hang = False
    except subprocess.TimeoutExpired:
      proc.kill()
      rc, hang = proc.wait(), True
    errf.close()
    err = read_bytes(errp).decode('utf-8', 'replace')
    last = last_line(err)
    if hang:
      verdict = 'HANG'
    elif crashed(err):
      verdict = 'TRACEBACK'
    elif not reached or (done_before and rc != 0):
      verdict = 'WRONG'
    else:
      verdict = 'OK' if rc == 0 or last.startswith('error:') else 'UNCLEAR'
    note = ('signalled after the test BLEU was logged (the evaluation was over)' if done_before else
            'signalled 0.5 s into the final evaluation' if reached else 'the run ended before the signal')
    note += ''.join(f'; said: {trim(l, 240)}' for l in err.split('\n') if l.startswith('error:'))[:300]
    tour.record(S, f'train.{sname}_during_final_eval', cmdline(args) + f'  # {sname.upper()} 0.5 s after the final evaluation starts',
                f'{sname.upper()} during the final evaluation stops it without a traceback (training is done and checkpointed)',
                f'exit {rc}; {last}', verdict, note)
    tour.t(S, f'train.rerun_after_{sname}_during_final_eval', main_py(f'--workdir={wd3}', *tiny(p('corpus_fe'), **over)),
           'the same command finishes: final evaluation of the average, BLEU printed', timeout=600,
           pred=lambda r: ('BLEU' in r.out + r.err, 'BLEU reported' if 'BLEU' in r.out + r.err else 'no BLEU in the output'))


def main():
  # A tour started in the background (nohup ... &) inherits SIGINT ignored, and so would every
  # main.py it starts; give the children a normal Ctrl-C.
  signal.signal(signal.SIGINT, signal.default_int_handler)
  scratch, out = parse_args()
  os.makedirs(scratch, exist_ok=True)
  tour = Tour(scratch, out)
  os.makedirs(tour.p('out'), exist_ok=True)
  make_corpus(tour)
  make_inputs(tour)
  workdir_surface(tour)
  keys_surface(tour)
  streams_surface(tour)
  files_surface(tour)
  counts = {}
  for r in tour.results:
    counts.setdefault(r['surface'], {}).setdefault(r['verdict'], 0)
    counts[r['surface']][r['verdict']] += 1
  print(json.dumps(counts, indent=1))


if __name__ == '__main__':
  main()
