"""`--mode=eval`, `--mode=decode` and `--mode=average`, and what every mode that reads a trained
run shares: its parameters and config (`load`)."""

import contextlib
import dataclasses
import json
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import ml_collections
from absl import logging
from etils import epath

from t2t_jax import config as config_lib
from t2t_jax.data import corpora, fingerprint, mixture, tasks, vocab_record, vocabularies
from t2t_jax.inference import (averaging, best_average, checkpoint_choice, evaluate,
                               translate)
from t2t_jax.inference import nbest_output, streaming
from t2t_jax.model import info as model_info, variant
from t2t_jax.runtime import checkpoint as checkpoint_lib
from t2t_jax.runtime import interruptible, multihost, profiling, resolution
from t2t_jax.storage import layout, outputs, paths, textio
from t2t_jax.storage import workdir as workdir_lib


@dataclasses.dataclass(frozen=True)
class Overrides:
  """What the command line says about the config: `--config` with its `--config.KEY=VALUE`
  overrides applied, and those KEYs, in order."""
  config: ml_collections.ConfigDict
  keys: Sequence[str] = ()


def load(workdir: str, checkpoint: Optional[str],
         overrides: Overrides) -> Tuple[ml_collections.ConfigDict, Any]:
  """(config, `checkpoint_choice.InferenceParams`) for eval/decode/attention/export: the checkpoint's
  own config plus command-line overrides of inference and data keys, resolved
  (`run_config`)."""
  inference = checkpoint_choice.load_inference_params(workdir, checkpoint)
  logging.info('using %s', inference.description)
  name = checkpoint_choice.checkpoint_name(inference.path)
  config = run_config(workdir, inference.config_json, name, overrides, inference.model_source)
  checkpoint_choice.check_built_from(config, inference)
  return config, inference


def run_config(workdir: str, saved: Dict[str, Any], source: str, overrides: Overrides,
               model_source: Optional[Dict[str, Any]] = None) -> ml_collections.ConfigDict:
  """The canonical config (`resolution`) of the run `workdir` from the config JSON `saved`
  of its checkpoint `source`, with the command line's overrides (`resolution.with_overrides`;
  the model cannot change, a `--config.model` file moved with its content can:
  `model_source` is the checkpoint's record of it); its `model` factory checked."""
  recorded = config_lib.from_json(saved, source)
  # The factory file's recorded text, should it have moved or gone: under the path the
  # checkpoint's record names and the one its config names (they differ once a run resumed
  # with the file at a new place).
  variant.remember(model_source, typed=recorded.get('model', ''))
  if 'model' not in overrides.keys:
    check_model(workdir, recorded, model_source)  # before anything builds it
  config = resolution.with_overrides(recorded, config_lib.absolute_paths(overrides.config),
                                     overrides.keys, model_source)
  check_model(workdir, config, model_source)
  return config


def check_given_vocabularies(workdir: str, config: ml_collections.ConfigDict,
                             keys: Sequence[str]) -> None:
  """A vocabulary the command line names again to a mode that reads a trained run
  (`vocab_model`, `source_vocab_model`) is compared with the workdir's own by content: the
  same file (moved or not) or one that is gone is provenance; another is refused in one line,
  as a resume refuses it."""
  where = layout.of(workdir)
  for key, own in (('vocab_model', where.vocab), ('source_vocab_model', where.source_vocab)):
    if key not in keys or not config.get(key):
      continue
    try:
      given, mine = (vocab_record.sha256(paths.read_bytes(p)) for p in (config[key], own))
    except OSError:
      continue
    if given != mine:
      raise config_lib.ConfigError(
          f'--config.{key}={config[key]} is not the vocabulary {workdir} was trained with '
          f'({own}: sha256 {mine[:12]}..., the file given: {given[:12]}...); drop it: the '
          'workdir holds its own')


def check_scored_data(config: ml_collections.ConfigDict, workdir: str, split: str,
                      inference: Any) -> None:
  """A warning when the `split` about to be scored is not that split of the data the
  checkpoint was trained with (`fingerprint.scored_difference`): its scores are not the
  run's. Checkpoints without a data fingerprint, and data that cannot be read (the
  evaluation says why), are not compared."""
  if not inference.data_fingerprint:
    return
  try:
    current = fingerprint.compute(config, corpora.default_data_dir(config, workdir))
  except Exception:  # noqa: BLE001  missing or malformed data: `evaluate` reports it in one line
    return
  difference = fingerprint.scored_difference(inference.data_fingerprint, current, split)
  if difference:
    logging.warning('%s was trained on other data than what --split=%s scores now: %s; its '
                    'scores are not comparable with the run\'s',
                    checkpoint_choice.checkpoint_name(inference.path), split, difference)


