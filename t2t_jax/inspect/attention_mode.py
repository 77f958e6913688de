"""`--mode=attention`: the attention maps of a trained model for the sentences of a file.

  python main.py --mode=attention --workdir=DIR --input=FILE [--targets=FILE] --output=OUT

Each input line is a source sentence. Without `--targets` it is translated with beam search
(the checkpoint's config: beam_size, length_penalty_alpha, ...) and the translation is the
teacher-forced target; with `--targets` (one line per input line) the given line is. For the
n-th sentence, `OUT/sentence_<n>/` (n from 1, zero-padded) receives:

  encoder_layer<l>.png, decoder_layer<l>.png, encoder_decoder_layer<l>.png
      every layer l = 1..N of every kind: one heatmap per head, axes labelled with pieces;
  lines_encoder_layer<l>.png
      the line view of the encoder self-attention of layer l = `--attention_layer`
      (default N - 1: the paper's Figures 3-5 show layer 5 of 6);
  attention.html
      a self-contained page to flip through kinds, layers and heads;
  attention.npz
      `encoder`, `decoder`, `encoder_decoder`: `[layers, heads, q_len, k_len]` float32 (no
      padding); `source_ids`, `target_ids` (EOS-terminated); `source_pieces`,
      `target_pieces`; `source`, `target` (text).

Layers are counted from 1 in file names, titles and `--attention_layer`, as in the paper; the
arrays are indexed from 0. Decoder positions are labelled with the target piece they output.

Bad input fails before anything is written, in one line naming the flag, file and line: a
missing flag, an empty line, a `--targets` file whose line count differs, a sentence longer
than the model's `max_len`, an `--attention_layer` out of range, an `--output` that is a file
or a non-empty directory (nothing is ever overwritten; an empty directory is used).
"""

import contextlib
import io
import os
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence

import numpy as np
from etils import epath

from t2t_jax.data import vocab_pair, vocabularies
from t2t_jax.inference import modes, translate
from t2t_jax.inspect import attention_html, attention_maps, attention_plots
from t2t_jax.model import transformer as model, variant
from t2t_jax.runtime import multihost
from t2t_jax.storage import outputs, textio
from t2t_jax.storage import workdir as workdir_lib

_ROUND = 16  # sentences are padded to a multiple of this: few compiled shapes, exact maps


class AttentionInputError(ValueError):
  """A bad `--mode=attention` request: the message names the flag, file and line."""


class Sentence(NamedTuple):
  """One sentence's maps and what labels them."""
  source: str
  target: str
  source_ids: List[int]        # EOS-terminated
  target_ids: List[int]        # EOS-terminated
  maps: Dict[str, np.ndarray]  # kind -> [layers, heads, q_len, k_len] float32


def check_output(path: Optional[str]) -> None:
  """Refuses a missing `--output`, an existing file, a non-empty directory and one that
  cannot be written (`outputs.check_writable`)."""
  if not path:
    raise AttentionInputError('--mode=attention needs --output=DIR, a new or empty directory '
                              'for the maps')
  if epath.Path(path).exists() and not epath.Path(path).is_dir():  # local or gs://...
    raise FileExistsError(f'--output={path} is an existing file; expected a directory (new '
                          'or empty) for the maps')
  if epath.Path(path).is_dir() and any(epath.Path(path).iterdir()):
    raise FileExistsError(f'--output={path} is a non-empty directory; choose a new or empty '
                          'one (nothing is overwritten)')
  outputs.check_writable(path)  # in a file, read-only or full: one line, before any work


def _read(flag: str, path: str) -> List[str]:
  if path != '-' and not epath.Path(path).is_file():  # '-': standard input, read to its end
    raise FileNotFoundError(f'--{flag}={path}: no such file')
  lines = textio.read_input(path)
  if not lines:
    raise AttentionInputError(f'--{flag}={path} is empty; expected one sentence per line')
  for number, line in enumerate(lines, 1):
    if not line.strip():
      raise AttentionInputError(f'--{flag}={path} line {number} is empty; every line must '
                                'hold a sentence')
  return lines


