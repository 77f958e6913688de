"""The dynamic batcher (serving/batcher.py): groups of one key within the bounds, a burst kept
together, a full queue refused, and close answering everything queued. A fake decode that
records its groups stands for the model."""

import threading
import time

import pytest

from t2t_jax.serving import batcher as batcher_lib


class Recorder:
  def __init__(self, hold=0.0):
    self.groups, self.hold, self.lock = [], hold, threading.Lock()

  def __call__(self, key, items):
    time.sleep(self.hold)
    with self.lock:
      self.groups.append((key, [list(i.lines) for i in items]))
    return [[f'{key}:{line}' for line in i.lines] for i in items]


def test_a_burst_of_one_key_is_one_group_within_the_bounds_and_keys_never_mix():
  decode = Recorder()
  b = batcher_lib.Batcher(decode, max_wait_s=0.2, max_sentences=5, max_tokens=100,
                          max_queue=100)
  futures = [b.submit('a', [f'a{i}'], tokens=3) for i in range(7)]
  futures.append(b.submit('b', ['b0', 'b1'], tokens=6))
  assert [f.result(5) for f in futures] == [[f'a:a{i}'] for i in range(7)] + [['b:b0', 'b:b1']]
  b.close()
  assert sorted(decode.groups) == [('a', [['a0'], ['a1'], ['a2'], ['a3'], ['a4']]),
                                   ('a', [['a5'], ['a6']]), ('b', [['b0', 'b1']])]
  assert b.stats == {5: 1, 2: 2}


def test_tokens_bound_a_group_and_a_large_request_goes_alone():
  decode = Recorder()
  b = batcher_lib.Batcher(decode, max_wait_s=0.2, max_sentences=50, max_tokens=10,
                          max_queue=100)
  futures = [b.submit('a', ['x'], tokens=4) for _ in range(3)]
  futures.append(b.submit('a', ['y'] * 80, tokens=400))  # beyond both bounds: alone
  [f.result(5) for f in futures]
  b.close()
  assert [len(g) for _, g in decode.groups] == [2, 1, 1]


def test_a_lone_request_waits_max_wait_and_a_full_queue_is_busy():
  decode = Recorder()
  b = batcher_lib.Batcher(decode, max_wait_s=0.3, max_sentences=8, max_tokens=100, max_queue=2)
  began = time.monotonic()
  first = b.submit('a', ['x', 'y'], tokens=2)
  with pytest.raises(batcher_lib.Busy, match=r'2 sentences are waiting \(serve_max_queue=2\)'):
    b.submit('a', ['z'], tokens=1)
  first.result(5)
  assert 0.25 < time.monotonic() - began < 2.0
  b.close()
  with pytest.raises(batcher_lib.Busy, match='shutting down'):
    b.submit('a', ['z'], tokens=1)


def test_close_answers_what_is_queued_and_a_failing_decode_reaches_its_requests():
  def failing(key, items):
    raise ValueError('bad text')
  b = batcher_lib.Batcher(failing, max_wait_s=5.0, max_sentences=8, max_tokens=100,
                          max_queue=10)
  future = b.submit('a', ['x'], tokens=1)
  b.close()  # does not wait the 5 s: closing sends what is queued
  with pytest.raises(ValueError, match='bad text'):
    future.result(1)
