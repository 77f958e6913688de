"""The command line's flags and the table from mode to function: what `python main.py` and the
installed `t2t-jax` command run (`command.entry` imports this module, which defines the flags
once, then calls `run`). Every mode's work lives in its package.
"""


import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from t2t_jax import cli  # noqa: E402
from t2t_jax import config as config_lib  # noqa: E402
from t2t_jax import errors  # noqa: E402
from t2t_jax import key_table  # noqa: E402
from t2t_jax.export import formats as export_formats  # noqa: E402
from t2t_jax.inference import checkpoint_choice  # noqa: E402
from t2t_jax.inference import modes as inference_modes  # noqa: E402
from t2t_jax.inference import score_mode  # noqa: E402
from t2t_jax.inspect import attention_mode  # noqa: E402
from t2t_jax.model import info as model_info  # noqa: E402
from t2t_jax.plan import mode as plan_mode, step_memory  # noqa: E402
from t2t_jax.runtime import interruptible, resolution  # noqa: E402
from t2t_jax.storage import workdir as workdir_lib  # noqa: E402
from t2t_jax.training import mesh_info, optim, plots, summary  # noqa: E402
from t2t_jax.training import train as train_lib  # noqa: E402
from t2t_jax.configs import quickstart as _quickstart  # noqa: E402

MODES = ('train', 'eval', 'decode', 'score', 'average', 'info', 'plot', 'attention', 'export',
         'plan', 'import', 'serve')


def _override_keys(argv):
  """The KEYs of `--config.KEY=VALUE` arguments, in order."""
  return [path.split('.', 1)[0] for path in cli.override_paths(argv)]


def _env_int(name):
  value = os.environ.get(name)
  return int(value) if value not in (None, '') else None


# The embedded default: configs/quickstart.py (installed as t2t_jax/configs/quickstart.py).
_DEFAULT_CONFIG = os.path.abspath(_quickstart.__file__)
cli.check_argv(sys.argv, _DEFAULT_CONFIG)  # config_flags reads sys.argv on the next line
config_flags.DEFINE_config_file(
    'config', _DEFAULT_CONFIG, 'Python config file: configs/*.py, or configs/table3.py:ROW. '
    'Override its keys with --config.KEY=VALUE (every key: configs/default.py).',
    lock_config=True)
flags.DEFINE_string('workdir', None, 'Directory for the vocabulary, checkpoints and metrics.')
flags.DEFINE_enum('mode', 'train', MODES,
                  'train; eval (loss and BLEU, for a treebank F1, on --split); decode '
                  '(--input -> --output); score (the log probability of each --targets line '
                  'given its --input line, into --output); average (the last '
                  'config.average_last checkpoints, or the config.average_best best); '
                  'info (sizes, no data; with --workdir, of the run\'s recorded model); '
                  'plot (learning curves from metrics.jsonl into '
                  '<workdir>/plots); attention (attention maps of the --input sentences into '
                  '--output); export (a CTranslate2 model or a StableHLO artifact into --output); '
                  'plan (compile the steps for a TPU --topology on this machine: memory, FLOPs, '
                  'collectives, step time; no workdir); serve (an HTTP server speaking '
                  "LibreTranslate's API on --host:--port, docs/serving.md).")
flags.DEFINE_string('input', None, 'decode: text file to translate, or to parse for a '
                    'treebank run (default: stdin); '
                    'attention: the source sentences, one per line.')
flags.DEFINE_string('output', None, 'decode: file to write, must not exist (default: stdout); '
                    'attention: a new or empty directory; export: a new directory; plan: a '
                    'new JSON file.')
flags.DEFINE_string('host', '127.0.0.1', 'serve: the address to listen on (0.0.0.0: every '
                    'interface).')
flags.DEFINE_integer('port', 8000, 'serve: the TCP port to listen on.')
flags.DEFINE_string('topology', None, 'plan: a TPU slice as libtpu names it, e.g. v5e:2x4, '
                    'v4:2x2x1, v5p:2x2x1, v6e:2x4, v5e:16x16 (needs requirements-tpu.txt).')
flags.DEFINE_bool('search_batch', True, 'plan: find the largest tokens_per_batch that fits a '
                  'chip by compiling the train step a few more times.')
flags.DEFINE_bool('plan_all_shapes', True, 'plan: compile the train step at every batch shape '
                  'the run uses and report each compile time and their sum (False: the largest '
                  'shape only, a quicker plan).')
flags.DEFINE_string('plan_meshes', '', "plan: ';'-separated --config.mesh layouts (e.g. "
                    "'data:-1;fsdp:-1;data:-1,tensor:4') to compile side by side, printing each "
                    "one's memory, step and collectives and the layout chosen (docs/meshes.md).")
