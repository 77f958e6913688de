"""`--mode=serve`: the HTTP server (Python's `http.server`, a thread per connection, one
request per connection) in front of a `service.Service`.

  GET  /health         {"status": "ok"} once the decode programs are compiled; 503 before
  GET  /languages      LibreTranslate's list: [{"code", "name", "targets"}]
  GET  /v1/stats       the decoded groups by size: {"batches": {sentences: count}, "queued"}
  POST /translate      LibreTranslate's translate (JSON or form body)
  POST /v1/translate   ours: the decode keys a request may set (`requests.DECODE_KEYS`)

A bad request is answered 400 (413 for a body over `serve_max_body_bytes`) with
{"error", "field"} and the server goes on; a full queue is 503 with Retry-After. SIGTERM or
Ctrl-C: stop accepting, answer what is in flight, exit 0.
"""

import errno
import http.server
import json
import signal
import socket
import threading
import time
from typing import Any, Dict, Optional, Tuple

from absl import logging

from t2t_jax.choices import ConfigError
from t2t_jax.inference import modes
from t2t_jax.serving import batcher as batcher_lib
from t2t_jax.serving import requests as requests_lib
from t2t_jax.serving.service import Service

RETRY_AFTER_S = 1


class ServeError(ConfigError):
  """The server cannot start: its address is taken or cannot be bound (one line)."""


class _Server(http.server.ThreadingHTTPServer):
  daemon_threads = False  # server_close joins the handlers: in-flight requests are answered
  block_on_close = True
  request_queue_size = 1024  # listen()'s backlog: socketserver's 5 reset bursts of clients
  service: Optional[Service] = None
  ready = False


class _Handler(http.server.BaseHTTPRequestHandler):
  server: _Server
  server_version = 't2t_jax'

  def log_message(self, format, *args):  # noqa: A002  (http.server's signature)
    logging.debug('%s %s', self.address_string(), format % args)

  def do_GET(self):  # noqa: N802
    path = self.path.split('?')[0]
    self._drain_body()  # libretranslatepy's GET /languages carries an empty form
    if path == '/health':
      self._reply(200 if self.server.ready else 503,
                  {'status': 'ok' if self.server.ready else 'starting'})
    elif path == '/languages':
      self._reply(200, self.server.service.pairs.languages())
    elif path == '/v1/stats':  # how the batcher grouped what it decoded, so far
      batcher = self.server.service.batcher
      self._reply(200, {'batches': {str(k): v for k, v in sorted(batcher.stats.items())},
                        'queued': batcher.queued})
    else:
      self._reply(404, {'error': f'no such path {path!r}: GET /health, /languages, /v1/stats; '
                                 'POST /translate, /v1/translate'})

  def do_POST(self):  # noqa: N802
    path = self.path.split('?')[0]
    if path not in ('/translate', '/v1/translate'):
      self._drain_body()
      self._reply(404, {'error': f'no such path {path!r}: POST /translate, /v1/translate'})
      return
    try:
      body = self._body()
      if not self.server.ready:
        raise batcher_lib.Busy('the server is compiling its decode programs')
      service = self.server.service
      fields = requests_lib.read_fields(self.headers.get('Content-Type', ''), body)
      parse = requests_lib.libretranslate if path == '/translate' else requests_lib.v1
      request = parse(fields, service.pairs, service.config)
      self._reply(200, service.answer(request))
    except requests_lib.RequestError as e:
      self._reply(e.status, e.body())
    except batcher_lib.Busy as e:
      self._reply(503, {'error': f'busy: {e}; retry in {RETRY_AFTER_S} s'},
                  {'Retry-After': str(RETRY_AFTER_S)})
    except (ValueError, ConfigError) as e:  # what a Translator refuses of a request's text
      self._reply(400, {'error': str(e).split('\n')[0]})
    except Exception as e:  # noqa: BLE001  a bug: this request fails, the server goes on
      logging.exception('POST %s failed', path)
      self._reply(500, {'error': f'internal error: {type(e).__name__}: {e}'})

  def _body(self) -> bytes:
    length = self.headers.get('Content-Length')
    try:
      length = int(length) if length is not None else 0
    except ValueError:
      raise requests_lib.RequestError(400, 'Content-Length', f'bad Content-Length {length!r}'
                                      ) from None
    limit = self.server.service.config.serve_max_body_bytes
    if length > limit:
      left = length if length <= 64 << 20 else 0  # read and dropped: an unread body resets
      while left > 0:  # the connection before the client reads the 413
        left -= len(self.rfile.read(min(left, 1 << 20)) or b'x' * left)
      self.close_connection = True
      raise requests_lib.RequestError(413, 'body', f'the body has {length} bytes; '
                                      f'serve_max_body_bytes is {limit}')
    return self.rfile.read(length) if length > 0 else b''

  def _drain_body(self) -> None:
    length = self.headers.get('Content-Length')
    if length and length.isdigit() and 0 < int(length) <= 1 << 16:
      self.rfile.read(int(length))

  def _reply(self, status: int, payload: Any, headers: Optional[Dict[str, str]] = None):
    data = json.dumps(payload, ensure_ascii=False).encode('utf-8')
    try:
      self.send_response(status)
      self.send_header('Content-Type', 'application/json; charset=utf-8')
      self.send_header('Content-Length', str(len(data)))
      for key, value in (headers or {}).items():
        self.send_header(key, value)
      self.end_headers()
      self.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):  # the client left: nothing to answer
      pass


