"""Decoding a stream (inference/streaming.py): a line gives its output before the input ends,
batches flush when full or when the input pauses, and --input on a named pipe through main.py
answers one line without the pipe being closed."""

import os
import subprocess
import threading
import time

import pytest
from conftest import main_command, ROOT

from t2t_jax import errors
from t2t_jax.inference import streaming
from t2t_jax.storage import textio


def test_batches_flush_when_full_or_when_the_input_pauses():
  read, write = os.pipe()
  calls, written = [], []

  def translate(lines, numbers):
    calls.append(list(numbers))
    return [line.upper() for line in lines]
  with os.fdopen(read, 'rb') as source:
    worker = threading.Thread(target=streaming.stream, args=(
        source, translate, written.append, 3), kwargs={'pause_s': 0.2})
    worker.start()
    os.write(write, b'a\nb\nc\nd\n')  # a full batch of 3, then 'd' alone after the pause
    deadline = time.monotonic() + 5
    while len(written) < 4 and time.monotonic() < deadline:
      time.sleep(0.02)
    assert written == ['A\n', 'B\n', 'C\n', 'D\n']  # before the input ended
    os.write(write, 'é\n'.encode())
    os.close(write)
    worker.join(5)
  assert calls == [[1, 2, 3], [4], [5]] and written[-1] == 'É\n'


def test_bad_bytes_are_named_by_line_after_the_lines_before_them_are_written():
  """As a file: the same words (`textio.decode_lines`), a user's error (one line, no
  traceback); unlike a file, the lines before the bad one were translated and stay written,
  the batch's included, and the message says so."""
  read, write = os.pipe()
  os.write(write, '\ufeffok\nfine\n'.encode() + b'\xff\nnever\n')
  os.close(write)
  written = []
  with os.fdopen(read, 'rb') as source, pytest.raises(streaming.StreamError) as e:
    streaming.stream(source, lambda lines, numbers: lines, written.append, 8)
  assert str(e.value) == ("<stdin> is not valid UTF-8: byte 11 (line 3): invalid start byte; "
                          "the 2 lines before it were translated")
  assert written == ['ok\n', 'fine\n']  # the byte-order mark dropped, as a file's
  with pytest.raises(textio.TextFileError, match=r'^f is not valid UTF-8: byte 11 \(line 3\)'):
    textio.decode_lines('\ufeffok\nfine\n'.encode() + b'\xff\n', 'f')
  assert isinstance(e.value, errors.user_errors())


@pytest.mark.slow
def test_one_line_into_a_pipe_gives_one_line_out(tiny_workdir, tmp_path):
  fifo = str(tmp_path / 'in.fifo')
  os.mkfifo(fifo)
  process = subprocess.Popen(main_command('--mode=decode', f'--workdir={tiny_workdir}',
                                          f'--input={fifo}'), cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
  with open(fifo, 'w', encoding='utf-8') as pipe:
    started = time.monotonic()
    pipe.write('In the beginning God created the heaven and the earth.\n')
    pipe.flush()
    first = process.stdout.readline()  # the pipe is still open
    assert first.strip() and time.monotonic() - started < 120
  process.wait(60)
  assert process.returncode == 0 and process.stdout.read() == ''
