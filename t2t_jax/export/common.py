"""What both exporters share: their error, the output directory rule and the model they read.
The dispatcher over the formats (`formats.py`) sits above the exporters, this module below.

An export writes a new directory: `--output` must not exist, the files are written into a
hidden temporary directory beside it, and that directory is renamed to `--output` only when
complete. An object store output (gs://bucket/dir) has no renames: the files are written into
a local temporary directory, then uploaded when complete. A failed export leaves nothing
behind and never touches an existing path.
"""

import contextlib
import dataclasses
import os
import shutil
import tempfile
from typing import Any, Iterator, List, Optional

from etils import epath

from t2t_jax.data import mixture, tasks
from t2t_jax.model import transformer as model_lib, variant
from t2t_jax.runtime import interruptible
from t2t_jax.storage import layout, leftovers, outputs, paths
from t2t_jax.storage import workdir as workdir_lib


class ExportError(ValueError):
  """A model or an export request that cannot be honoured; the message says why."""


def check_translation(config: Any, run: str) -> None:
  """Refuses a run of a task other than translation (`config.dataset` naming a `tasks` entry,
  e.g. a treebank): its `--mode=decode` turns the model's output tokens into trees, which
  neither exported format does, so their output would not be the run's.

  Raises:
    ExportError: naming `run` (the workdir, or what the parameters are) and the dataset.
  """
  if tasks.get(config.dataset) is not None:
    raise ExportError(f'export supports translation runs; {run} is a parsing run (dataset='
                      f'{config.dataset}): use --mode=decode, which outputs trees')
  if mixture.many_targets(config):  # its sources start with '<2xx>', which no export adds
    raise ExportError(f'{run} translates into {", ".join(mixture.target_languages(config))} '
                      '(a mixture of several target languages), whose sources start with the '
                      "target language's token; the exports do not add it: use --mode=decode")


def check_vocabulary(path: str, pieces: int, vocab_size: int, prefix: str = '',
                     name: str = 'vocab_size') -> None:
  """Refuses a SentencePiece model of `pieces` pieces (`path`) for a model of `vocab_size`
  ids unless the two are equal, as they are for the vocabulary a model was trained with.
  More pieces: ids the model has no embedding for. Fewer: ids the model can output that have
  no piece, which serve.py's (or CTranslate2's) decoding cannot turn into text
  (`IndexError: OUT_OF_RANGE`); the self-check cannot see it, both sides decode to the same
  ids. `prefix` starts the message (a library call's name); `name` is the model's size's
  ('source_vocab_size' for a source vocabulary of its own).

  Raises:
    ExportError: one line naming the file, both sizes and the ids without a counterpart.
  """
  if pieces == vocab_size:
    return
  why = (f'ids {vocab_size}..{pieces - 1} have no embedding' if pieces > vocab_size else
         f'the model can output ids {pieces}..{vocab_size - 1}, which have no piece, so the '
         'export could not decode them')
  raise ExportError(f'{prefix}{path} has {pieces} pieces but the model\'s {name} is '
                    f'{vocab_size}: {why}; expected the SentencePiece model the model was '
                    f'trained with ({vocab_size} pieces)')


def _exists(path: str) -> bool:
  """Whether a local path (a dangling link included) or anything under a URI exists."""
  if paths.is_local(path):
    return os.path.lexists(path)
  paths.forget(path)
  return epath.Path(path).exists()


