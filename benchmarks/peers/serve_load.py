"""`--mode=serve` under load (issue 64, 4): a bounded load generator on loopback against the
real server, beside one request holding the whole list and CTranslate2's `translate_batch`
of the same sentences; one machine, one run, in that order (never two at once).

  whole_list     one POST /translate whose q is the `--limit` test sentences (median of 3);
  concurrent_N   N one-sentence requests sent at once (N = --limit), all answered: the
                 issue's bound is <= 2.5x whole_list's time;
  clients_C      C client threads, each sending one-sentence requests back to back for
                 `--seconds`: sentences/s, p50 and p99 latency, and the batch sizes the
                 server's batcher reached (GET /v1/stats before and after);
  ct2            CTranslate2 float32 of the run's export, one `translate_batch` of the same
                 sentences at its fastest split on the 2-core EPYC (inter_threads=2,
                 intra_threads=1), beam 4 re-ranked by GNMT (`ctranslate2_decoding`);
                 median of 3 after an untimed pass.
Every answer of the server is checked against `--mode=decode`'s lines first (equal or the
benchmark stops). LibreTranslate's own server is not run: see docs/serving.md.

  python -m benchmarks.peers.serve_load --workdir RUN --scratch /tmp/serve_load \\
      --limit 200 --seconds 20 --out benchmarks/results/serve_load.jsonl
"""

import argparse
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import harness, serving_common  # noqa: E402

ROOT = serving_common.ROOT


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


class _Server:
  def __init__(self, workdir: str, keys):
    self.port = _free_port()
    self.url = f'http://127.0.0.1:{self.port}'
    self.log = tempfile.TemporaryFile('w+')
    self.watch = harness.timed().start()
    self.process = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, 'main.py'), '--mode=serve', f'--workdir={workdir}',
         f'--port={self.port}', *keys], stdout=subprocess.DEVNULL, stderr=self.log)
    while True:
      if self.process.poll() is not None:
        self.log.seek(0)
        raise SystemExit(f'the server stopped: {self.log.read()[-2000:]}')
      try:
        if self.get('/health').get('status') == 'ok':
          break
      except OSError:
        pass
      time.sleep(0.2)
    self.startup_s = self.watch.stop().seconds

  def get(self, path):
    with urllib.request.urlopen(self.url + path, timeout=600) as r:
      return json.loads(r.read())

  def translate(self, q):
    data = json.dumps({'q': q, 'source': 'en', 'target': 'es'}).encode()
    request = urllib.request.Request(self.url + '/translate', data=data,
                                     headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, timeout=600) as r:
      return json.loads(r.read())['translatedText']

  def stop(self) -> int:
    self.process.send_signal(signal.SIGTERM)
    return self.process.wait(timeout=300)


def _decode(workdir: str, sentences):
  with tempfile.NamedTemporaryFile('w', suffix='.txt', delete=False) as f:
    f.write(''.join(s + '\n' for s in sentences))
  out = subprocess.run([sys.executable, os.path.join(ROOT, 'main.py'), '--mode=decode',
                        f'--workdir={workdir}', f'--input={f.name}'], capture_output=True,
                       text=True, check=True)
  return out.stdout.splitlines()


def _batches(before, after):
  sizes = {}
  for size, count in after['batches'].items():
    more = count - before['batches'].get(size, 0)
    if more:
      sizes[int(size)] = more
  groups = sum(sizes.values())
  return {'batches': groups, 'mean_batch': sum(k * v for k, v in sizes.items()) / max(groups, 1),
          'max_batch': max(sizes) if sizes else 0, 'batch_sizes': sizes}


def _clients(server, sentences, clients: int, seconds: float):
  """C threads sending one sentence per request back to back for `seconds`."""
  latencies, lock, counter = [], threading.Lock(), [0]
  stop_at = harness.now() + seconds

  def client():
    while harness.now() < stop_at:
      with lock:
        k = counter[0]
        counter[0] += 1
      _, latency = harness.time_call(server.translate, sentences[k % len(sentences)])
      with lock:
        latencies.append(latency)
  before = server.get('/v1/stats')
  threads = [threading.Thread(target=client) for _ in range(clients)]
  with harness.timed() as t:
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
  elapsed = t.seconds
  latencies.sort()
  return dict(sentences=len(latencies), seconds=elapsed,
              sentences_per_s=len(latencies) / elapsed,
              p50_ms=1000 * latencies[len(latencies) // 2],
              p99_ms=1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
              **_batches(before, server.get('/v1/stats')))


def _ct2(workdir: str, scratch: str, sentences, repeats: int = 3):
  from t2t_jax.export import ctranslate2_decoding
  run = serving_common.load_run(workdir)
  c = run.config
  translator = serving_common.ctranslate2_translator(
      serving_common.ctranslate2_model(run, scratch), threads=1, inter_threads=2)
  pieces = run.pieces(sentences)

  def once():
    return ctranslate2_decoding.translate(
        translator, pieces, beam_size=c.beam_size, alpha=c.length_penalty_alpha,
        max_decode_extra=c.max_decode_extra, max_len=c.max_len, exact_lengths=False,
        max_batch_size=c.decode_batch_sentences)
  return harness.median_time(once, repeats)['median_s']


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--scratch', required=True)
  parser.add_argument('--limit', type=int, default=200)
  parser.add_argument('--seconds', type=float, default=20.0)
  parser.add_argument('--clients', default='1,8,64')
  parser.add_argument('--out', default=None)
  parser.add_argument('--no-ct2', action='store_true')
  parser.add_argument('keys', nargs='*', help='--config.serve_* keys for the server')
  args = parser.parse_args(argv)
  emit = harness.Emitter(args.out)
  os.makedirs(args.scratch, exist_ok=True)
  sentences = serving_common.test_set('en', args.limit)
  expected = _decode(args.workdir, sentences)
  server = _Server(args.workdir, args.keys)
  base = dict(name='serve_load', workdir=args.workdir, sentences_in_list=len(sentences),
              keys=args.keys)
  try:
    emit(dict(base, system='startup', seconds=server.startup_s))
    assert server.translate(sentences) == expected, 'whole list: not decode\'s lines'
    whole = harness.median_time(lambda: server.translate(sentences), 3, warmup=0)['median_s']
    emit(dict(base, system='whole_list', seconds=whole,
                         sentences_per_s=len(sentences) / whole))
    before = server.get('/v1/stats')
    with concurrent.futures.ThreadPoolExecutor(len(sentences)) as pool, harness.timed() as t:
      answers = list(pool.map(server.translate, sentences))
    concurrent_s = t.seconds
    assert answers == expected, 'concurrent: not decode\'s lines'
    emit(dict(base, system=f'concurrent_{len(sentences)}', seconds=concurrent_s,
                         sentences_per_s=len(sentences) / concurrent_s,
                         ratio_to_whole_list=concurrent_s / whole,
                         **_batches(before, server.get('/v1/stats'))))
    for clients in (int(c) for c in args.clients.split(',')):
      emit(dict(base, system=f'clients_{clients}',
                           **_clients(server, sentences, clients, args.seconds)))
  finally:
    code = server.stop()
  emit(dict(base, system='sigterm', exit_status=code))
  if not args.no_ct2:
    seconds = _ct2(args.workdir, args.scratch, sentences)
    emit(dict(base, system='ct2_float32@2x1', seconds=seconds,
                         sentences_per_s=len(sentences) / seconds))


if __name__ == '__main__':
  main()
