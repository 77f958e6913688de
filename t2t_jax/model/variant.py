"""The model a run config names: `config.model`, '' for the paper's Transformer, else a factory.

A variant written in Python (docs/architecture.md, "A new model variant") is trained, decoded,
evaluated, exported and inspected from the command line by naming a function that builds it,
`factory(cfg: TransformerConfig) -> Transformer`:

  --config.model=my_variants:swiglu            a module importable from sys.path or the
                                               current folder, and an attribute of it
  --config.model=path/to/file.py:swiglu        a Python file, relative to the current folder

The checkpoint's config records the spec (`config.MODEL_KEYS`), so every mode that reads the run
builds the same model. `load_factory` imports a module once (Python's own cache for a module; a
file is kept in `sys.modules` under a name made from its absolute path), and says in one line
what is wrong with a spec that names no usable factory (`VariantError`).
"""

import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import traceback
from typing import Callable, Optional

from t2t_jax.choices import ConfigError
from t2t_jax.model import param_paths
from t2t_jax.model.transformer import Transformer, TransformerConfig, param_shapes

Factory = Callable[[TransformerConfig], Transformer]
FORM = "'module:factory' or 'path/to/file.py:factory'"


class VariantError(ConfigError):
  """`config.model` names no usable factory. `spec` is the value, `reason` what is wrong with
  it (without the spec), `missing` whether the module or file was not found (rather than found
  and wrong): a run trained elsewhere then needs the folder that has it."""

  def __init__(self, spec: str, reason: str, missing: bool = False,
               key: Optional[str] = 'model'):
    hint = f': {moved_hint(spec, key=key)}' if missing else ''
    # From a run config (key: its config key), the flag that set it; from a direct
    # `load_factory(spec)` call (key None), the argument.
    named = f'--config.{key}={spec}' if key else f'load_factory: spec {spec!r}'
    super().__init__(f'{named} cannot be used ({reason}){hint}')
    self.spec, self.reason, self.missing, self.key = spec, reason, missing, key


def _is_file(where: str) -> bool:
  return where.endswith('.py') or '/' in where or os.sep in where


def _dotted(name: str) -> bool:
  return all(part.isidentifier() for part in name.split('.'))


def _raised(error: BaseException) -> str:
  """'TypeError: message (file line N)': the error and the last line of the user's code it
  passed through (frames of this file are where it was called from, not where it failed)."""
  if isinstance(error, SyntaxError):  # where is the line it could not read, not a frame
    return f'SyntaxError: {error.msg} ({error.filename} line {error.lineno})'
  frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename != __file__]
  at = f' ({frames[-1].filename} line {frames[-1].lineno})' if frames else ''
  return f'{type(error).__name__}: {error}{at}'


raised = _raised  # public: training/optim.py reports an optimizer factory's error alike


def _failed(spec: str, what: str, error: BaseException, key: str = 'model') -> VariantError:
  """The one line of a module or file that raised while it ran: the error and where."""
  return VariantError(spec, f'{what} fails to import: {_raised(error)}', key=key)


def _import_module(spec: str, name: str, key: str = 'model'):
  """`import name`, from sys.path and the current folder (`python main.py` puts main.py's
  folder first on sys.path, not the current one; appended, so nothing installed is shadowed)."""
  cwd = os.getcwd()
  if '' not in sys.path and cwd not in sys.path:
    sys.path.append(cwd)
  try:
    return importlib.import_module(name)
  except ModuleNotFoundError as e:
    if e.name and (name == e.name or name.startswith(e.name + '.')):  # not a dependency of it
      raise VariantError(spec, str(e), missing=True, key=key) from None
    raise _failed(spec, name, e, key) from None
  except Exception as e:  # noqa: BLE001  a user's module can raise anything while it runs
    raise _failed(spec, name, e, key) from None


