"""`--mode=serve` (serving/, issue 64): the real server on a free loopback port, asked by
`libretranslatepy` (LibreTranslate's Python client, which no one here wrote) and by plain
HTTP; every answer against `--mode=decode` of the same lines. Bounded counts and times."""

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import BUNDLED, TINY, main_command, run_main, shared_once

libretranslatepy = pytest.importorskip('libretranslatepy')

START_S = 240  # compiling the buckets at -O0 beside other tests


@pytest.fixture(scope='module')
def run(corpus, tmp_path_factory):
  """A TINY run trained long enough (200 steps) to give non-empty, varied translations."""
  def train(path):
    result = run_main(f'--workdir={path}', f'--config.local_corpus_dir={corpus}', *TINY,
                      '--config.num_train_steps=200', '--config.eval_every_steps=0',
                      '--config.learning_rate_scale=2.0', '--config.warmup_steps=30')
    assert result.returncode == 0, result.stderr[-3000:]
  return shared_once(tmp_path_factory, 'serve_run', train)


@pytest.fixture(scope='module')
def sentences():
  import gzip
  with gzip.open(os.path.join(BUNDLED, 'test.en.gz'), 'rt', encoding='utf-8') as f:
    lines = [next(f).rstrip('\n') for _ in range(200)]
  return [line for line in lines if len(line.split()) <= 12][:60]


def decode(run, tmp_path, lines, *keys):
  source = tmp_path / f'in-{len(lines)}-{len(keys)}.txt'
  source.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
  result = run_main('--mode=decode', f'--workdir={run}', f'--input={source}', *keys)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout.splitlines()


