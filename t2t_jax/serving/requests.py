"""Request bodies into checked translation requests, or a `RequestError` naming the field.

`POST /translate` is LibreTranslate's: `q` (a string or a list of strings), `source`, `target`,
`format` ('text'), optional `alternatives` (that many more translations of each) and
`api_key` (accepted, unused), as JSON or as a form (`libretranslatepy` sends a form).
`POST /v1/translate` is ours, JSON: the same `q`, `source`, `target`, plus the decode keys a
request may set (`DECODE_KEYS`), checked as the run config's keys are (`config.validate`
and the key table's cross-key rules), and `target_prefix` (a string, or one per `q` item).

Each item of `q` is translated line by line (a line is what the model translates, as
`--mode=decode` reads a file) and its lines joined again with '\\n'.
"""

import dataclasses
import json
import re
from typing import Any, Dict, List, Optional, Tuple
from urllib import parse

import ml_collections

from t2t_jax import config as config_lib
from t2t_jax import key_table
from t2t_jax.choices import ConfigError
from t2t_jax.serving.languages import Pairs

# The run-config keys a /v1/translate request may set, with their JSON types.
DECODE_KEYS = {'nbest': int, 'decode_strategy': str, 'sample_seed': int, 'temperature': float,
               'top_k': int, 'top_p': float}


class RequestError(Exception):
  """A request answered with `status` and {"error": message, "field": field}."""

  def __init__(self, status: int, field: Optional[str], message: str):
    super().__init__(message)
    self.status, self.field = status, field

  def body(self) -> Dict[str, Any]:
    return {'error': str(self), **({'field': self.field} if self.field else {})}


@dataclasses.dataclass(frozen=True)
class Settings:
  """How a request's sentences are decoded: requests of equal settings share batches."""
  source: str
  target: str
  decode_strategy: str
  nbest: int
  sample_seed: int
  temperature: float
  top_k: int
  top_p: float
  prefixed: bool  # a target prefix: the search with prefixes (another program)


@dataclasses.dataclass(frozen=True)
class Request:
  """`texts`: the `q` items; `single`: `q` was a string (the answer is one too);
  `prefixes`: one target prefix per item, or None; `api`: 'libretranslate' or 'v1'."""
  texts: Tuple[str, ...]
  single: bool
  settings: Settings
  prefixes: Optional[Tuple[str, ...]]
  api: str


def read_fields(content_type: str, body: bytes) -> Dict[str, Any]:
  """The fields of a JSON object or a form (`application/x-www-form-urlencoded`) body."""
  kind = (content_type or '').split(';')[0].strip().lower()
  try:
    text = body.decode('utf-8')
  except UnicodeDecodeError as e:
    raise RequestError(400, 'body', f'the body is not UTF-8 ({e})') from None
  if kind == 'application/json' or (kind in ('', 'application/x-www-form-urlencoded')
                                     and text.lstrip().startswith('{')):  # curl -d '{...}'
    try:
      fields = json.loads(text) if text.strip() else {}
    except ValueError as e:
      raise RequestError(400, 'body', f'malformed JSON: {e}') from None
    if not isinstance(fields, dict):
      raise RequestError(400, 'body', f'expected a JSON object, got {type(fields).__name__}')
    return fields
  form = parse.parse_qs(text, keep_blank_values=True)
  return {k: (v if k == 'q' and len(v) > 1 else v[-1]) for k, v in form.items()}


def _texts(fields: Dict[str, Any]) -> Tuple[Tuple[str, ...], bool]:
  if 'q' not in fields:
    raise RequestError(400, 'q', "missing 'q': the text to translate, a string or a list")
  q = fields['q']
  if isinstance(q, str):
    return (q,), True
  if isinstance(q, list) and all(isinstance(x, str) for x in q):
    return tuple(q), False
  raise RequestError(400, 'q', f"'q' must be a string or a list of strings, got {_kind(q)}")


def _kind(value: Any) -> str:
  if isinstance(value, list):
    return 'a list with ' + ', '.join(sorted({type(x).__name__ for x in value} - {'str'}))
  return type(value).__name__


def _pair(fields: Dict[str, Any], pairs: Pairs) -> Tuple[str, str]:
  source, target = (fields.get(k) for k in ('source', 'target'))
  for name, value in (('source', source), ('target', target)):
    if not isinstance(value, str) or not value:
      raise RequestError(400, name, f"missing '{name}': a language code ({pairs.describe()})")
  if source == 'auto' and len(pairs.sources) == 1:  # nothing to detect: the model has one
    source = pairs.sources[0]
  if source not in pairs.sources:
    raise RequestError(400, 'source', f'source {source!r}: this model translates from '
                       f'{", ".join(pairs.sources[:20])}')
  if not pairs.has(source, target):
    raise RequestError(400, 'target', f'target {target!r}: this model translates {source} '
                       f'into {", ".join(pairs.targets(source)[:20])}')
  return source, target


