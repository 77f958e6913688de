"""The files surface of the user's tour (workdir_keys_streams_tries.py): outputs that exist,
read-only places (a read-only bind mount: the tour runs as root), damaged workdirs, and
SIGTERM/SIGINT during training and during its final evaluation, then rerunning.
It uses what the workdir surface left: runs/base, in/tgt_two.txt.
"""

import os
import shutil
import signal
import subprocess

from tours.user_tour_kit import (MAIN, cmdline, crashed, file_lines, last_line, main_py,
                                 read_bytes, sh, sleep, tiny, trim, write)

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
