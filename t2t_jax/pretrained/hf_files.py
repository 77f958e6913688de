"""Reading a transformers model directory without PyTorch: `config.json`, the weights
(`model.safetensors` through safetensors' numpy API; `pytorch_model.bin` only where torch is
installed) and the tokenizer's files. Every problem is one line naming the file or field."""

import hashlib
import json
import os
from typing import Any, Dict, Tuple

import numpy as np

WEIGHTS = ('model.safetensors', 'pytorch_model.bin')


class PretrainedError(ValueError):
  """A transformers directory that cannot be imported (main.py: one line `error: ...`)."""


def read_json(folder: str, name: str) -> Any:
  """`<folder>/<name>` parsed, or PretrainedError naming the file and what is wrong."""
  path = os.path.join(folder, name)
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except FileNotFoundError:
    raise PretrainedError(f'--input={folder}: no {name}; expected a transformers model '
                          'directory (as save_pretrained writes it)') from None
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise PretrainedError(f'{path} is not JSON ({e})') from None


def need_file(folder: str, name: str, what: str) -> str:
  """The path of `<folder>/<name>`, or PretrainedError saying it is missing and what it is."""
  path = os.path.join(folder, name)
  if not os.path.isfile(path):
    raise PretrainedError(f'--input={folder}: no {name} ({what})')
  return path


def field(config: Dict[str, Any], name: str, kind: type, where: str) -> Any:
  """config.json's `name`, checked to be of `kind` (an int is no bool)."""
  if name not in config:
    raise PretrainedError(f'{where}: no field {name!r}')
  value = config[name]
  if kind is float and isinstance(value, int) and not isinstance(value, bool):
    value = float(value)
  if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
    raise PretrainedError(f'{where}: field {name!r} is {value!r}; expected {kind.__name__}')
  return value


def read_weights(folder: str) -> Tuple[Dict[str, np.ndarray], str, str]:
  """(name -> float32 array, the weights file's path, its sha256). safetensors needs no torch;
  a `.bin` is read with torch where it is installed, else refused in one line. A sharded
  checkpoint (`model.safetensors.index.json`, `pytorch_model.bin.index.json`, as
  `save_pretrained` writes a large model) is read shard by shard; its path is the index's, its
  sha256 that of the index's bytes followed by each shard's, in the index's order."""
  for name in WEIGHTS + tuple(f'{w}.index.json' for w in WEIGHTS):
    path = os.path.join(folder, name)
    if os.path.isfile(path):
      break
  else:
    raise PretrainedError(f'--input={folder}: no {" or ".join(WEIGHTS)} (the model\'s weights, '
                          'or their .index.json when sharded)')
  files = [path]
  if name.endswith('.index.json'):
    weight_map = read_json(folder, name).get('weight_map')
    if not isinstance(weight_map, dict) or not weight_map or not all(
        isinstance(v, str) for v in weight_map.values()):
      raise PretrainedError(f'{path}: expected a "weight_map" from tensor names to shard files')
    shards = list(dict.fromkeys(weight_map.values()))
    files += [need_file(folder, shard, f'a shard {name} names') for shard in shards]
  digest = hashlib.sha256()
  for each in files:
    with open(each, 'rb') as f:
      for chunk in iter(lambda: f.read(1 << 24), b''):
        digest.update(chunk)
  tensors = {}
  for each in files[1:] or files:
    tensors.update(_read_tensors(each))
  return ({k: np.asarray(v, np.float32) for k, v in tensors.items()}, path,
          digest.hexdigest())


def _read_tensors(path: str) -> Dict[str, Any]:
  """The tensors of one weights file (`.safetensors` with numpy, `.bin` with torch)."""
  if path.endswith('.safetensors'):
    from safetensors import SafetensorError  # pylint: disable=import-outside-toplevel
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    try:
      return load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
      raise PretrainedError(f'{path} cannot be read as safetensors ({e})') from None
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise PretrainedError(f'{path} is a PyTorch pickle, which needs torch (not installed); '
                          'save the model with safe_serialization=True (model.safetensors) '
                          'or install torch') from None
  state = torch.load(path, map_location='cpu', weights_only=True)
  return {k: v.float().numpy() for k, v in state.items()}