def _import_file(spec: str, path: str, key: str = 'model'):
  """The module of the Python file `path` (relative to the current folder), run once: kept in
  `sys.modules` under a name made from its absolute path (dataclasses, flax modules among
  them, look their module up there while the file runs)."""
  full = os.path.abspath(os.path.expanduser(path))
  if not path.endswith('.py'):
    raise VariantError(spec, f'{path} is not a .py file; expected {FORM}', key=key)
  recorded = None if os.path.isfile(full) else _RECORDED.get(full)
  if not os.path.isfile(full) and recorded is None:
    raise VariantError(spec, f'no such file {full}', missing=True, key=key)
  name = '_t2t_jax_variant_' + hashlib.sha256(full.encode()).hexdigest()[:16]
  if name in sys.modules:
    return sys.modules[name]
  if recorded is None:
    file_spec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(file_spec)
    run = file_spec.loader.exec_module
  else:  # the run's own copy of a file that has moved (`remember`): its recorded text
    module = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(name, None))
    module.__file__ = full
    run = lambda m: exec(compile(recorded['text'], full, 'exec'), m.__dict__)  # noqa: E731,S102
  sys.modules[name] = module
  try:
    run(module)
  except Exception as e:  # noqa: BLE001  as in _import_module
    del sys.modules[name]
    raise _failed(spec, full, e, key) from None
  return module


# A factory file's source is recorded with the checkpoints (`source_record`), up to this size,
# so that a run never needs the file again once it has a checkpoint (the workdir is
# self-contained): `remember` hands a checkpoint's record to `_import_file`, which runs the
# recorded text when the file is no longer where it was.
_TEXT_LIMIT = 1 << 20
_RECORDED = {}  # absolute file path -> its checkpoint's `source_record`


def remember(record, typed: str = '') -> None:
  """Makes a checkpoint's factory record (`source_record`, with its `text`) loadable in this
  process when its file has moved or gone: `load_factory` of the recorded path then runs the
  recorded source (an edited file that is still there is the file, as `source_change` says).
  `typed`: the spec a command line gives again; when its file is gone too and it names the
  same file name and factory as the record, it is the record's provenance and loads the same.
  None, or a record without text (a module, a checkpoint from before texts), does nothing."""
  if not (record and record.get('file') and isinstance(record.get('text'), str)):
    return
  _RECORDED.setdefault(os.path.abspath(record['file']), record)
  where, _, attr = (typed or '').rpartition(':')
  if where and _is_file(where) and attr == str(record.get('spec', '')).rpartition(':')[2]:
    full = os.path.abspath(os.path.expanduser(where))
    if os.path.basename(full) == os.path.basename(record['file']) and not os.path.isfile(full):
      _RECORDED.setdefault(full, record)


def load_factory(spec: str, key: Optional[str] = None) -> Callable:
  """The callable `spec` names ('module:attr' or 'path/to/file.py:attr'; attr may be dotted).

  `key` is the config key the spec came from, named in the error (`--config.optimizer` loads
  its factory here too, `training/optim.py`); None (a direct call): the error names `spec`.

  Raises:
    VariantError (a ConfigError): one line naming `spec` and what is wrong: its form, a
      module or file not found (with the ImportError's message), one that fails while it runs,
      an attribute missing, or one that is not callable.
  """
  if not isinstance(spec, str):
    raise TypeError(f'load_factory: spec is a {type(spec).__name__}; expected a string, '
                    f'{FORM}')
  where, sep, attr = spec.rpartition(':')
  if not sep or not where or not _dotted(attr):
    raise VariantError(spec, f'expected {FORM}', key=key)
  if _is_file(where):
    module = _import_file(spec, where, key)
  elif _dotted(where):
    module = _import_module(spec, where, key)
  else:
    raise VariantError(spec, f'{where!r} is neither a module name nor a .py file; expected '
                       f'{FORM}', key=key)
  factory = module
  for part in attr.split('.'):
    if not hasattr(factory, part):
      raise VariantError(spec, f'cannot import name {attr!r} from {where}', key=key)
    factory = getattr(factory, part)
  if not callable(factory):
    what = 'the model config' if key in ('model', None) else f'what --config.{key} is given'
    raise VariantError(spec, f'{attr} is a {type(factory).__name__}, not a function of {what}',
                       key=key)
  return factory