def check_output(output: str, argument: str = '--output') -> str:
  """The absolute path (or URI) of a new output directory, after refusing one that exists.
  `argument` names `output` in the messages: '--output' for `--mode=export`, a library call
  its own, e.g. 'export_stablehlo_model: output' (a caller has no flags).

  Raises:
    FileExistsError: `output` exists (file or directory); nothing is changed.
    ExportError: no `output` given, or its local parent does not exist.
    OutputError: its parent is a file, read-only or full (a probe file cannot be written).
  """
  if not output:
    raise ExportError(f'{argument} is required: the directory to create' if argument !=
                      '--output' else '--output is required for --mode=export: the directory '
                      'to create')
  path = paths.absolute(output)
  if _exists(path):
    raise FileExistsError(f'{argument}={output} already exists; choose a new directory or '
                          'remove it (nothing was written)')
  parent = os.path.dirname(path)
  if paths.is_local(path) and not os.path.lexists(parent):  # object stores have no folders
    raise ExportError(f'{argument}={output}: the parent directory {parent} does not exist')
  # A file, read-only or full: one line, before work.
  return outputs.check_writable(output, argument)


def _appeared(output: str) -> FileExistsError:
  return FileExistsError(f'{output} appeared during the export; nothing was overwritten')


@contextlib.contextmanager
def new_directory(output: str, argument: str = '--output') -> Iterator[str]:
  """Yields a local temporary directory that becomes `output` on success and is removed on
  failure (an exception inside the block, a failed self-check included): renamed when
  `output` is local (it is made beside it), uploaded file by file when `output` is a URI.
  `output` is checked with `check_output(output, argument)` first. After a SIGTERM or Ctrl-C
  (`interruptible.raise_if_signalled`, also one whose KeyboardInterrupt a finalizer
  swallowed) nothing takes the name `output`: its KeyboardInterrupt is raised instead, and a
  directory renamed just as the signal came is removed again."""
  path = check_output(output, argument)
  if not paths.is_local(path):
    with tempfile.TemporaryDirectory(prefix='t2t_jax_export.') as temp:
      yield temp
      if _exists(path):  # appeared while we were writing: keep it, upload nothing
        raise _appeared(output)
      interruptible.raise_if_signalled()  # one a finalizer swallowed: upload nothing
      paths.upload_directory(temp, path)
    return
  # A killed export's folder (its pid gone) is removed by the next export to the same name.
  with workdir_lib.writing(os.path.dirname(path)):
    temp = leftovers.owned_temp_dir(f'.{os.path.basename(path)}.', os.path.dirname(path),
                                    '.tmp')
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(temp, 0o777 & ~umask)  # mkdtemp's 0700 would make the export private
  ours = None
  try:
    yield temp
    if os.path.lexists(path):  # appeared while we were writing: keep it, drop ours
      raise _appeared(output)
    interruptible.raise_if_signalled()  # one a finalizer swallowed: never take the name
    ours = os.stat(temp)
    os.rename(temp, path)
  except BaseException:
    if os.path.lexists(temp):
      shutil.rmtree(temp, ignore_errors=True)
    elif ours is not None and _same(path, ours):  # renamed as a signal came: not kept
      shutil.rmtree(path, ignore_errors=True)
    raise


def _same(path: str, stat: os.stat_result) -> bool:
  """Whether `path` is the directory `stat` was taken of (moved there since)."""
  try:
    now = os.stat(path)
  except OSError:
    return False
  return (now.st_dev, now.st_ino) == (stat.st_dev, stat.st_ino)


