"""The streams surface of the user's tour (workdir_keys_streams_tries.py): --input=- / FILE /
named pipes for decode and score, odd bytes and line ends, target prefix files, a line out
before the input closes, and SIGINT/SIGTERM during a streaming decode, then rerunning.
"""

import os
import signal
import subprocess

from tours.user_tour_fixtures import VERSES_EN, VERSES_ES
from tours.user_tour_kit import (FATAL, MAIN, cmdline, crashed, file_lines, last_line, lines,
                                 main_py, out_has_lines, read_bytes, same_file, snapshot, tiny,
                                 trim, write)

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
