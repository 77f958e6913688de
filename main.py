"""Train, evaluate and use a Transformer (Vaswani et al. 2017) from the command line.

  python main.py --config=configs/wmt_base.py --workdir=DIR --mode=train|eval|decode|...

--config is a Python file in configs/ (configs/table3.py:ROW selects a row of the paper's
Table 3, e.g. configs/table3.py:B1); without it the embedded default configs/quickstart.py
trains on the bundled EN->ES corpus. Override any config key after --config with
--config.KEY=VALUE, e.g. --config.num_train_steps=1000 --config.bucket_lengths=(16,32).
Every key is listed, with its default and a one-line description, in configs/default.py.
"""
# Dispatch only: every mode lives in the library.

import json
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
  sys.path.insert(0, _HERE)

from t2t_jax import cli  # noqa: E402
from t2t_jax import config as config_lib  # noqa: E402
from t2t_jax.export_common import FORMATS  # noqa: E402

MODES = ('train', 'eval', 'decode', 'average', 'info', 'plot', 'attention', 'export', 'plan')


def _override_keys(argv):
  """The KEYs of `--config.KEY=VALUE` arguments, in order."""
  return [path.split('.', 1)[0] for path in cli.override_paths(argv)]


def _env_int(name):
  value = os.environ.get(name)
  return int(value) if value not in (None, '') else None


_DEFAULT_CONFIG = os.path.join(_HERE, 'configs', 'quickstart.py')
cli.check_argv(sys.argv, _DEFAULT_CONFIG)  # config_flags reads sys.argv on the next line
config_flags.DEFINE_config_file(
    'config', _DEFAULT_CONFIG, 'Python config file: configs/*.py, or configs/table3.py:ROW. '
    'Override its keys with --config.KEY=VALUE (every key: configs/default.py).',
    lock_config=True)
flags.DEFINE_string('workdir', None, 'Directory for the vocabulary, checkpoints and metrics.')
flags.DEFINE_enum('mode', 'train', MODES,
                  'train; eval (loss and BLEU, for a treebank F1, on --split); decode '
                  '(--input -> --output); average (the last config.average_last checkpoints); '
                  'info (sizes, no data); plot (learning curves from metrics.jsonl into '
                  '<workdir>/plots); attention (attention maps of the --input sentences into '
                  '--output); export (a CTranslate2 model or a StableHLO artifact into --output); '
                  'plan (compile the steps for a TPU --topology on this machine: memory, FLOPs, '
                  'collectives, step time; no workdir).')
flags.DEFINE_string('input', None, 'decode: text file to translate, or to parse for a '
                    'treebank run (default: stdin); '
                    'attention: the source sentences, one per line.')
flags.DEFINE_string('output', None, 'decode: file to write, must not exist (default: stdout); '
                    'attention: a new or empty directory; export: a new directory; plan: a '
                    'new JSON file.')
flags.DEFINE_string('topology', None, 'plan: a TPU slice as libtpu names it, e.g. v5e:2x4, '
                    'v4:2x2x1, v5p:2x2x1, v6e:2x4, v5e:16x16 (needs requirements-tpu.txt).')
flags.DEFINE_bool('search_batch', True, 'plan: find the largest tokens_per_batch that fits a '
                  'chip by compiling the train step a few more times.')
flags.DEFINE_enum('format', None, FORMATS, 'export: ctranslate2 (a CTranslate2 model '
                  'directory) or stablehlo (jax.export beam search, parameters, vocabulary '
                  'and a jax-only runtime, serve.py).')
flags.DEFINE_string('quantization', None, 'export --format=ctranslate2: the weight type, e.g. '
                    'int8, int8_float16, float16 (default: float32).')
flags.DEFINE_string('targets', None, 'attention: target sentences, one per --input line, '
                    'teacher-forced (default: beam-search translations of the inputs).')
flags.DEFINE_integer('attention_layer', None, 'attention: the 1-based layer of the line view '
                     "of the encoder's self-attention (default: num_layers - 1, the paper's "
                     '"layer 5 of 6").')
flags.DEFINE_string('checkpoint', None,
                    'eval/decode/attention/export: a training step or a checkpoint path (default: '
                    'the newest averaged checkpoint, else the latest training checkpoint).')
flags.DEFINE_enum('split', 'dev', config_lib.SPLITS,
                  "eval: the split to evaluate (dev is WMT's validation split).")
