"""The whole loop from Python, without main.py (issue 63, 4): each function is the code path of
its mode, so `translate` gives `--mode=decode`'s lines byte for byte, `evaluate` its JSON.

    import t2t_jax
    config = t2t_jax.load_config('configs/quickstart.py', num_train_steps=400)
    t2t_jax.train(config, '/tmp/run')
    print(t2t_jax.evaluate('/tmp/run', split='test')['bleu'])
    print(t2t_jax.translate('/tmp/run', ['In the beginning God created the heaven.']))
    print(t2t_jax.score('/tmp/run', ['In the beginning'], ['En el principio']))

Keys are the config's (`configs/default.py`): `load_config(path, **keys)` applies them as
`--config.KEY=VALUE` does; `evaluate`, `translate` and `score` take the keys a mode that reads a
run takes (decoding and data keys; a model key other than the run's is refused, as on the
command line). A bad key or value raises `ConfigError`, one line naming it.
"""

import importlib.util
import os
import signal
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence

import ml_collections

from t2t_jax import config as config_lib
from t2t_jax import key_table
from t2t_jax.configs import default as default_config
from t2t_jax.inference import modes, score_mode
from t2t_jax.storage import layout
from t2t_jax.training import summary, train as train_lib


def load_config(path: str, **keys: Any) -> ml_collections.ConfigDict:
  """The config of `path` ('configs/wmt_base.py', or 'configs/table3.py:B1' for a file whose
  `get_config` takes an argument) with `keys` set, checked (`config.validate`)."""
  where, _, arg = path.partition(':') if path.count(':') == 1 and not path.startswith(
      ('gs://', 's3://')) else (path, '', '')
  if not os.path.isfile(where):
    raise config_lib.ConfigError(f'load_config({path!r}): no such config file {where}')
  spec = importlib.util.spec_from_file_location(
      f't2t_jax_config_{os.path.splitext(os.path.basename(where))[0]}', where)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(arg) if arg else module.get_config()
  return _with(config, keys)


def _with(config: ml_collections.ConfigDict, keys: Dict[str, Any]) -> ml_collections.ConfigDict:
  config_lib.unknown_keys(keys)
  values = config.to_dict()
  values.update({k: tuple(v) if isinstance(v, list) else v for k, v in keys.items()})
  return config_lib.validate(ml_collections.ConfigDict(values))  # each value's type checked


def _overrides(mode: str, keys: Dict[str, Any]) -> modes.Overrides:
  """The keys of a call as a mode's command-line overrides: those that do nothing in `mode`
  named in one warning, as main.py names them."""
  config = _with(default_config.get_config(), keys)
  applied = key_table.check_command(mode, config, list(keys))
  return modes.Overrides(config, applied)


def train(config: ml_collections.ConfigDict, workdir: str) -> Optional[Dict[str, Any]]:
  """`--mode=train` of `config` into `workdir`: trains (resuming what `workdir` holds), averages,
  evaluates `final_eval_split` and prints the report; returns that evaluation (as
  `evaluate`'s), None when the run was stopped early or has no final evaluation."""
  config_lib.check_config_dict('train', config)
  workdir = layout.of(workdir)
  # Training turns SIGINT and SIGTERM into checkpoints; the caller's handlers come back after.
  saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    return summary.train_and_finish(train_lib.resolve_run(config, workdir), workdir,
                                    resolved=True)
  finally:
    if threading.current_thread() is threading.main_thread():
      for number, handler in saved.items():
        signal.signal(number, handler)


def evaluate(workdir: str, split: str = 'test', checkpoint: Optional[str] = None,
             **keys: Any) -> Dict[str, Any]:
  """`--mode=eval --split=SPLIT`: loss, perplexity and BLEU (a treebank: F1) of `checkpoint`
  (None: the newest averaged, else the latest training one; a step, 'best', 'ema')."""
  if split not in config_lib.SPLITS:
    raise config_lib.ConfigError(f'evaluate: split={split!r}; expected one of '
                                 f'{", ".join(config_lib.SPLITS)}')
  from t2t_jax.inference import evaluate as evaluate_lib  # pylint: disable=import-outside-toplevel
  config, inference = modes.load(workdir, checkpoint, _overrides('eval', keys))
  modes.check_scored_data(config, workdir, split, inference)
  return evaluate_lib.evaluate(config, workdir, split, inference=inference)


def translate(workdir: str, sentences: Sequence[str], checkpoint: Optional[str] = None,
              **keys: Any) -> List[str]:
  """`--mode=decode` of `sentences`: one str per sentence, what decode writes for it (its
  translation; with `nbest` its n lines, joined by '\n'), e.g. `translate(w, s, beam_size=8)`."""
  lines = _lines('translate', sentences)
  return modes.decoded_lines(workdir, _overrides('decode', keys), checkpoint, lines)


def score(workdir: str, sources: Sequence[str], targets: Sequence[str],
          checkpoint: Optional[str] = None, **keys: Any) -> List[float]:
  """`--mode=score`: log P(target | source) of each pair, in nats, EOS included."""
  results = score_mode.scored(workdir, _overrides('score', keys), checkpoint,
                              _lines('score', sources, 'sources'),
                              _lines('score', targets, 'targets'), ('sources', 'targets'))
  return [log_prob for log_prob, _ in results]


def _lines(where: str, sentences: Sequence[str], name: str = 'sentences') -> List[str]:
  if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
    raise config_lib.ConfigError(f'{where}: {name} must be a list of str, one sentence each')
  for number, sentence in enumerate(sentences, 1):
    if '\n' in sentence or '\r' in sentence:
      raise config_lib.ConfigError(f'{where}: {name}[{number - 1}] holds a line break; give '
                                   'one sentence per item')
  return list(sentences)


def batches(config: ml_collections.ConfigDict, workdir: str) -> Iterator[Dict[str, Any]]:
  """The training batches of `config` for one's own loop, as `--mode=train` makes them: the
  corpus prepared and the vocabulary trained (or reused) in `workdir`, then an endless
  iterator of {'inputs', 'targets'} int32 [rows, length] numpy arrays (packed runs add the
  segmentations and positions), with `get_state` / `set_state` for exact resumption."""
  config = train_lib.resolve_run(config, layout.of(workdir))
  return train_lib.Data(config, layout.of(workdir), with_eval=False).train