def build(spec: str, cfg: TransformerConfig) -> Transformer:
  """`factory(cfg)` of the factory `spec` names, checked to be a `Transformer` (or subclass)
  with a `TransformerConfig`; the factory may change fields of `cfg` (e.g. a head count), the
  model it returns is used as it is.

  Raises:
    VariantError: as `load_factory`, or a factory that takes other arguments than the config,
      raises (its error and the line of the user's code it came from) or returns something
      other than a Transformer; each in one line naming `spec`.
  """
  factory = load_factory(spec, key='model')
  try:
    inspect.signature(factory).bind(cfg)
  except TypeError:
    raise VariantError(spec, 'the factory must take one argument, the TransformerConfig'
                       ) from None
  except ValueError:
    pass  # no signature to read (a builtin): the call says
  try:
    net = factory(cfg)
  except Exception as e:  # noqa: BLE001  a user's factory can raise anything
    raise VariantError(spec, f'the factory raised {_raised(e)}') from None
  if not isinstance(net, Transformer) or not isinstance(net.cfg, TransformerConfig):
    raise VariantError(spec, f'the factory returned a {type(net).__name__}; expected a t2t_jax '
                       'Transformer of a TransformerConfig, e.g. Transformer(cfg, '
                       'feed_forward=...)')
  return net


def from_config(config, **cfg_overrides) -> Transformer:
  """The model of a run config (`configs/default.py` keys): `Transformer(cfg)`, the paper's,
  for `config.model == ''`, else what its factory builds from `cfg` (`build`); `cfg` is
  `TransformerConfig.from_config(config, **cfg_overrides)`.

  Raises:
    ConfigError: a key of `config` is invalid, or (`VariantError`) `config.model` names no
      usable factory.
  """
  cfg = TransformerConfig.from_config(config, **cfg_overrides)
  spec = getattr(config, 'model', '')  # a config of before the key: the paper's
  return build(spec, cfg) if spec else Transformer(cfg)


# What decoding, scoring and export call on a built model beyond training's forward pass: the
# pre-softmax matrix once per decoded batch, and the embedding tables the exports write.
LATER_METHODS = ('vocab_transposed', 'embedding_tables')


def check_later_methods(net: Transformer, spec: str = '') -> None:
  """Refuses, before a run trains, a model on which a later mode would fail: each of
  `LATER_METHODS` is traced abstractly (`jax.eval_shape`: nothing is computed) on the model
  however it was built (a subclass whose `setup` makes its own embedding without
  `transposed()` passes the parts' checks).

  Raises:
    VariantError: one line naming the method, what it raised, and the mode that needs it.
  """
  import jax  # pylint: disable=import-outside-toplevel
  params = param_shapes(net)
  for method in LATER_METHODS:
    try:
      jax.eval_shape(lambda p, m=method: net.apply({'params': p}, method=getattr(type(net), m)),
                     params)
    except Exception as e:  # noqa: BLE001  a user's module can raise anything
      what = spec or type(net).__name__
      raise VariantError(what, f'the model it builds fails in {method}(), which decoding, '
                         f'scoring and export call: {_raised(e)}') from None


def source_record(spec: str):
  """What a checkpoint records of the factory `spec` names, so that a later edit of its source
  is noticed and a moved file is not needed: `{'spec', 'file' (the absolute path of the
  module's file), 'sha256' (of its bytes), 'text' (its source, for a UTF-8 file of at most
  1 MiB: `remember`)}`; None for the paper's model ('') or a module without a file. Only the
  module the spec names is hashed and kept: an edit of a module it imports goes unnoticed (the
  parameter check still catches one that renames or reshapes parameters)."""
  if not spec:
    return None
  where = spec.rpartition(':')[0]
  module = _import_file(spec, where) if _is_file(where) else _import_module(spec, where)
  path = getattr(module, '__file__', None)
  if path and not os.path.isfile(path) and os.path.abspath(path) in _RECORDED:
    return dict(_RECORDED[os.path.abspath(path)], spec=spec)  # run from its recorded text
  if not path or not os.path.isfile(path):
    return None
  with open(path, 'rb') as f:
    data = f.read()
  record = {'spec': spec, 'file': os.path.abspath(path), 'sha256': hashlib.sha256(data).hexdigest()}
  try:
    if len(data) <= _TEXT_LIMIT:
      record['text'] = data.decode('utf-8')
  except UnicodeDecodeError:
    pass
  return record