def read_sentences(input_path: Optional[str], targets_path: Optional[str]
                   ) -> tuple[List[str], Optional[List[str]]]:
  """(sources, targets or None) from `--input` and `--targets`, checked line by line."""
  if not input_path:
    raise AttentionInputError('--mode=attention needs --input=FILE, one sentence per line')
  if input_path == '-' and targets_path == '-':
    raise AttentionInputError('--input=- and --targets=- cannot both read standard input; '
                              'give one of them as a file')
  sources = _read('input', input_path)
  if targets_path is None:
    return sources, None
  targets = _read('targets', targets_path)
  if len(targets) != len(sources):
    raise AttentionInputError(f'--targets={targets_path} has {len(targets)} lines but '
                              f'--input={input_path} has {len(sources)}; give one target per '
                              'input line')
  return sources, targets


def encode_checked(tokenizer, lines: Sequence[str], where: str, limit: int,
                   max_len: int) -> List[List[int]]:
  """EOS-terminated ids of every line; AttentionInputError naming `where` (e.g.
  '--input=FILE') and the line of the first one longer than `limit` tokens."""
  encoded = []
  for number, line in enumerate(lines, 1):
    ids = tokenizer.encode(line) + [model.EOS_ID]
    if len(ids) > limit:
      raise AttentionInputError(f'{where} line {number}: {len(ids)} tokens with EOS; the model '
                                f'takes at most {limit} (config max_len={max_len})')
    encoded.append(ids)
  return encoded


def check_layer(layer: Optional[int], num_layers: int) -> int:
  """The 1-based layer of the line view: `layer`, or num_layers - 1 (at least 1) if None;
  `num_layers`: the encoder's (its self-attention is the line view's)."""
  if layer is None:
    return max(1, num_layers - 1)
  if not 1 <= layer <= num_layers:
    raise AttentionInputError(f'--attention_layer={layer}: the model has {num_layers} '
                              f'encoder layers; expected 1..{num_layers}')
  return layer