flags.DEFINE_enum('format', None, export_formats.FORMATS, 'export: ctranslate2 (a CTranslate2 model '
                  'directory), stablehlo (jax.export beam search, parameters, vocabulary '
                  'and a jax-only runtime, serve.py) or huggingface (a MarianMT directory '
                  'transformers loads).')
flags.DEFINE_string('quantization', None, 'export --format=ctranslate2: the weight type, e.g. '
                    'int8, int8_float16, float16 (default: float32).')
flags.DEFINE_string('targets', None, 'attention: target sentences, one per --input line, '
                    'teacher-forced (default: beam-search translations of the inputs); score: '
                    'the translations to score, one per --input line.')
flags.DEFINE_integer('attention_layer', None, 'attention: the 1-based layer of the line view '
                     "of the encoder's self-attention (default: num_layers - 1, the paper's "
                     '"layer 5 of 6").')
flags.DEFINE_string('checkpoint', None,
                    'eval/decode/attention/export: a training step, a checkpoint path, best (the '
                    'best kept by keep_best) or ema / ema:STEP (the moving average of the '
                    'weights, ema_decay) (default: the newest averaged checkpoint, else the '
                    'latest training checkpoint).')
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
                    'decode jobs load compiled programs instead of compiling again (plan: what '
                    'each compilation reported, in its plan/ folder); "" turns it off. Default: '
                    '$T2T_COMPILATION_CACHE_DIR, else ~/.cache/t2t_jax/xla.')
FLAGS = flags.FLAGS


# The KEYs of `--config.KEY=VALUE` that do something in this mode (`key_table.check_command`,
# which names the others); None until main() has checked them.
_APPLIED_KEYS = None


def _overrides() -> inference_modes.Overrides:
  """--config as given, with the KEYs its `--config.KEY=VALUE` arguments override (those that
  do something in this mode)."""
  keys = _override_keys(sys.argv) if _APPLIED_KEYS is None else _APPLIED_KEYS
  return inference_modes.Overrides(FLAGS.config, keys)


def _plan(config) -> None:
  del config  # validated here, after jax is told to start no TPU runtime
  import jax
  jax.config.update('jax_platforms', 'cpu')  # nothing runs here: never start a TPU runtime
  plan_mode.run(resolution.resolve(FLAGS.config, _override_keys(sys.argv)), FLAGS.topology, FLAGS.output,
                search_batch=FLAGS.search_batch, all_shapes=FLAGS.plan_all_shapes,
                config_name=config_flags.get_config_filename(FLAGS['config']),
                compilation_cache=FLAGS.compilation_cache,
                mesh_specs=[m.strip() for m in FLAGS.plan_meshes.split(';') if m.strip()])


# Each mode, as a function of the validated --config (None for the bare modes below); the work
# lives in the packages, this table only hands them the flags they read.
def _info() -> None:
  config, header = inference_modes.info_config(FLAGS.workdir, _overrides())
  print(header + model_info.describe(config) + '\n' + resolution.describe(config) + '\n'
        + mesh_info.describe(config) + '\n' + step_memory.describe(config) + '\n'
        + optim.describe(config, recorded=bool(FLAGS.workdir)))


MODE_FUNCTIONS = {
    'train': lambda config: summary.train_and_finish(config, FLAGS.workdir, resolved=True),
    'eval': lambda config: inference_modes.evaluate_split(
        FLAGS.workdir, _overrides(), FLAGS.checkpoint, FLAGS.split),
    'decode': lambda config: inference_modes.decode(
        FLAGS.workdir, _overrides(), FLAGS.checkpoint, FLAGS.input, FLAGS.output),
    'score': lambda config: score_mode.score(
        FLAGS.workdir, _overrides(), FLAGS.checkpoint, FLAGS.input, FLAGS.targets, FLAGS.output),
    'average': lambda config: inference_modes.average(FLAGS.workdir, _overrides()),
    'info': lambda config: _info(),
    'plot': lambda config: plots.print_learning_curves(FLAGS.workdir),
    'attention': lambda config: attention_mode.run(
        FLAGS.workdir, _overrides(), FLAGS.checkpoint, FLAGS.input, FLAGS.targets, FLAGS.output,
        FLAGS.attention_layer),
    'export': lambda config: export_formats.run(
        FLAGS.workdir, _overrides(), FLAGS.checkpoint, FLAGS.format, FLAGS.output,
        FLAGS.quantization),
    'plan': _plan,
    'import': lambda config: _import(),
    'serve': lambda config: _serve(),
}


def _serve() -> None:
  from t2t_jax.serving import server  # pylint: disable=import-outside-toplevel
  server.serve(FLAGS.workdir, _overrides(), FLAGS.checkpoint, FLAGS.host, FLAGS.port)