def check_model(workdir: str, config: ml_collections.ConfigDict,
                model_source: Optional[Dict[str, Any]] = None) -> None:
  """Refuses, in one line naming it and `workdir`, a `--config.model` factory the run
  `workdir` was trained with (its checkpoint's config) that cannot be loaded here.

  Raises:
    ConfigError: e.g. 'DIR was trained with --config.model=my_variants:swiglu, which cannot
      be imported here (No module named 'my_variants'): run from the folder that has it, or
      put it on PYTHONPATH'; for a file, where to name its new place (`variant.moved_hint`;
      `model_source`, the checkpoint's record of the file, gives its sha256).
  """
  if not config.model:
    return
  try:
    variant.load_factory(config.model, key='model')
  except variant.VariantError as e:
    raise config_lib.ConfigError(
        f'{workdir} was trained with --config.model={e.spec}, which cannot be imported here '
        f'({e.reason}): {variant.moved_hint(e.spec, model_source)}') from None


def info_config(workdir: Optional[str], overrides: Overrides) -> Tuple[Any, str]:
  """`--mode=info`'s run config and the line naming where it came from: the `--config`'s
  (no `workdir`), else the run's own: the config recorded with its newest training checkpoint
  (else with the checkpoint eval and decode read, e.g. an averaged one), command-line
  overrides applied (model keys refused, as every mode that reads a run), its `model`
  variant checked."""
  if not workdir:  # resolved, as main.py resolved it (which warned already)
    config = resolution.resolve(overrides.config, overrides.keys, saved=True)
    return config, mixture.describe(config)
  try:
    saved, setup = checkpoint_choice.latest_training_setup(workdir)
    source = f'the latest training checkpoint in {layout.of(workdir).checkpoints}'
    model_source = setup.get(checkpoint_lib.MODEL_ITEM)
    start = setup.get(checkpoint_lib.INIT_ITEM)
    vocabulary = setup.get(checkpoint_lib.VOCAB_ITEM)
    imported = None
  except checkpoint_choice.CheckpointError:
    inference = checkpoint_choice.load_inference_params(workdir, None)
    saved, source = inference.config_json, checkpoint_choice.checkpoint_name(inference.path)
    model_source, start = inference.model_source, inference.init_record
    vocabulary = inference.vocabulary
    imported = (inference.description + '\n'
                if inference.description.startswith('imported ') else None)
  config = run_config(workdir, saved, source, overrides, model_source)
  started = (f'fine-tuned from {start["checkpoint"]} ({start["description"]}, parameters '
             f'sha256 {start["params_sha256"][:12]}...)\n' if start else '')
  vocabularies_line = vocab_record.describe(vocabulary)  # each side's sha256 and size
  return config, (f'{workdir}: the model recorded in {source}\n{started}{imported or ""}'
                  + (vocabularies_line + '\n' if vocabularies_line else '')
                  + mixture.describe(config, _data_state(workdir).get('mixture_shares')))


def _data_state(workdir: str) -> Dict[str, Any]:
  """The data iterator's state saved with the newest training checkpoint ({} if none reads)."""
  try:
    return checkpoint_lib.read_json_item(os.path.join(
        layout.of(workdir).checkpoints, str(checkpoint_choice.training_steps(workdir)[-1]),
        'data')) or {}
  except (IndexError, OSError, ValueError):
    return {}



def info(workdir: Optional[str], overrides: Overrides) -> str:
  """`--mode=info`'s model part: the sizes of `info_config`'s model."""
  config, header = info_config(workdir, overrides)
  return header + model_info.describe(config)


def average(workdir: str, overrides: Overrides) -> None:
  """Averages the last `average_last` training checkpoints (a collective save), or with
  `average_best` the best kept ones (`best_average`)."""
  saved, setup = checkpoint_choice.latest_training_setup(workdir)
  source = f'the latest training checkpoint in {layout.of(workdir).checkpoints}'
  # Its factory checked too: what averaging is for, eval and decode, needs it.
  config = run_config(workdir, saved, source, overrides, setup.get(checkpoint_lib.MODEL_ITEM))
  if config.average_best:
    result = best_average.average_best(workdir, config.average_best)
    if multihost.is_writer():
      records = {s: r for s, r, _ in checkpoint_choice.best_checkpoints(workdir)}
      print(best_average.describe(result, records))
    return
  result = averaging.average_checkpoints(workdir, config.average_last)  # a collective save
  if multihost.is_writer():
    print(f'averaged steps {", ".join(map(str, result.steps))} into {result.path}')


