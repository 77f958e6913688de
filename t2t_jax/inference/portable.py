"""Translating sentences with a fixed-shape batched decoder, using numpy and jax only.

Two users share this file, so they translate alike: `translate.Translator` (the jitted beam
search of a live model) and the StableHLO artifact of `--mode=export --format=stablehlo`,
into which this file is copied as `serve.py`. It imports nothing from t2t_jax and no flax:
the artifact runs where only jax, numpy and sentencepiece are installed:

  python ARTIFACT/serve.py < input.txt > output.txt

or, from Python, with the artifact directory on `sys.path`:

  import serve
  translator = serve.ExportedTranslator('ARTIFACT')
  translator.translate(['In the beginning God created the heaven and the earth.'])

Batching: sources are tokenized, EOS appended, cut to max_len - 1 tokens (EOS kept), sorted by
length and decoded `rows` at a time, padded to the smallest source length bucket that fits
(beyond the largest, a multiple of 32, at most max_len); a batch decodes up to
min(source length + max_decode_extra, max_len) positions, each sentence up to its own input
length (with EOS) + max_decode_extra. Empty lines are not decoded.
"""

import concurrent.futures
import glob
import importlib.util
import json
import os
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

PAD_ID = 0  # as t2t_jax.model.transformer: padding, and EOS ends sources and outputs
EOS_ID = 1
ARTIFACT_FORMAT = 't2t_jax-stablehlo'
ARTIFACT_VERSION = 1
MANIFEST = 'manifest.json'
PARAMS = 'params.npz'
VOCAB = 'spm.model'
SOURCE_VOCAB = 'source_spm.model'  # separate vocabularies: the manifest's 'source_vocab'

# (inputs [rows, src_len] int32, max_lengths [rows] int32, max_decode_len) -> [rows, >= 1]
# int32 best hypotheses, each EOS-terminated unless cut.
DecodeBatch = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