flags.DEFINE_bool('distributed', False, 'Initialise jax.distributed, detecting the cluster '
                  '(TPU pod, SLURM, Open MPI, ...) unless the flags below are given.')
flags.DEFINE_string('coordinator_address', os.environ.get('T2T_COORDINATOR_ADDRESS'),
                    'HOST:PORT of process 0 (env T2T_COORDINATOR_ADDRESS); implies --distributed.')
flags.DEFINE_integer('num_processes', _env_int('T2T_NUM_PROCESSES'),
                     'Number of processes (env T2T_NUM_PROCESSES).')
flags.DEFINE_integer('process_id', _env_int('T2T_PROCESS_ID'),
                     'This process, 0..num_processes-1 (env T2T_PROCESS_ID).')
flags.DEFINE_float('distributed_timeout_s', 300.0,
                   'How long to wait for the coordinator and the other processes.')
flags.DEFINE_string('compilation_cache', None,
                    'Directory of the persistent XLA compilation cache, so restarts, eval and '
                    'decode jobs load compiled programs instead of compiling again; "" turns it '
                    'off. Default: $T2T_COMPILATION_CACHE_DIR, else ~/.cache/t2t_jax/xla.')
FLAGS = flags.FLAGS


def main(argv) -> None:
  logging.get_absl_handler().addFilter(cli.QuietLibraries())
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  cli.check_paths(FLAGS.workdir, FLAGS.input if FLAGS.mode in ('decode', 'attention') else None)
  if FLAGS.mode == 'plot':  # reads metrics.jsonl only: no cluster to join, nothing to compile
    _plot(FLAGS.workdir)
    return
  if FLAGS.mode == 'plan':  # compiles for chips elsewhere: no cluster, no cache, no workdir
    _plan()
    return
  from t2t_jax import compile_cache
  compile_cache.enable(compile_cache.default_dir() if FLAGS.compilation_cache is None
                       else FLAGS.compilation_cache)
  if FLAGS.distributed or FLAGS.coordinator_address:
    cli.native_stdout_to_stderr()  # gloo's connection lines: stdout is the user's output
    from t2t_jax import parallel
    parallel.initialize_distributed(FLAGS.coordinator_address, FLAGS.num_processes,
                                    FLAGS.process_id, timeout_s=FLAGS.distributed_timeout_s)
  cli.start_backends()
  if FLAGS.distributed or FLAGS.coordinator_address:
    import jax
    if jax.process_index() != 0:
      logging.set_verbosity(logging.WARNING)  # one process speaks for the run
  config = config_lib.validate(FLAGS.config)
  if FLAGS.mode == 'info':
    from t2t_jax import info
    print(info.describe(config))
    return
  if not FLAGS.workdir:
    raise app.UsageError(f'--workdir is required for --mode={FLAGS.mode}')
  if FLAGS.mode == 'train':
    from t2t_jax import summary, train
    if 'stopped_at' not in train.train(config, FLAGS.workdir):
      summary.finish(config, FLAGS.workdir)
  elif FLAGS.mode == 'average':
    _average(FLAGS.workdir)
  elif FLAGS.mode == 'decode':
    _decode(FLAGS.workdir)
  elif FLAGS.mode == 'attention':
    _attention(FLAGS.workdir)
  elif FLAGS.mode == 'export':
    _export(FLAGS.workdir)
  elif FLAGS.mode == 'eval':
    from t2t_jax import evaluate, multihost
    inference_config, inference = _inference(FLAGS.workdir)
    result = evaluate.evaluate(inference_config, FLAGS.workdir, FLAGS.split, inference=inference)
    if multihost.is_writer():
      print(json.dumps(result, indent=2, sort_keys=True))


def _inference(workdir):
  """(config, params) for eval/decode: the checkpoint's own config plus command-line
  overrides of inference and data keys."""
  from t2t_jax import averaging
  inference = averaging.load_inference_params(workdir, FLAGS.checkpoint)
  logging.info('using %s', inference.description)
  config = config_lib.apply_overrides(config_lib.from_json(inference.config_json), FLAGS.config,
                                      _override_keys(sys.argv))
  return config, inference


