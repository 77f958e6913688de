"""`--mode=eval`, `--mode=decode` and `--mode=average`, and what every mode that reads a trained
run shares: its parameters and config (`load`)."""

import dataclasses
import json
import sys
from typing import Any, Optional, Sequence, Tuple

import ml_collections
from absl import logging
from etils import epath

from t2t_jax import config as config_lib
from t2t_jax.data import tasks, tokenizer
from t2t_jax.inference import averaging, checkpoint_choice, evaluate, translate
from t2t_jax.runtime import multihost
from t2t_jax.storage import textio


@dataclasses.dataclass(frozen=True)
class Overrides:
  """What the command line says about the config: `--config` with its `--config.KEY=VALUE`
  overrides applied, and those KEYs, in order."""
  config: ml_collections.ConfigDict
  keys: Sequence[str] = ()


def load(workdir: str, checkpoint: Optional[str],
         overrides: Overrides) -> Tuple[ml_collections.ConfigDict, Any]:
  """(config, `checkpoint_choice.InferenceParams`) for eval/decode/attention/export: the checkpoint's
  own config plus command-line overrides of inference and data keys."""
  inference = checkpoint_choice.load_inference_params(workdir, checkpoint)
  logging.info('using %s', inference.description)
  config = config_lib.apply_overrides(config_lib.from_json(inference.config_json),
                                      overrides.config, overrides.keys)
  return config, inference


def average(workdir: str, overrides: Overrides) -> None:
  """Averages the last `average_last` training checkpoints (a collective save)."""
  saved = checkpoint_choice.latest_training_config(workdir)
  config = config_lib.apply_overrides(config_lib.from_json(saved), overrides.config,
                                      overrides.keys)
  result = averaging.average_checkpoints(workdir, config.average_last)  # a collective save
  if multihost.is_writer():
    print(f'averaged steps {", ".join(map(str, result.steps))} into {result.path}')


def evaluate_split(workdir: str, overrides: Overrides, checkpoint: Optional[str],
                   split: str) -> None:
  """Loss, perplexity and BLEU (a treebank: F1) on `split`, printed as JSON."""
  config, inference = load(workdir, checkpoint, overrides)
  result = evaluate.evaluate(config, workdir, split, inference=inference)
  if multihost.is_writer():
    print(json.dumps(result, indent=2, sort_keys=True))


def decode(workdir: str, overrides: Overrides, checkpoint: Optional[str],
           input_path: Optional[str], output: Optional[str]) -> None:
  """Translates (a treebank: parses) every line of `input_path` (stdin) into `output`
  (stdout), which must not exist."""
  if output and epath.Path(output).exists():  # local or gs://...
    raise FileExistsError(f'{output} already exists; choose another --output or remove it')
  lines = (textio.read_lines(input_path) if input_path
           else textio.decode_lines(sys.stdin.buffer.read(), '<stdin>'))
  config, inference = load(workdir, checkpoint, overrides)
  tok = tokenizer.load(tokenizer.vocab_path(workdir))
  translator = translate.from_config(config, inference.params, tok)
  task = tasks.get(config.dataset)  # a treebank: sentences in, one-line bracketed trees out
  if task is not None:
    outputs = task.decode_lines(translator, lines, progress=translate.print_progress)
  else:
    outputs = multihost.translate_all(translator, lines, progress=translate.print_progress)
  if not multihost.is_writer():
    return
  if output:
    textio.write_lines_atomic(output, outputs)
  else:
    sys.stdout.write(''.join(line + '\n' for line in outputs))