def evaluate_split(workdir: str, overrides: Overrides, checkpoint: Optional[str],
                   split: str) -> None:
  """Loss, perplexity and BLEU (a treebank: F1) on `split`, printed as JSON."""
  config, inference = load(workdir, checkpoint, overrides)
  check_scored_data(config, workdir, split, inference)
  result = evaluate.evaluate(config, workdir, split, inference=inference)
  if multihost.is_writer():
    print(json.dumps(result, indent=2, sort_keys=True))


def decode(workdir: str, overrides: Overrides, checkpoint: Optional[str],
           input_path: Optional[str], output: Optional[str]) -> None:
  """Translates (a treebank: parses) every line of `input_path` (stdin) into `output`
  (stdout), which must not exist: it is claimed before the checkpoint loads (`claimed`)."""
  if output and epath.Path(output).exists():  # local or gs://...
    raise taken(output)
  if output:
    outputs.check_writable(output)  # a folder that is a file, read-only or full: one line now
  if 'profile_steps' in overrides.keys and overrides.config.profile_steps and (
      not output or streaming.is_stream(input_path)):
    raise config_lib.ConfigError('--config.profile_steps with --mode=decode traces the batches '
                                 'of a file into OUTPUT.profile/: give --input=FILE and '
                                 '--output=OUTPUT')
  if streaming.is_stream(input_path):  # '-' or a pipe: lines decoded as they arrive
    with claimed(output):
      _decode_stream(workdir, overrides, checkpoint, input_path, output)
    return
  lines = textio.read_input(input_path)
  multihost.barrier('decode_output_checked')  # every process checked before the writer claims
  with claimed(output):
    _decode_lines(workdir, overrides, checkpoint, lines, output)


def decoded_lines(workdir: str, overrides: Overrides, checkpoint: Optional[str],
                  lines: Sequence[str], profile_dir: Optional[str] = None) -> List[str]:
  """The output line of each of `lines`, as `--mode=decode` writes it (a treebank: its tree);
  on several processes each returns them all. `profile_dir`: where a typed `profile_steps`
  traces the decode's batches (not a run's recorded one: that was its training's)."""
  config, inference = load(workdir, checkpoint, overrides)
  progress = profiling.StepProfiler(overrides.config.get('profile_steps', '') if 'profile_steps'
                                    in overrides.keys else '', profile_dir,
                                    'decode').batches(translate.print_progress)
  tok = vocabularies.load(workdir, config)  # encodes with the source's, decodes the target's
  translator = translate.from_config(config, inference.params, tok)
  task = tasks.get(config.dataset)  # a treebank: sentences in, one-line bracketed trees out
  prefixes = _prefixes(config, len(lines))
  extended = config.nbest > 1 or config.output_scores or prefixes is not None
  if task is not None and (extended or not translator.settings.plain):
    raise config_lib.ConfigError('a treebank decodes its trees with the plain beam search: '
                                 'drop nbest, output_scores, target_prefix_file, '
                                 'decode_strategy and no_repeat_ngram_size')
  if task is not None:
    return task.decode_lines(translator, lines, progress=progress)
  if extended:
    return multihost.translate_all(
        nbest_output.LineTranslator(translator, config.nbest, config.output_scores, prefixes),
        lines, progress=progress)
  return multihost.translate_all(translator, lines, progress=progress)


def _decode_lines(workdir: str, overrides: Overrides, checkpoint: Optional[str],
                  lines: Sequence[str], output: Optional[str]) -> None:
  outputs = decoded_lines(workdir, overrides, checkpoint, lines,
                          profile_dir=f'{output}.profile' if output else None)
  if not multihost.is_writer():
    return
  interruptible.raise_if_signalled()  # a stop request swallowed meanwhile: nothing written
  # A full disk, a quota, a read-only file system: one line, nothing half-written.
  with workdir_lib.writing(output or '<stdout>'):
    if output:
      textio.write_lines_atomic(output, outputs, overwrite=True)  # over this decode's claim
    else:
      sys.stdout.write(''.join(line + '\n' for line in outputs))
      sys.stdout.flush()


