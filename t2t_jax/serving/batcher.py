"""Dynamic batching: the sentences of concurrent requests decoded together.

A request's lines wait in one queue. A worker takes the oldest request and, behind it, the
next ones decoded with the same settings (`requests.Settings`), until the group holds
`max_sentences` sentences or `max_tokens` source tokens, or until no request has arrived for
`max_wait_s` (a burst keeps its group open, up to `WAIT_CAP` times that after the oldest
arrived: a decode batch has a fixed number of rows, so a fuller one costs little more);
the group is one `decode` call (the Translator sorts its sentences by length
into the decode buckets and decodes its batches). `workers` groups decode at once (a CPU's
cores: two half-full batches keep two cores busy). A request is never split, so one larger
than the bounds goes alone. More than `max_queue` sentences waiting: `Busy` (the server's 503).
`close` stops accepting and returns once everything queued is decoded and answered.
"""

import collections
import concurrent.futures
import threading
import time
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence


WAIT_CAP = 10  # a group waits at most this many `max_wait_s` after its first request


class Busy(Exception):
  """The queue is full, or the batcher is closing: the request was not queued."""


class Item(NamedTuple):
  """One request's part of a group: its `lines`, their source `tokens` (counted for
  `max_tokens`), its `payload` (what `decode` needs besides the lines), its future."""
  key: Any
  lines: Sequence[str]
  tokens: int
  payload: Any
  future: concurrent.futures.Future
  arrived: float


# decode(key, items) -> one result per item, in order.
Decode = Callable[[Any, List[Item]], List[Any]]


class Batcher:
  """See the module doc. `stats` counts the groups decoded by size (sentences)."""

  def __init__(self, decode: Decode, *, max_wait_s: float, max_sentences: int,
               max_tokens: int, max_queue: int, workers: int = 1):
    self._decode = decode
    self.max_wait_s, self.max_sentences, self.max_tokens = max_wait_s, max_sentences, max_tokens
    self.max_queue = max_queue
    self._pending: Deque[Item] = collections.deque()
    self._queued = 0  # sentences waiting
    self._closed = False
    self._cond = threading.Condition()
    self.stats: Dict[int, int] = collections.Counter()
    self._workers = [threading.Thread(target=self._work, name=f'serve-batcher-{i}', daemon=True)
                     for i in range(max(1, workers))]
    for worker in self._workers:
      worker.start()

  @property
  def queued(self) -> int:
    return self._queued

  def submit(self, key: Any, lines: Sequence[str], tokens: int, payload: Any = None
             ) -> concurrent.futures.Future:
    """Queues one request's lines; its future gets `decode`'s result for it. Busy when the
    queue holds `max_queue` sentences already, or when closing."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    with self._cond:
      if self._closed:
        raise Busy('the server is shutting down')
      if self._queued and self._queued + len(lines) > self.max_queue:
        raise Busy(f'{self._queued} sentences are waiting (serve_max_queue={self.max_queue})')
      self._pending.append(Item(key, lines, tokens, payload, future, time.monotonic()))
      self._queued += len(lines)
      self._cond.notify_all()
    return future

  def _group(self) -> List[Item]:
    """The oldest item and the same-key items behind it that fit the bounds (under the lock)."""
    first = self._pending[0]
    group, sentences, tokens = [], 0, 0
    for item in self._pending:
      if item.key != first.key:
        continue
      if group and (sentences + len(item.lines) > self.max_sentences
                    or tokens + item.tokens > self.max_tokens):
        break
      group.append(item)
      sentences, tokens = sentences + len(item.lines), tokens + item.tokens
    return group

  def _full(self, group: List[Item]) -> bool:
    sentences = sum(len(i.lines) for i in group)
    tokens = sum(i.tokens for i in group)
    same = [i for i in self._pending if i.key == group[0].key]
    return (sentences >= self.max_sentences or tokens >= self.max_tokens
            or len(same) > len(group))  # the next same-key item did not fit

  def _take(self) -> Optional[List[Item]]:
    with self._cond:
      while True:
        if not self._pending:  # empty, or another worker took what was there
          if self._closed:
            return None
          self._cond.wait()
          continue
        group = self._group()
        # A burst keeps coming: wait for the next arrival, up to WAIT_CAP times the gap.
        gap_end = max(i.arrived for i in self._pending) + self.max_wait_s
        wait = min(gap_end, group[0].arrived + WAIT_CAP * self.max_wait_s) - time.monotonic()
        if self._closed or wait <= 0 or self._full(group):
          break
        self._cond.wait(wait)
      for item in group:
        self._pending.remove(item)
      self._queued -= sum(len(i.lines) for i in group)
      return group

  def _work(self) -> None:
    while True:
      group = self._take()
      if group is None:
        return
      self.stats[sum(len(i.lines) for i in group)] += 1
      try:
        results = self._decode(group[0].key, group)
      except BaseException as e:  # noqa: BLE001  the requests get it; the worker goes on
        for item in group:
          item.future.set_exception(e)
        continue
      for item, result in zip(group, results):
        item.future.set_result(result)

  def close(self) -> None:
    """Stops accepting; returns when every queued request has its answer."""
    with self._cond:
      self._closed = True
      self._cond.notify_all()
    for worker in self._workers:
      worker.join()