@dataclasses.dataclass(frozen=True)
class ExportSource:
  """A trained model as the exporters read it.

  Attributes:
    config: the run config (`configs/default.py` keys): the checkpoint's, plus any inference
      overrides.
    params: the parameters, a nested dict of float32 arrays.
    tokenizer_path: the SentencePiece model of the run (`<workdir>/vocab/spm.model`): the
      target side's with separate vocabularies.
    description: where the parameters came from, e.g. 'averaged steps 2400,2600,2700'.
    model: the model the parameters are of, a `Transformer` variant (None: the one `config`
      names, `variant.from_config`: its `--config.model` factory's, or the paper's).
    source_tokenizer_path: separate vocabularies (`share_vocab=False`): the source side's
      (`<workdir>/vocab/source_spm.model`); None: `tokenizer_path` serves both sides.
  """
  config: Any
  params: Any
  tokenizer_path: str
  description: str
  model: Optional[model_lib.Transformer] = None
  source_tokenizer_path: Optional[str] = None

  @property
  def model_config(self) -> model_lib.TransformerConfig:
    return self.transformer.cfg

  @property
  def transformer(self) -> model_lib.Transformer:
    """The model to export: `model`, or the one `config` names."""
    return (model_lib.as_model(self.model) if self.model is not None
            else variant.from_config(self.config))

  def tokenizer(self) -> Any:
    """The vocabulary loaded: a `Tokenizer`, or with `source_tokenizer_path` a
    `vocab_pair.VocabPair` (encodes with the source model, decodes with the target's)."""
    from t2t_jax.data import tokenizer, vocab_pair
    target = tokenizer.load(self.tokenizer_path)
    if self.source_tokenizer_path is None:
      return target
    return vocab_pair.VocabPair(tokenizer.load(self.source_tokenizer_path), target)

  def check_vocabulary(self) -> None:
    """`check_vocabulary` of each tokenizer file against the model's size of its side (after
    loading it: TokenizerError for a damaged one, or one with other special ids); an
    ExportError for one vocabulary given for a model with two, or two for a model with one."""
    cfg, tok = self.model_config, self.tokenizer()
    # Two models of one vocabulary (`share_tokenizer=False`, an imported Marian model's).
    two_models = not getattr(self.config, 'share_tokenizer', True)
    if (self.source_tokenizer_path is None) != (cfg.source_vocab_size is None and not two_models):
      has, given = (('separate source and target vocabularies', 'one was')
                    if cfg.source_vocab_size is not None
                    else ('one vocabulary for both sides', 'two were'))
      raise ExportError(f'the model has {has}, but {given} given ({self.tokenizer_path})')
    check_vocabulary(self.tokenizer_path, tok.vocab_size, cfg.vocab_size)
    if self.source_tokenizer_path is not None:
      check_vocabulary(self.source_tokenizer_path, tok.source_vocab_size,
                       cfg.input_vocab_size, name='source_vocab_size')

  def pieces(self, side: str = 'target') -> List[str]:
    """The SentencePiece piece of every id of `side`'s vocabulary, in id order."""
    from t2t_jax.data import vocab_pair
    tok = vocab_pair.side(self.tokenizer(), side)
    return tok.pieces(range(tok.vocab_size))


def load_source(workdir: str, checkpoint: Optional[str] = None,
                model_variant: Optional[model_lib.Transformer] = None) -> ExportSource:
  """The averaged (or `checkpoint`'s) parameters, config and vocabulary of a run;
  `model_variant`: the model they are of (its `cfg` is kept); None: the one the run's config
  names (`--config.model`, the paper's by default).

  Raises:
    CheckpointError: no readable checkpoint (the message lists what there is).
    TokenizerError: no SentencePiece model in the workdir.
  """
  from t2t_jax.inference import checkpoint_choice
  from t2t_jax.runtime import resolution
  inference = checkpoint_choice.load_inference_params(workdir, checkpoint)
  config = resolution.from_saved(inference.config_json, f'checkpoint {inference.path}')
  checkpoint_choice.check_built_from(config, inference, model_variant and model_lib.as_model(
      model_variant))
  return run_source(workdir, config, inference, model_variant)


def run_source(workdir: str, config: Any, inference: Any,
               model_variant: Optional[model_lib.Transformer] = None) -> ExportSource:
  """The `ExportSource` of a run's parameters (`inference`, `checkpoint_choice`'s) with its
  `config` and vocabularies, each loaded first (TokenizerError: one line when one is missing
  or damaged): `vocab/spm.model`, and `vocab/source_spm.model` with `share_vocab=False`."""
  from t2t_jax.data import vocabularies
  vocabularies.load(workdir, config)
  where = layout.of(workdir)
  return ExportSource(config, inference.params, where.vocab, inference.description,
                      model_variant, None if vocabularies.one_model(config) else where.source_vocab)
