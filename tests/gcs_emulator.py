"""An offline Google Cloud Storage for tests: gcp-storage-emulator (a GCS JSON API in
Python, in memory) served on 127.0.0.1 from a thread of the test process, with every client
the project uses pointed at it:

* gcsfs (etils.epath's gs:// backend without TensorFlow) and google-cloud-storage
  (tensorboardX's gs:// writer): `STORAGE_EMULATOR_HOST`;
* tensorstore (orbax's arrays): `TENSORSTORE_GCS_HTTP_URL`, with a fixed OAuth token
  (`GOOGLE_AUTH_TOKEN_FOR_TESTING`) instead of looking for credentials;
* array_record's GCS reader (google-cloud-cpp): `CLOUD_STORAGE_EMULATOR_ENDPOINT`.

The emulator's media downloads lack the `x-goog-generation` header that real GCS sends and
tensorstore's OCDBT driver (orbax's default format) needs to re-read a manifest it wrote
("Malformed StorageGeneration"); `_add_generation_headers` adds it. The emulator ignores
write preconditions (`ifGenerationMatch`), so races between writers are not tested here.

The packages come from requirements-test.txt; without them the tests using the `gcs`
fixture are skipped.
"""

import os
import socket
from http import HTTPStatus
from typing import Dict, Iterator

import pytest

BUCKET = 'bucket'


def client_env(url: str) -> Dict[str, str]:
  """Environment variables that send every GCS client to the emulator at `url`."""
  return {
      'STORAGE_EMULATOR_HOST': url,
      'TENSORSTORE_GCS_HTTP_URL': url,
      'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'test-token',
      'CLOUD_STORAGE_EMULATOR_ENDPOINT': url,
      # gcsfs would ask the (absent) control API for the bucket type, warning at each call.
      'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false',
      # The emulator answers one request at a time; keep tensorstore's queue short.
      'TENSORSTORE_GCS_REQUEST_CONCURRENCY': '4',
  }


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _forget_clients() -> None:
  """Drops cached gcsfs instances, so the next one reads the environment anew."""
  import gcsfs
  from etils.epath import backend
  gcsfs.GCSFileSystem.clear_instance_cache()
  backend.fsspec_backend._get_filesystem.cache_clear()  # pylint: disable=protected-access


def _add_generation_headers(server_lib) -> None:
  """Makes the emulator's media downloads carry the object's generation headers, as GCS's
  do (idempotent)."""
  from gcp_storage_emulator.handlers import objects
  download = objects.download
  if getattr(download, 'with_generation', False):
    return

  def with_generation(request, response, storage, *args, **kwargs):
    download(request, response, storage, *args, **kwargs)
    if response.status in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT):
      obj = storage.get_file_obj(request.params['bucket_name'], request.params['object_id'])
      response['x-goog-generation'] = str(obj['generation'])
      response['x-goog-metageneration'] = str(obj['metageneration'])

  with_generation.with_generation = True
  objects.download = with_generation  # objects.get (alt=media) calls it by this name
  for _, methods in server_lib.HANDLERS:
    for method, handler in methods.items():
      if handler is download:
        methods[method] = with_generation


def _restore(saved: Dict[str, str]) -> None:
  for key, value in saved.items():
    if value is None:
      os.environ.pop(key, None)
    else:
      os.environ[key] = value


@pytest.fixture(scope='session')
def gcs() -> Iterator[str]:
  """The emulator's URL, with this process's environment pointed at it (bucket `bucket`)."""
  url = f'http://127.0.0.1:{_free_port()}'
  saved = {k: os.environ.get(k) for k in client_env(url)}
  os.environ.update(client_env(url))  # before gcsfs is imported: it reads some at import
  try:
    pytest.importorskip('gcsfs')
    server_lib = pytest.importorskip('gcp_storage_emulator.server')
    _add_generation_headers(server_lib)
    server = server_lib.create_server('127.0.0.1', int(url.rsplit(':', 1)[1]), in_memory=True,
                                      default_bucket=BUCKET)
  except BaseException:
    _restore(saved)
    raise
  server.start()
  _forget_clients()
  try:
    yield url
  finally:
    _restore(saved)
    _forget_clients()
    server.stop()


@pytest.fixture
def gcs_dir(gcs, request) -> str:
  """A fresh gs:// folder for one test (named after it)."""
  # Another emulator's address here would send this process and its children apart.
  assert os.environ.get('STORAGE_EMULATOR_HOST') == gcs, 'more than one emulator'
  return f'gs://{BUCKET}/{request.node.name.replace("[", "_").replace("]", "")}'