class Server:
  """`main.py --mode=serve` on a free port, until `stop`."""

  def __init__(self, run, *keys):
    with socket.socket() as s:
      s.bind(('127.0.0.1', 0))
      self.port = s.getsockname()[1]
    self.url = f'http://127.0.0.1:{self.port}'
    self.log = tempfile.TemporaryFile('w+')  # a pipe left unread would fill and block it
    self.process = subprocess.Popen(
        main_command('--mode=serve', f'--workdir={run}', f'--port={self.port}', *keys),
        stdout=subprocess.DEVNULL, stderr=self.log, text=True)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
      assert self.process.poll() is None, self.stderr()[-3000:]
      try:
        if self.get('/health') == (200, {'status': 'ok'}):
          return
      except OSError:
        pass
      time.sleep(0.3)
    raise AssertionError('the server did not become healthy')

  def get(self, path):
    try:
      with urllib.request.urlopen(self.url + path, timeout=60) as r:
        return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
      return e.code, json.loads(e.read())

  def post(self, path, body, content_type='application/json', headers=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(self.url + path, data=data, headers={
        'Content-Type': content_type, **(headers or {})})
    try:
      with urllib.request.urlopen(request, timeout=120) as r:
        return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
      return e.code, json.loads(e.read()), dict(e.headers)

  def stderr(self):
    self.log.seek(0)
    return self.log.read()

  def stop(self, timeout=120):
    self.process.send_signal(signal.SIGTERM)
    self.process.wait(timeout=timeout)
    return self.process.returncode, self.stderr()


@pytest.fixture(scope='module')
def server(run):
  serving = Server(run)
  yield serving
  code, err = serving.stop()
  assert code == 0, err[-3000:]


def test_libretranslatepy_gets_decodes_translations(server, run, sentences, tmp_path):
  expected = decode(run, tmp_path, sentences[:12])
  client = libretranslatepy.LibreTranslateAPI(server.url)
  assert [client.translate(s, 'en', 'es') for s in sentences[:12]] == expected
  assert len(set(expected)) > 6 and sum(map(bool, expected)) > 6  # translations, not one string
  assert client.languages() == [{'code': 'en', 'name': 'English', 'targets': ['es']},
                                {'code': 'es', 'name': 'Spanish', 'targets': []}]
  # A list, a text of two lines, and JSON: LibreTranslate's shapes.
  status, body, _ = server.post('/translate', {'q': sentences[:3], 'source': 'en',
                                               'target': 'es'})
  assert status == 200 and body == {'translatedText': expected[:3]}
  status, body, _ = server.post('/translate', {'q': '\n'.join(sentences[:2]),
                                               'source': 'auto', 'target': 'es'})
  assert status == 200 and body == {'translatedText': '\n'.join(expected[:2])}


@pytest.mark.slow
def test_200_concurrent_requests_equal_decode_and_one_request_of_all(server, run, sentences,
                                                                      tmp_path):
  lines = [sentences[i % len(sentences)] for i in range(200)]
  expected = decode(run, tmp_path, lines)

  def one(sentence):
    return server.post('/translate', {'q': sentence, 'source': 'en', 'target': 'es'})
  with concurrent.futures.ThreadPoolExecutor(64) as pool:
    answers = list(pool.map(one, lines))
  assert len(lines) == 200 and [status for status, _, _ in answers] == [200] * 200
  assert [body['translatedText'] for _, body, _ in answers] == expected
  status, body, _ = server.post('/translate', {'q': lines, 'source': 'en', 'target': 'es'})
  assert status == 200 and body['translatedText'] == expected


def test_v1_nbest_and_sampling_are_decodes(server, run, sentences, tmp_path):
  lines = sentences[:4]
  scored = decode(run, tmp_path, lines, '--config.nbest=2')
  status, body, _ = server.post('/v1/translate', {'q': lines, 'source': 'en', 'target': 'es',
                                                  'nbest': 2})
  assert status == 200
  got = [f'{i}\t{r}\t{h["score"]:.6f}\t{h["log_prob"]:.6f}\t{h["text"]}'
         for i, item in enumerate(body['translations'])
         for r, h in enumerate(item['hypotheses'][0], 1)]
  assert got == scored
  sampled = decode(run, tmp_path, lines, '--config.decode_strategy=sample',
                   '--config.sample_seed=7')
  status, body, _ = server.post('/v1/translate', {'q': lines, 'source': 'en', 'target': 'es',
                                                  'decode_strategy': 'sample',
                                                  'sample_seed': 7})
  assert status == 200 and [t['text'] for t in body['translations']] == sampled


@pytest.mark.parametrize('body, content_type, status, field', [
    (b'{"q": "x", "source": ', 'application/json', 400, 'body'),
    ({'source': 'en', 'target': 'es'}, 'application/json', 400, 'q'),
    ({'q': 7, 'source': 'en', 'target': 'es'}, 'application/json', 400, 'q'),
    ({'q': ['a', 2], 'source': 'en', 'target': 'es'}, 'application/json', 400, 'q'),
    ({'q': 'x', 'source': 'en', 'target': 'fr'}, 'application/json', 400, 'target'),
    ({'q': 'x', 'source': 'de', 'target': 'es'}, 'application/json', 400, 'source'),
    ({'q': 'x', 'source': 'en', 'target': 'es', 'format': 'html'}, 'application/json', 400,
     'format'),
    (b'q=x&source=en', 'application/x-www-form-urlencoded', 400, 'target'),
    (b'\xff\xfe', 'application/json', 400, 'body'),
])
def test_a_bad_request_is_400_naming_the_field_and_the_server_goes_on(
    server, body, content_type, status, field):
  got, answer, _ = server.post('/translate', body, content_type)
  assert (got, answer.get('field')) == (status, field), answer
  assert server.get('/health') == (200, {'status': 'ok'})


@pytest.mark.parametrize('body, field', [
    ({'nbest': 9}, 'nbest'), ({'nbest': '2'}, 'nbest'), ({'sample_seed': 3}, 'sample_seed'),
    ({'decode_strategy': 'best'}, 'decode_strategy'), ({'beam_size': 2}, 'beam_size'),
    ({'target_prefix': ['a', 'b']}, 'target_prefix'), ({'top_p': 1.5, 'decode_strategy':
                                                        'sample'}, 'top_p'),
])
def test_v1_decode_keys_are_checked_as_the_config_is(server, body, field):
  got, answer, _ = server.post('/v1/translate', {'q': 'x', 'source': 'en', 'target': 'es',
                                                 **body})
  assert (got, answer.get('field')) == (400, field), answer


@pytest.mark.slow
def test_limits_a_full_queue_a_client_that_leaves_and_sigterm(run, sentences):
  serving = Server(run, '--config.serve_max_body_bytes=3000', '--config.serve_max_queue=1',
                   '--config.serve_max_wait_ms=1500')
  try:
    status, body, _ = serving.post('/translate', {'q': 'x' * 4000, 'source': 'en',
                                                  'target': 'es'})
    assert status == 413 and body['field'] == 'body'
    # A client gone mid-request: headers promise a body that never comes.
    with socket.create_connection(('127.0.0.1', serving.port)) as s:
      s.sendall(b'POST /translate HTTP/1.0\r\nContent-Type: application/json\r\n'
                b'Content-Length: 500\r\n\r\n{"q": "hal')
    answers = {}
    first = threading.Thread(target=lambda: answers.setdefault('first', serving.post(
        '/translate', {'q': sentences[0], 'source': 'en', 'target': 'es'})))
    first.start()
    time.sleep(0.5)  # the first waits 1.5 s for company: the queue holds its one sentence
    status, body, headers = serving.post('/translate', {'q': sentences[1], 'source': 'en',
                                                        'target': 'es'})
    assert status == 503 and headers['Retry-After'] == '1', body
    code, err = serving.stop()  # while the first is still queued: it is answered, then exit 0
    first.join(60)
    assert answers['first'][0] == 200 and answers['first'][1]['translatedText']
    assert code == 0, err[-3000:]
    assert 'stopping: no new connections' in err
  finally:
    if serving.process.poll() is None:
      serving.process.kill()


def test_a_second_server_on_the_same_port_is_one_line(server, run):
  result = run_main('--mode=serve', f'--workdir={run}', f'--port={server.port}')
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
      f'error: --port={server.port}: 127.0.0.1:{server.port} is in use (another server?); stop '
      'it or choose another --port')


def test_a_bad_serve_key_is_one_line(run):
  result = run_main('--mode=serve', f'--workdir={run}', '--port=0',
                    '--config.serve_max_queue=0')
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith(
      "error: config key 'serve_max_queue'"), result.stderr[-2000:]