def _integer(fields: Dict[str, Any], name: str, default: int) -> int:
  value = fields.get(name, default)
  try:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
      raise ValueError
    return int(value)
  except (TypeError, ValueError):
    raise RequestError(400, name, f'{name!r} must be an integer, got {value!r}') from None


def libretranslate(fields: Dict[str, Any], pairs: Pairs,
                   config: ml_collections.ConfigDict) -> Request:
  """LibreTranslate's `/translate` request."""
  texts, single = _texts(fields)
  source, target = _pair(fields, pairs)
  if fields.get('format', 'text') != 'text':
    raise RequestError(400, 'format', f"format {fields.get('format')!r}: this server "
                       "translates 'text' only")
  alternatives = _integer(fields, 'alternatives', 0)
  if alternatives < 0:
    raise RequestError(400, 'alternatives', f"'alternatives' must be >= 0, got {alternatives}")
  return Request(texts, single, _settings(config, source, target, {'nbest': 1 + alternatives}
                                          if alternatives else {}, False), None,
                 'libretranslate')


def v1(fields: Dict[str, Any], pairs: Pairs, config: ml_collections.ConfigDict) -> Request:
  """Our `/v1/translate` request."""
  texts, single = _texts(fields)
  source, target = _pair(fields, pairs)
  unknown = sorted(set(fields) - {'q', 'source', 'target', 'target_prefix', 'format'}
                   - set(DECODE_KEYS))
  if unknown:
    raise RequestError(400, unknown[0], f'unknown field {unknown[0]!r}; a request sets q, '
                       f'source, target, target_prefix and {", ".join(DECODE_KEYS)}')
  keys = {}
  for name, kind in DECODE_KEYS.items():
    if name in fields:
      value = fields[name]
      if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
      if type(value) is not kind:  # noqa: E721  (bool is no int here)
        raise RequestError(400, name, f'{name!r} must be a JSON {kind.__name__}, got '
                           f'{type(value).__name__}')
      keys[name] = value
  prefixes = fields.get('target_prefix')
  if prefixes is not None:
    if isinstance(prefixes, str):
      prefixes = [prefixes] * len(texts)
    if not (isinstance(prefixes, list) and len(prefixes) == len(texts)
            and all(isinstance(p, str) for p in prefixes)):
      raise RequestError(400, 'target_prefix', "'target_prefix' must be a string or a list of "
                         f'strings, one per q item ({len(texts)})')
    prefixes = tuple(prefixes)
  return Request(texts, single, _settings(config, source, target, keys, prefixes is not None),
                 prefixes, 'v1')


# Settings already checked, by (config, direction, keys, prefixed): validating a copy of the
# run config costs ~1.8 ms of the GIL, per request without this (the bad ones are not kept).
_CHECKED: Dict[Tuple, Tuple[ml_collections.ConfigDict, Settings]] = {}
_CHECKED_MAX = 4096


def _settings(config: ml_collections.ConfigDict, source: str, target: str,
              keys: Dict[str, Any], prefixed: bool) -> Settings:
  """The run's decoding settings with a request's `keys`, checked as a command line's."""
  key = (id(config), source, target, tuple(sorted(keys.items())), prefixed)
  known = _CHECKED.get(key)
  if known is not None and known[0] is config:
    return known[1]
  settings = _check(config, source, target, keys, prefixed)
  if len(_CHECKED) >= _CHECKED_MAX:
    _CHECKED.clear()
  _CHECKED[key] = (config, settings)
  return settings


def _check(config: ml_collections.ConfigDict, source: str, target: str,
           keys: Dict[str, Any], prefixed: bool) -> Settings:
  checked = ml_collections.ConfigDict(config.to_dict())
  checked.update(keys)
  try:
    config_lib.validate(checked)
    for key, _, why in key_table.no_effect(checked):
      if key in keys:
        raise ConfigError(f'{key!r}={keys[key]!r} has no effect ({why})')
  except ConfigError as e:
    named = re.match(r"config key '(\w+)'|'(\w+)'=", str(e))
    field = next((n for n in (named.groups() if named else ()) if n), None) or next(
        (k for k in keys if k in str(e)), None)
    raise RequestError(400, field, str(e).replace('config key ', '')) from None
  if checked.decode_strategy == 'beam' and checked.nbest > checked.beam_size:
    raise RequestError(400, 'nbest', f'nbest={checked.nbest}: at most beam_size='
                       f'{checked.beam_size} translations of a beam search')
  if checked.decode_strategy == 'greedy' and checked.nbest > 1:
    raise RequestError(400, 'nbest', "nbest > 1 with decode_strategy='greedy' (several "
                       "samples: decode_strategy='sample')")
  return Settings(source, target, checked.decode_strategy, checked.nbest, checked.sample_seed,
                  checked.temperature, checked.top_k, checked.top_p, prefixed)