def source_length(n: int, buckets: Sequence[int], max_len: int) -> int:
  """The padded source length of a batch whose longest input has `n` tokens (EOS included)."""
  for length in sorted(buckets):
    if n <= length:
      return length
  return min(-(-n // 32) * 32, max_len)


def source_lengths(buckets: Sequence[int], max_len: int) -> List[int]:
  """Every padded source length `source_length` can return for inputs cut to max_len - 1."""
  return sorted({source_length(n, buckets, max_len) for n in range(1, max(max_len, 2))})


def truncation_warning(lines: Sequence[int], max_len: int, shown: int = 10) -> str:
  """'3 inputs longer than max_len=256 tokens were truncated: lines 4, 17, 90', naming the
  first `shown` line numbers and counting the rest ('and 5 more')."""
  listed, more = ', '.join(map(str, lines[:shown])), f' and {len(lines) - shown} more'
  if len(lines) == 1:
    return f'1 input longer than max_len={max_len} tokens was truncated: line {listed}'
  more = more if len(lines) > shown else ''
  return (f'{len(lines)} inputs longer than max_len={max_len} tokens were truncated: '
          f'lines {listed}{more}')


class Batch(NamedTuple):
  """One fixed-shape decode batch: `indices` of its sentences (rows beyond are padding)."""
  indices: List[int]
  inputs: np.ndarray       # [rows, src_len] int32
  max_lengths: np.ndarray  # [rows] int32: per sentence, output tokens with EOS at most
  max_decode_len: int


def encode_sources(sentences: Sequence[str], encode: Callable[[str], List[int]],
                   max_len: int) -> Tuple[Dict[int, List[int]], List[int]]:
  """({i: EOS-terminated ids} of the non-blank sentences, 1-based positions of the inputs cut
  to max_len - 1 tokens, which leaves room for one output position)."""
  limit = max_len - 1
  ids, truncated = {}, []
  for i, sentence in enumerate(sentences):
    if not sentence.strip():
      continue
    tokens = list(encode(sentence)) + [EOS_ID]
    if len(tokens) > limit:
      truncated.append(i + 1)
      tokens = tokens[:limit - 1] + [EOS_ID]
    ids[i] = tokens
  return ids, truncated


def batches(encoded: Dict[int, List[int]], *, rows: int, buckets: Sequence[int],
            max_len: int, max_decode_extra: int) -> Iterator[Batch]:
  """The decode batches of `encoded` (from `encode_sources`), shortest sentences first."""
  order = sorted(encoded, key=lambda i: len(encoded[i]))
  for start in range(0, len(order), rows):
    chunk = order[start:start + rows]
    src_len = source_length(max(len(encoded[i]) for i in chunk), buckets, max_len)
    max_decode_len = min(src_len + max_decode_extra, max_len)
    inputs = np.zeros((rows, src_len), np.int32)
    max_lengths = np.ones((rows,), np.int32)
    for r, i in enumerate(chunk):
      inputs[r, :len(encoded[i])] = encoded[i]
      max_lengths[r] = min(len(encoded[i]) + max_decode_extra, max_decode_len)
    yield Batch(chunk, inputs, max_lengths, max_decode_len)


def default_threads() -> int:
  """How many batches to decode at once: one per usable core on a CPU backend, else 1.

  On a CPU a decode step of a few sentences is hundreds of small operations that leave most
  of the other cores idle, so two batches at once on 2 cores translate the bundled test set
  1.6x faster than one after the other (the same translations); an accelerator runs one
  batch's operations back to back anyway.
  """
  import jax
  if jax.default_backend() != 'cpu':
    return 1
  return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1


def _decoded(decode_batch: DecodeBatch, batch_list: List[Batch], threads: int
             ) -> Iterator[Tuple[Batch, np.ndarray]]:
  """(batch, its best hypotheses) in batch order, `threads` batches decoding at once (jax
  releases the GIL while a compiled program runs)."""
  call = lambda b: np.asarray(decode_batch(b.inputs, b.max_lengths, b.max_decode_len))  # noqa: E731
  return in_threads(call, batch_list, threads)


def in_threads(call: Callable[[Batch], Any], batch_list: List[Batch], threads: int
               ) -> Iterator[Tuple[Batch, Any]]:
  """(batch, call(batch)) in batch order, `threads` calls at once. When the consumer stops
  early (Ctrl-C, SIGTERM, a failed write) the batches not yet started are dropped rather than
  decoded before the process may exit."""
  if threads <= 1 or len(batch_list) <= 1:
    yield from ((b, call(b)) for b in batch_list)
    return
  pool = concurrent.futures.ThreadPoolExecutor(threads)
  try:
    yield from zip(batch_list, pool.map(call, batch_list))
  finally:
    pool.shutdown(wait=True, cancel_futures=True)


def until_eos(row: Sequence[int]) -> List[int]:
  """The ids of one decoded row up to, not including, the first EOS."""
  row = list(row)
  return row[:row.index(EOS_ID)] if EOS_ID in row else row


def translate_ids(sentences: Sequence[str], encode: Callable[[str], List[int]],
                  decode_batch: DecodeBatch, *, rows: int, buckets: Sequence[int],
                  max_len: int, max_decode_extra: int,
                  progress: Optional[Callable[[int, int, float], None]] = None,
                  threads: int = 1) -> Tuple[List[List[int]], List[int]]:
  """Best hypotheses of `sentences`, in input order, as ids without EOS ([] for a blank line),
  and the 1-based positions of the inputs that were cut to fit max_len.

  `progress(done, total, seconds)` is called after every batch; `threads` batches decode at
  once (`default_threads`), which changes no translation.
  """
  encoded, truncated = encode_sources(sentences, encode, max_len)
  outputs: List[List[int]] = [[] for _ in sentences]
  start, done = time.monotonic(), len(sentences) - len(encoded)
  batch_list = list(batches(encoded, rows=rows, buckets=buckets, max_len=max_len,
                            max_decode_extra=max_decode_extra))
  for batch, best in _decoded(decode_batch, batch_list, threads):
    for r, i in enumerate(batch.indices):
      outputs[i] = until_eos(best[r].tolist())
    done += len(batch.indices)
    if progress is not None:
      progress(done, len(sentences), time.monotonic() - start)
  return outputs, truncated


def skip_absent_tpu() -> bool:
  """Names jax's `cpu` platform where libtpu is installed off a TPU VM and nothing else could
  run jax, as `import t2t_jax` does (`t2t_jax._skip_absent_tpu`, whose docstring says why): else
  libtpu prints its failed TPU start-up ('Failed to find host bounds ...', 'E0000 ...') to
  stderr on every serve.py call. This file cannot import t2t_jax (the artifact runs without
  it), so the same decision is made here, by the same tests: only when nobody chose
  (JAX_PLATFORMS, JAX_FORCE_TPU_INIT unset), no TPU device files, libtpu importable and no
  other PJRT plugin, and only before jax's backends start. Returns whether it named cpu."""
  if ('JAX_PLATFORMS' in os.environ or 'JAX_FORCE_TPU_INIT' in os.environ
      or glob.glob('/dev/accel*') or glob.glob('/dev/vfio/[0-9]*')
      or importlib.util.find_spec('libtpu') is None
      or importlib.util.find_spec('jax_plugins') is not None):
    return False
  from importlib import metadata  # pylint: disable=import-outside-toplevel  (only with libtpu)
  if metadata.entry_points(group='jax_plugins'):
    return False
  jax = sys.modules.get('jax')
  if jax is None:
    os.environ['JAX_PLATFORMS'] = 'cpu'
    return True
  started = getattr(sys.modules.get('jax._src.xla_bridge'), 'backends_are_initialized', None)
  if started is None or started() or jax.config.jax_platforms:
    return False
  jax.config.update('jax_platforms', 'cpu')
  return True


def read_manifest(path: str) -> Dict[str, Any]:
  """The manifest of the artifact directory `path`.

  Raises:
    FileNotFoundError: `path` does not exist.
    ValueError: `path` is a file, or a folder without a readable manifest.json (not an
      artifact).
  """
  if not os.path.exists(path):
    raise FileNotFoundError(f'path={path}: no such artifact directory')
  if not os.path.isdir(path):
    raise ValueError(f'path={path} is a file; expected the artifact directory (holding '
                     f'{MANIFEST}, {PARAMS} and {VOCAB})')
  try:
    with open(os.path.join(path, MANIFEST), encoding='utf-8') as f:
      manifest = json.load(f)
  except FileNotFoundError:
    raise ValueError(f'path={path} has no {MANIFEST}: not a StableHLO artifact') from None
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f'path={path}: {MANIFEST} is not JSON ({e})') from None
  if not isinstance(manifest, dict):
    raise ValueError(f'path={path}: {MANIFEST} is not a JSON object')
  return manifest


class ExportedTranslator:
  """Translates with a StableHLO artifact: `jax.export`ed beam search per source length
  bucket, its parameters and its SentencePiece model.

  Args:
    path: the artifact directory (`--mode=export --format=stablehlo --output=PATH`).
    threads: batches decoded at once (None: `default_threads()`).

  Attributes:
    manifest: the artifact's manifest.json (decoding settings, buckets, origin).
    truncated_lines: 1-based positions of the last call's inputs cut to fit max_len.
  """

  def __init__(self, path: str, threads: Optional[int] = None):
    skip_absent_tpu()  # before jax starts its backends (a no-op inside t2t_jax: done there)
    import jax
    self.path = path
    self.threads = threads or default_threads()
    self.manifest = read_manifest(path)
    found = (self.manifest.get('format'), self.manifest.get('version'))
    if found != (ARTIFACT_FORMAT, ARTIFACT_VERSION):
      raise ValueError(f'{path}: a {found} artifact; this runtime reads '
                       f'{(ARTIFACT_FORMAT, ARTIFACT_VERSION)}')
    with np.load(os.path.join(path, PARAMS)) as arrays:
      self._params = tuple(jax.device_put(arrays[name]) for name in self.manifest['params'])
    self._files = {(b['source_length'], b['max_decode_len']): b['file']
                   for b in self.manifest['buckets']}
    self._functions = {}
    self._sp = {}  # file name -> SentencePieceProcessor
    self.truncated_lines: List[int] = []

  def _function(self, src_len: int, max_decode_len: int):
    key = (src_len, max_decode_len)
    if key not in self._functions:
      import jax
      if key not in self._files:
        raise ValueError(f'{self.path} has no decoder for source length {src_len} and output '
                         f'length {max_decode_len}; it has {sorted(self._files)}')
      with open(os.path.join(self.path, self._files[key]), 'rb') as f:
        exported = jax.export.deserialize(bytearray(f.read()))
      self._functions[key] = jax.jit(exported.call)
    return self._functions[key]

  def decode_batch(self, inputs: np.ndarray, max_lengths: np.ndarray,
                   max_decode_len: int) -> np.ndarray:
    """One exported call: `[rows, src_len]` ids -> `[rows, max_decode_len]` best outputs."""
    function = self._function(inputs.shape[1], max_decode_len)
    return np.asarray(function(self._params, inputs, max_lengths))

  def _tokenizer(self, side: str = 'target'):
    """The SentencePiece model of `side`: spm.model, or for the source side the manifest's
    'source_vocab' (separate vocabularies; else spm.model serves both)."""
    name = self.manifest.get('source_vocab', VOCAB) if side == 'source' else VOCAB
    if name not in self._sp:
      import sentencepiece
      self._sp[name] = sentencepiece.SentencePieceProcessor(
          model_file=os.path.join(self.path, name))
    return self._sp[name]

  def translate_ids(self, sentences: Sequence[str],
                    progress: Optional[Callable[[int, int, float], None]] = None
                    ) -> List[List[int]]:
    """The best hypotheses of `sentences` as ids without EOS ([] for a blank line)."""
    m, source = self.manifest, self._tokenizer('source')
    outputs, self.truncated_lines = translate_ids(
        sentences, lambda s: source.encode(s, out_type=int), self.decode_batch,
        rows=m['rows'], buckets=m['bucket_lengths'], max_len=m['max_len'],
        max_decode_extra=m['max_decode_extra'], progress=progress, threads=self.threads)
    return outputs

  def translate(self, sentences: Sequence[str]) -> List[str]:
    """Translations of `sentences`, in order; blank lines stay empty."""
    return [self._tokenizer().decode(ids) for ids in self.translate_ids(sentences)]


def main(argv: Sequence[str]) -> int:
  """`serve.py [ARTIFACT]`: translates stdin to stdout, one sentence a line (ARTIFACT
  defaults to this file's directory)."""
  path = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
  try:
    translator = ExportedTranslator(path)
  except (OSError, ValueError) as e:  # no artifact there: one line, no traceback
    print(f'error: {e}', file=sys.stderr)
    return 1
  lines = sys.stdin.buffer.read().decode('utf-8').split('\n')  # '\n' only, as main.py
  if lines and lines[-1] == '':
    lines.pop()
  lines = [line[:-1] if line.endswith('\r') else line for line in lines]
  for line in translator.translate(lines):
    sys.stdout.write(line + '\n')
  if translator.truncated_lines:
    print(f'{len(translator.truncated_lines)} inputs were cut to max_len: lines '
          f'{translator.truncated_lines}', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
