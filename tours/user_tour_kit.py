"""What the user's tour (workdir_keys_streams_tries.py, one module a surface) shares: running
`python main.py ...` in a time limit as a user would, judging what comes back (one verdict a
try: the runner's docstring says what each means), recording it as one JSON line, the training
command of a tiny run, and the checks the tries hand the judge as `pred`.

Stdlib only: it imports nothing from t2t_jax or the rest of tours/ (the tour judges main.py
from outside, against README.md and docs/).
"""

import json
import os
import shutil
import subprocess

MAIN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = shutil.which('python') or shutil.which('python3')
TB = 'Traceback (most recent call last)'
FATAL = 'Fatal Python error'


def crashed(text):
  return TB in text or FATAL in text
DEFAULT_TIMEOUT = 300


# --------------------------------------------------------------------------- small helpers

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