def bind(host: str, port: int) -> _Server:
  """A server bound to host:port; ServeError in one line when it cannot be."""
  try:
    return _Server((host, port), _Handler)
  except OSError as e:
    if e.errno == errno.EADDRINUSE:
      raise ServeError(f'--port={port}: {host}:{port} is in use (another server?); stop it '
                       'or choose another --port') from None
    if isinstance(e, socket.gaierror) or e.errno == errno.EADDRNOTAVAIL:
      raise ServeError(f'--host={host}: not an address of this machine ({e.strerror or e})'
                       ) from None
    raise ServeError(f'--host={host} --port={port}: cannot listen ({e.strerror or e})') from None


def serve(workdir: str, overrides: modes.Overrides, checkpoint: Optional[str], host: str,
          port: int) -> None:
  """Serves `workdir`'s model on host:port until SIGTERM or Ctrl-C (see the module doc)."""
  stop = threading.Event()
  previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
  try:
    httpd = bind(host, port)  # before the model loads: a taken port says so at once
    try:
      httpd.service = service = Service(workdir, overrides, checkpoint)
      _run(httpd, service, stop, host, port)
    finally:
      httpd.server_close()
  finally:
    for sig, handler in previous.items():
      signal.signal(sig, handler)


def _run(httpd: _Server, service: Service, stop: threading.Event, host: str, port: int):
  thread = threading.Thread(target=httpd.serve_forever, name='serve-http', daemon=True)
  thread.start()
  logging.info('listening on http://%s:%d/ (%s, checkpoint %s); compiling the decode '
               'programs before /health says ok', host, port, service.pairs.describe(),
               service.checkpoint)
  try:
    start = time.monotonic()
    lengths = service.warm_up()
    httpd.ready = True
    logging.info('ready: http://%s:%d/ (source lengths %s compiled or loaded in %.1f s)',
                 host, port, ', '.join(map(str, lengths)), time.monotonic() - start)
    while not stop.wait(0.5):
      pass
    logging.info('stopping: no new connections; answering the %d sentences in flight',
                 service.batcher.queued)
  finally:
    httpd.shutdown()  # serve_forever returns: nothing more is accepted
    httpd.server_close()  # joins the handler threads: every request in flight answered
    service.close()
  logging.info('stopped; batches decoded (sentences: count) %s',
               dict(sorted(service.batcher.stats.items())))