def _decode_stream(workdir: str, overrides: Overrides, checkpoint: Optional[str],
                   input_path: str, output: Optional[str]) -> None:
  """`decode` of a stream (`streaming.py`): each batch's translations written and flushed as
  soon as they exist, into `output` (claimed empty) or stdout."""
  import jax  # pylint: disable=import-outside-toplevel
  if jax.process_count() > 1:
    raise config_lib.ConfigError(f'--input={input_path} is a stream, which one process decodes; '
                                 'run without --distributed, or give a file')
  config, inference = load(workdir, checkpoint, overrides)
  if tasks.get(config.dataset) is not None:
    raise config_lib.ConfigError(f'--input={input_path}: a treebank parses files, not streams')
  translator = translate.from_config(config, inference.params,
                                     vocabularies.load(workdir, config))
  prefixes = _prefixes(config, None)
  lines = nbest_output.LineTranslator(translator, config.nbest, config.output_scores, prefixes)

  def translate_batch(batch, numbers):
    if prefixes is not None:  # held to a file's rule as the lines come
      _prefix_count(config, prefixes, numbers[-1], more=True)
    return lines.translate(batch, None, numbers)
  source = sys.stdin.buffer if input_path == '-' else open(input_path, 'rb')  # noqa: SIM115
  name = '<stdin>' if input_path == '-' else input_path
  sink = open(output, 'a', encoding='utf-8') if output else sys.stdout  # noqa: SIM115
  written = [0]

  def write(text):
    sink.write(text)
    sink.flush()
    written[0] += 1

  try:
    with workdir_lib.writing(output or '<stdout>'):
      count = streaming.stream(source, translate_batch, write, config.decode_batch_sentences,
                               name)
    if prefixes is not None:
      _prefix_count(config, prefixes, count)
  except KeyboardInterrupt as e:
    if output and written[0]:  # what was written stays, and says so (cli.exit_interrupted)
      e.kept = (f'the {written[0]} translation{"s" if written[0] > 1 else ""} written to '
                f'{output} {"are" if written[0] > 1 else "is"} kept; to go on, decode the '
                'lines after them into another --output')
    raise
  else:
    if source is not sys.stdin.buffer:  # read to its end: the reader thread is done with it
      source.close()
  finally:
    if output:
      sink.close()


def _prefixes(config: ml_collections.ConfigDict, count: Optional[int]) -> Optional[List[str]]:
  """The lines of `target_prefix_file` (None without one), one per input line: `count` lines
  (None: a stream's, not known yet; `_prefix_count` checks it as it goes)."""
  if not config.target_prefix_file:
    return None
  prefixes = textio.read_lines(config.target_prefix_file)
  if count is not None:
    _prefix_count(config, prefixes, count)
  return prefixes


def _prefix_count(config: ml_collections.ConfigDict, prefixes: Sequence[str], count: int,
                  more: bool = False) -> None:
  """ConfigError unless the input's `count` lines (`more`: a stream with at least that many)
  have one prefix each: the same check for a file and for a stream."""
  if len(prefixes) == count or (more and len(prefixes) > count):
    return
  has = f'at least {count}' if more else f'{count}'
  raise config_lib.ConfigError(
      f'--config.target_prefix_file={config.target_prefix_file} has {len(prefixes)} lines '
      f'but --input has {has}; expected one prefix (possibly empty) per input line')


@contextlib.contextmanager
def claimed(output: Optional[str]) -> Iterator[None]:
  """Holds `output` for one decode: the writer creates it empty now, atomically refusing an
  existing file (another decode's claim included), so a second decode into the same file
  stops before any work rather than after all of it. If the body fails or is interrupted,
  the placeholder is removed again (only while still empty: never a file with content) so
  that the same command can be rerun; a killed decode leaves it (`taken` says so)."""
  if not output or not multihost.is_writer():
    yield
    return
  try:
    with workdir_lib.writing(output):
      textio.write_bytes_atomic(output, b'')
  except FileExistsError:
    raise taken(output) from None
  try:
    yield
  except BaseException:
    path = epath.Path(output)
    if path.exists() and path.stat().length == 0:
      path.unlink()
    raise


def taken(output: str) -> FileExistsError:
  """The refusal of an existing `output`; an empty one is likely another decode's claim."""
  try:
    empty = epath.Path(output).stat().length == 0
  except OSError:
    empty = False
  hint = ' (empty: another decode may be writing it, or one was killed)' if empty else ''
  return FileExistsError(f'{output} already exists{hint}; choose another --output or remove it')