def source_change(saved, spec: str):
  """How the factory source a checkpoint recorded (`saved`, from `source_record`; None for a
  checkpoint without one) differs from the file `spec` loads now, or None."""
  if not saved or not saved.get('sha256'):
    return None
  now = source_record(spec)
  if now is None or now['sha256'] == saved['sha256']:
    return None
  moved = f' (then {saved.get("file")})' if saved.get('file') != now['file'] else ''
  return (f'{now["file"]}{moved} has changed since it was recorded (sha256 '
          f'{saved["sha256"][:12]}... then, {now["sha256"][:12]}... now)')


def same_source(saved_source, saved: str, spec: str) -> bool:
  """Whether the file factory spec `spec` names is the one a checkpoint recorded for its spec
  `saved` (`saved_source`, from `source_record`), moved or copied elsewhere: the same factory
  name and the same sha256 of the file's bytes (a file gone is its record, when `remember`
  was given it). False when either cannot be told (no record, a module spec, a file that
  cannot be read)."""
  if not saved_source or not saved_source.get('sha256') or not saved or not spec:
    return False
  where, _, attr = spec.rpartition(':')
  if attr != saved.rpartition(':')[2] or not _is_file(where):
    return False
  path = os.path.abspath(os.path.expanduser(where))
  if not os.path.isfile(path) and path in _RECORDED:  # gone: the record it loads (`remember`)
    return _RECORDED[path].get('sha256') == saved_source['sha256']
  return file_sha256(spec) == saved_source['sha256']


def file_sha256(spec: str) -> Optional[str]:
  """The sha256 of the file a 'path/file.py:factory' spec names; None for a module spec or
  a file that cannot be read."""
  where = (spec or '').rpartition(':')[0]
  if not where or not _is_file(where):
    return None
  try:
    with open(os.path.abspath(os.path.expanduser(where)), 'rb') as f:
      return hashlib.sha256(f.read()).hexdigest()
  except OSError:
    return None


def moved_hint(spec: str, saved_source=None, key: Optional[str] = 'model') -> str:
  """The advice for a factory spec that cannot be loaded here: an absolute file spec (as a
  checkpoint records it) names where to point its flag (`key`: `--config.model`, whose file
  of the recorded content is accepted, or `--config.optimizer`); a module or a relative file,
  the folder or PYTHONPATH that has it."""
  where, _, attr = spec.rpartition(':')
  if not _is_file(where) or not os.path.isabs(os.path.expanduser(where)):
    return 'run from the folder that has it, or put it on PYTHONPATH'
  digest = (saved_source or {}).get('sha256')
  same = f' (sha256 {digest[:12]}...)' if digest else ''
  flag = f'--config.{key or "model"}=NEW/PATH/{os.path.basename(where)}:{attr}'
  if key not in ('model', None):  # only the model's factory source is recorded and compared
    return f'if {os.path.basename(where)} moved, name its new place with {flag}'
  return (f'if {os.path.basename(where)} moved, name its new place with {flag}; a file with '
          f'the recorded content{same} is accepted')


def parameter_mismatch(net: Transformer, found) -> str:
  """'' when the parameter tree `found` (arrays or shape structs) has exactly the paths and
  shapes `net` initialises; else which paths are missing, unexpected or of another shape."""
  return tree_mismatch(param_shapes(net), found)


def tree_mismatch(expected, found) -> str:
  """'' when the trees `expected` (the model's) and `found` (a checkpoint's) have the same
  paths and shapes, else which parameter paths `found` lacks ('missing from the checkpoint'),
  has beyond `expected` ('unexpected') or holds in another shape, in one line."""
  expected, actual = _shapes(expected), _shapes(found)
  missing = sorted(set(expected) - set(actual))
  unexpected = sorted(set(actual) - set(expected))
  reshaped = sorted(p for p in set(expected) & set(actual) if expected[p] != actual[p])
  shapes = ', '.join(f'{p} {actual[p]} (the model: {expected[p]})' for p in reshaped)
  parts = ([f'missing from the checkpoint: {", ".join(missing)}'] if missing else []) + (
      [f'unexpected (not in the model): {", ".join(unexpected)}'] if unexpected else []) + (
      [f'of another shape: {shapes}'] if reshaped else [])
  return '; '.join(parts)


def _shapes(tree):
  """{'encoder/layer_0/ffn/wi/kernel': shape} of a parameter tree."""
  return param_paths.shapes_by_path(tree)