def _average(workdir) -> None:
  from t2t_jax import averaging
  saved = averaging.latest_training_config(workdir)
  config = config_lib.apply_overrides(config_lib.from_json(saved), FLAGS.config,
                                      _override_keys(sys.argv))
  from t2t_jax import multihost
  result = averaging.average_checkpoints(workdir, config.average_last)  # a collective save
  if multihost.is_writer():
    print(f'averaged steps {", ".join(map(str, result.steps))} into {result.path}')


def _decode(workdir) -> None:
  from etils import epath
  from t2t_jax import multihost, textio, translate
  from t2t_jax.data import tokenizer
  if FLAGS.output and epath.Path(FLAGS.output).exists():  # local or gs://...
    raise FileExistsError(f'{FLAGS.output} already exists; choose another --output or remove it')
  lines = (textio.read_lines(FLAGS.input) if FLAGS.input
           else textio.decode_lines(sys.stdin.buffer.read(), '<stdin>'))
  config, inference = _inference(workdir)
  tok = tokenizer.load(tokenizer.vocab_path(workdir))
  translator = translate.from_config(config, inference.params, tok)
  if config.dataset == 'treebank':  # sentences in, one-line bracketed trees out
    from t2t_jax.parsing import parse
    outputs = parse.parse_lines(translator, lines, progress=translate.print_progress)
  else:
    outputs = multihost.translate_all(translator, lines, progress=translate.print_progress)
  if not multihost.is_writer():
    return
  if FLAGS.output:
    textio.write_lines_atomic(FLAGS.output, outputs)
  else:
    sys.stdout.write(''.join(line + '\n' for line in outputs))


def _attention(workdir) -> None:
  from t2t_jax import attention_mode as mode, multihost
  from t2t_jax.data import tokenizer
  mode.check_output(FLAGS.output)
  sources, targets = mode.read_sentences(FLAGS.input, FLAGS.targets)
  config, inference = _inference(workdir)
  layer = mode.check_layer(FLAGS.attention_layer, config.num_layers)
  tok = tokenizer.load(tokenizer.vocab_path(workdir))
  sentences = mode.prepare(config, inference.params, tok, sources, targets, FLAGS.input,
                           FLAGS.targets)
  if multihost.is_writer():
    for directory, sentence in zip(mode.write_all(FLAGS.output, sentences, tok, layer,
                                                  inference.description), sentences):
      print(f'{directory}\t{sentence.target}')


def _export(workdir) -> None:
  from t2t_jax import export_common
  from t2t_jax.data import tokenizer
  export_common.check_request(FLAGS.format, FLAGS.output, FLAGS.quantization)
  config, inference = _inference(workdir)
  source = export_common.ExportSource(config, inference.params, tokenizer.vocab_path(workdir),
                                      inference.description)
  tokenizer.load(source.tokenizer_path)
  print(export_common.export(FLAGS.format, source, FLAGS.output, FLAGS.quantization))


def _plan() -> None:
  import jax
  jax.config.update('jax_platforms', 'cpu')  # nothing runs here: never start a TPU runtime
  from t2t_jax.plan import mode
  mode.run(config_lib.validate(FLAGS.config), FLAGS.topology, FLAGS.output,
           search_batch=FLAGS.search_batch,
           config_name=config_flags.get_config_filename(FLAGS['config']))


def _plot(workdir) -> None:
  from t2t_jax import plots
  if not workdir:
    raise app.UsageError('--workdir is required for --mode=plot')
  for path in plots.write_learning_curves(workdir):
    print(path)


def _user_errors():
  """Exceptions that mean bad input, reported as one line instead of a traceback."""
  from t2t_jax import (attention_mode, checkpoint, export_common, parallel, plots, textio,
                       train, workdir)
  from t2t_jax.data import corpora, pipeline, tokenizer
  from t2t_jax.plan import report, topology
  return (config_lib.ConfigError, report.PlanError, topology.TopologyError, checkpoint.CheckpointError, train.TrainError,
          attention_mode.AttentionInputError, export_common.ExportError,
          workdir.WorkdirError, parallel.DistributedError, plots.PlotError,
          corpora.DataError, pipeline.PipelineError, tokenizer.TokenizerError,
          textio.TextFileError, FileNotFoundError, FileExistsError)


if __name__ == '__main__':
  try:
    app.run(main, flags_parser=cli.parse_flags)
  except _user_errors() as e:
    sys.exit(f'error: {e}')
