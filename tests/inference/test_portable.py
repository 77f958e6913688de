"""The shared batching of `Translator` and the StableHLO artifact: concurrent batches."""

import os
import threading

import numpy as np

from t2t_jax.inference import portable


def _encode(sentence):
  return [2 + ord(c) % 50 for c in sentence]


def _echo_decoder(active, overlap):
  """Decodes a batch as its first source token then EOS; records the most batches seen at
  once. With `overlap`, the first batch to start waits until another batch has finished, so
  batches overlap and finish out of order by construction, not by how fast threads run (a
  generous deadline only turns a decode that never overlaps into a failure, not a hang)."""
  lock, another_done, started = threading.Lock(), threading.Event(), []

  def decode(inputs, max_lengths, max_decode_len):
    with lock:
      first = not started
      started.append(True)
      active['now'] += 1
      active['most'] = max(active['most'], active['now'])
    if overlap and first:
      assert another_done.wait(timeout=120), 'no other batch ran while the first one decoded'
    out = np.zeros((inputs.shape[0], max_decode_len), np.int32)
    out[:, 0], out[:, 1] = inputs[:, 0], portable.EOS_ID
    with lock:
      active['now'] -= 1
    if not first:
      another_done.set()
    return out
  return decode


def test_concurrent_batches_translate_in_order_as_one_at_a_time():
  sentences = ['abc', '', 'hello', 'xy', 'q', 'the quick brown fox', 'zz', 'jump', 'k', 'ok']
  kwargs = dict(rows=2, buckets=(8, 32), max_len=64, max_decode_extra=3)
  results = {}
  for threads in (1, 3):
    active, calls = {'now': 0, 'most': 0}, []
    results[threads] = portable.translate_ids(
        sentences, _encode, _echo_decoder(active, overlap=threads > 1), threads=threads,
        progress=lambda done, total, _: calls.append(done), **kwargs)
    assert (active['most'] > 1) == (threads > 1)  # batches overlapped only with threads
    assert calls == sorted(calls) and calls[-1] == len(sentences)
  assert results[1] == results[3]
  outputs, truncated = results[3]
  assert truncated == [] and outputs[1] == []
  assert [row[0] for row in outputs if row] == [_encode(s)[0] for s in sentences if s]


def test_default_threads_is_one_per_usable_core_on_cpu():
  cores = os.sched_getaffinity(0)
  try:
    # The cores this process may run on, not the machine's: pinned to one, one batch at once.
    os.sched_setaffinity(0, {min(cores)})
    assert portable.default_threads() == 1
  finally:
    os.sched_setaffinity(0, cores)
  assert portable.default_threads() == len(cores)