def _import() -> None:
  from t2t_jax.pretrained import import_mode
  typed = _override_keys(sys.argv)
  other = [key for key in typed if key not in import_mode.LANGUAGE_KEYS]
  if other:
    raise config_lib.ConfigError(f'--mode=import reads the model\'s keys from --input; '
                                 f'--config.{other[0]} has no effect there: drop it')
  if not FLAGS.input:
    raise config_lib.ConfigError('--mode=import needs --input=DIR, a transformers model directory')
  print(import_mode.run(FLAGS.input, FLAGS.workdir,
                        {key: FLAGS.config[key] for key in typed}))
# plot reads metrics.jsonl only: no cluster to join, nothing to compile; plan compiles for chips
# elsewhere: no cluster, no workdir, and its own cache (plan/cache.py). Neither validates
# --config up front.
BARE_MODES = ('plot', 'plan', 'import')
WORKDIR_FREE_MODES = ('info', 'plan')
# What writes into the workdir (checkpoints and metrics; eval_<split>_<step>.json; averaged/;
# plots/) proves it writable before any work, not after it; decode, attention and export
# only read it (they write --output). A missing workdir is left missing here.
WORKDIR_WRITING_MODES = ('train', 'eval', 'average', 'plot', 'import')


def _resolved_config():
  """--config resolved once (runtime/resolution.py): derived values written out, command-line
  keys with no effect or against the model factory refused, the canonical form train records;
  once the workdir has a checkpoint, the files the config names are provenance. Keys typed
  that do nothing in this mode are named in one line (key_table.py); a mode that reads a
  trained run builds its config from the checkpoint's with the keys that do something there
  (`resolution.with_overrides`, which validates them): None here."""
  global _APPLIED_KEYS  # pylint: disable=global-statement
  typed = _override_keys(sys.argv)
  _APPLIED_KEYS = key_table.check_command(FLAGS.mode, FLAGS.config, typed)
  if FLAGS.mode not in key_table.READS_A_RUN:
    return train_lib.resolve_run(FLAGS.config, FLAGS.workdir, typed)
  checkpoint_choice.remember_factory(FLAGS.workdir, FLAGS.config.get('model', ''))
  inference_modes.check_given_vocabularies(FLAGS.workdir, FLAGS.config, typed)
  return None


def _start_runtime() -> None:
  """The compilation cache, the cluster (with --distributed), jax's backends."""
  from t2t_jax.runtime import backends, compile_cache
  if FLAGS.mode == 'train':  # only there is --config the run's model (others read its own)
    os.environ['XLA_FLAGS'] = backends.with_autotune_level(  # read when the backends start
        os.environ.get('XLA_FLAGS', ''), FLAGS.config.get('d_model'))
  compile_cache.enable(compile_cache.default_dir() if FLAGS.compilation_cache is None
                       else FLAGS.compilation_cache)
  if FLAGS.distributed or FLAGS.coordinator_address:
    cli.native_stdout_to_stderr()  # gloo's connection lines: stdout is the user's output
    from t2t_jax.runtime import parallel
    parallel.initialize_distributed(FLAGS.coordinator_address, FLAGS.num_processes,
                                    FLAGS.process_id, timeout_s=FLAGS.distributed_timeout_s)
  cli.start_backends()
  if FLAGS.distributed or FLAGS.coordinator_address:
    import jax
    if jax.process_index() != 0:
      logging.set_verbosity(logging.WARNING)  # one process speaks for the run


def main(argv) -> None:
  logging.get_absl_handler().addFilter(cli.QuietLibraries())
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  cli.check_paths(FLAGS.workdir, FLAGS.input if FLAGS.mode in ('decode', 'score', 'attention')
                  else None)
  if FLAGS.mode not in WORKDIR_FREE_MODES and not FLAGS.workdir:
    raise config_lib.ConfigError(f'--workdir is required for --mode={FLAGS.mode}')
  config = None
  if FLAGS.mode not in BARE_MODES:
    _start_runtime()
    config = _resolved_config()
  if FLAGS.mode in WORKDIR_WRITING_MODES:
    workdir_lib.check_writable(FLAGS.workdir, create=False)  # train creates it, once checked
  stops_itself = FLAGS.mode in ('train', 'serve')  # a checkpoint first; a drain, then exit 0
  if not stops_itself:
    cli.raise_on_sigterm()
  MODE_FUNCTIONS[FLAGS.mode](config)
  if not stops_itself:
    interruptible.raise_if_signalled()  # one swallowed by a finalizer: reported as any other



def run() -> None:
  """Parses the flags and runs the mode; a user's mistake ends in one line `error: ...` (exit
  1), Ctrl-C in one line too."""
  # `--help` lists the main module's flags (absl: the module named sys.argv[0]); they are
  # defined here, for main.py and the installed command alike.
  for flag in FLAGS.get_key_flags_for_module(__name__):
    FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  try:
    app.run(main, flags_parser=cli.parse_flags)
  except errors.user_errors() as e:
    errors.exit_with(e)
  except KeyboardInterrupt as e:
    cli.exit_interrupted(e)