def _padded(length: int, max_len: int) -> int:
  return min(-(-length // _ROUND) * _ROUND, max_len)


def compute_maps(net: model.ModelLike, params, source_ids: Sequence[List[int]],
                 target_ids: Sequence[List[int]], batch: int = 8) -> List[Dict[str, np.ndarray]]:
  """Every sentence's maps ({kind: `[layers, heads, q_len, k_len]`}, padding cropped), in
  order, from the model `net` (a `Transformer` or variant, or the paper's config); sentences
  of the same padded shape share a batch."""
  cfg = model.as_model(net).cfg
  shapes = [(_padded(len(s), cfg.max_len), _padded(len(t), cfg.max_len))
            for s, t in zip(source_ids, target_ids)]
  order = sorted(range(len(shapes)), key=lambda i: shapes[i])
  maps: List[Dict[str, np.ndarray]] = [{} for _ in shapes]
  start = 0
  while start < len(order):
    shape = shapes[order[start]]
    chunk = [i for i in order[start:start + batch] if shapes[i] == shape]
    inputs = np.zeros((len(chunk), shape[0]), np.int32)
    targets = np.zeros((len(chunk), shape[1]), np.int32)
    for row, i in enumerate(chunk):
      inputs[row, :len(source_ids[i])] = source_ids[i]
      targets[row, :len(target_ids[i])] = target_ids[i]
    weights = attention_maps.attention_weights(net, params, inputs, targets)
    for row, i in enumerate(chunk):
      maps[i] = weights.sentence(row, len(source_ids[i]), len(target_ids[i]))
    start += len(chunk)
  return maps


def prepare(config, params, tokenizer, sources: Sequence[str], targets: Optional[Sequence[str]],
            input_path: str, targets_path: Optional[str]) -> List[Sentence]:
  """The maps of every sentence: checks lengths, decodes when no targets are given."""
  net = variant.from_config(config)
  cfg = net.cfg
  # The Translator's limit: a longer source would be decoded truncated.
  source_ids = encode_checked(vocab_pair.side(tokenizer, 'source'), sources,
                              f'--input={input_path}', cfg.max_len - 1, cfg.max_len)
  if targets is None:
    translator = translate.from_config(config, params, tokenizer)
    decoded = translator.translate_ids(sources, progress=translate.print_progress)
    target_ids = [(ids + [model.EOS_ID])[:cfg.max_len] for ids in decoded]
    targets = [tokenizer.decode(ids) for ids in target_ids]
  else:
    target_ids = encode_checked(vocab_pair.side(tokenizer, 'target'), targets,
                                f'--targets={targets_path}', cfg.max_len, cfg.max_len)
  maps = compute_maps(net, params, source_ids, target_ids)
  return [Sentence(*fields) for fields in zip(sources, targets, source_ids, target_ids, maps)]


def _npz_bytes(sentence: Sentence, source_pieces: List[str], target_pieces: List[str]) -> bytes:
  buffer = io.BytesIO()
  np.savez_compressed(buffer, **sentence.maps,
                      source_ids=np.asarray(sentence.source_ids, np.int32),
                      target_ids=np.asarray(sentence.target_ids, np.int32),
                      source_pieces=np.asarray(source_pieces, str),
                      target_pieces=np.asarray(target_pieces, str),
                      source=np.asarray(sentence.source), target=np.asarray(sentence.target))
  return buffer.getvalue()


def write_sentence(directory: str, title: str, sentence: Sentence, tokenizer,
                   lines_layer: int) -> List[str]:
  """Writes one sentence's files (module docstring) into `directory`; returns their paths."""
  # Each side's pieces from its own vocabulary (one shared, or a `VocabPair`'s two).
  source_pieces = vocab_pair.side(tokenizer, 'source').pieces(sentence.source_ids)
  target_pieces = vocab_pair.side(tokenizer, 'target').pieces(sentence.target_ids)
  files = {}
  for kind in attention_maps.KINDS:
    for layer in range(len(sentence.maps[kind])):
      fig = attention_plots.attention_figure(sentence.maps, kind, layer, source_pieces,
                                             target_pieces)
      files[f'{kind}_layer{layer + 1}.png'] = attention_plots.png_bytes(fig)
  fig = attention_plots.attention_figure(sentence.maps, 'encoder', lines_layer - 1,
                                         source_pieces, target_pieces, view='lines')
  files[f'lines_encoder_layer{lines_layer}.png'] = attention_plots.png_bytes(fig)
  files['attention.html'] = attention_html.render_page(
      title, sentence.source, sentence.target, sentence.maps, source_pieces,
      target_pieces).encode('utf-8')
  files['attention.npz'] = _npz_bytes(sentence, source_pieces, target_pieces)
  paths = []
  for name, data in files.items():
    paths.append(os.path.join(directory, name))
    with workdir_lib.writing(paths[-1]):  # a full disk: one line naming the file
      textio.write_bytes_atomic(paths[-1], data)
  return paths


def write_all(output: str, sentences: Sequence[Sentence], tokenizer, lines_layer: int,
              description: str) -> List[str]:
  """Writes every sentence into `output/sentence_<n>/`; returns the directories."""
  width = len(str(len(sentences)))
  directories = []
  for n, sentence in enumerate(sentences, 1):
    directory = os.path.join(output, f'sentence_{n:0{width}d}')
    write_sentence(directory, f'sentence {n} ({description})', sentence, tokenizer, lines_layer)
    directories.append(directory)
  return directories


def run(workdir: str, overrides: modes.Overrides, checkpoint: Optional[str],
        input_path: Optional[str], targets_path: Optional[str], output: Optional[str],
        attention_layer: Optional[int]) -> None:
  """`--mode=attention`: checks the request, then writes the maps of every sentence of
  `input_path` into `output` and prints each sentence's directory and target."""
  check_output(output)
  sources, targets = read_sentences(input_path, targets_path)
  config, inference = modes.load(workdir, checkpoint, overrides)
  layer = check_layer(attention_layer, config.num_encoder_layers or config.num_layers)
  tok = vocabularies.load(workdir, config)
  sentences = prepare(config, inference.params, tok, sources, targets, input_path,
                      targets_path)
  if multihost.is_writer():
    with _removed_on_failure(output):
      directories = write_all(output, sentences, tok, layer, inference.description)
    for directory, sentence in zip(directories, sentences):
      print(f'{directory}\t{sentence.target}')


@contextlib.contextmanager
def _removed_on_failure(output: str) -> Iterator[None]:
  """Removes what the body wrote into `output` when it fails (a full disk, an interrupt):
  `output` itself if it did not exist, else everything in it (it was empty), so the same
  command can be run again."""
  existed = epath.Path(output).exists()
  try:
    yield
  except BaseException:
    root = epath.Path(output)
    made = [root] if not existed else list(root.iterdir()) if root.is_dir() else []
    for path in made:
      try:
        if path.is_dir():
          path.rmtree()
        else:
          path.unlink()
      except OSError:
        pass  # what cannot be removed stays; the error raised says why the run failed
    raise
