"""A full-size dry run of the paper's recipes on CPU (issue 29): everything but the hours.

`configs/wmt_base.py` (the paper's base, 25,000-token steps, accumulated from 4 micro-batches
of 6,250 tokens to fit this machine's memory) on a corpus of WMT14 EN-DE's
size (the `data_scale` corpus: the bundled Bible train split tagged and repeated to
`--pairs`, EN->ES, and a 3000-sentence dev split like newstest2013), on the 8-device CPU
mesh, through the training loop's own objects (`training.train._Run`):

  base        start-up (data, vocabulary, token store, state), `--steps` train steps (each
              with its batch shape; a shape's first step includes its compilation), a
              checkpoint after every step (save time, size on disk), the restore of one, and
              one dev evaluation as the base recipe runs it: teacher-forced loss over the
              3000 dev sentences plus beam-search BLEU (beam 4, alpha 0.6) on 100 of them;
  average     the last 5 base checkpoints averaged (§6.1) in a fresh process: time, peak RSS;
  big_save    `configs/wmt_big.py` (214M parameters; parameters + Adam moments = one state),
              on one CPU device:
              the state initialised, saved 5 times, one restored: seconds and bytes each;
  big_average the 5 big checkpoints averaged in a fresh process, peak RSS against one state,
              and the paper's average of 20 projected from the per-checkpoint cost.

Each stage runs in a child process of its own (its own peak RSS). The corpus and workdirs
live in a temp folder that is deleted at the end.

  python -m benchmarks.scale.wmt_dry_run --pairs 4500000 --out benchmarks/results/wmt_dry_run.jsonl
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict

from benchmarks.scale import data_scale
from benchmarks.shared import common, harness

ROOT = data_scale.ROOT
DEV_SENTENCES = 3000


def _dir_bytes(path: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
             for f in files)


def make_dev(corpus: str) -> None:
  """A 3000-sentence dev split (dev + test of the bundled corpus, tagged and repeated)."""
  import gzip  # pylint: disable=import-outside-toplevel
  for lang in ('en', 'es'):
    lines = []
    for split in ('dev', 'test'):
      with gzip.open(os.path.join(data_scale.BUNDLED, f'{split}.{lang}.gz'), 'rt',
                     encoding='utf-8') as f:
        lines += [line.rstrip('\n') for line in f]
    with open(os.path.join(corpus, f'dev.{lang}'), 'w', encoding='utf-8') as f:
      f.write(''.join(f'{lines[i % len(lines)]} {i // len(lines)}\n'
                      for i in range(DEV_SENTENCES)))
    os.remove(os.path.join(corpus, f'dev.{lang}.gz'))


# A 25,000-token base step holds ~21 GB of activations on CPU (logits alone are 25k x 37000
# float32, twice): more than this 24 GB machine. The dry run accumulates 4 micro-batches of
# 6,250 tokens instead, the same update (`grad_accum_steps`), a quarter of the memory.
GRAD_ACCUM_STEPS = 4


def _base_config(corpus: str, steps: int):
  config = data_scale._config(corpus)  # pylint: disable=protected-access
  config.tokens_per_batch //= GRAD_ACCUM_STEPS
  config.grad_accum_steps = GRAD_ACCUM_STEPS
  config.num_train_steps = steps
  config.checkpoint_every_steps, config.checkpoint_every_minutes = 1, 0.0
  config.keep_checkpoints, config.log_every_steps = 5, 1
  config.eval_every_steps, config.eval_bleu_sentences = steps, 100
  return config


class _Shapes:
  """The training iterator, remembering the shape of the last (micro-)batch it gave."""

  def __init__(self, iterator):
    self.iterator, self.last = iterator, None

  def __next__(self):
    batch = next(self.iterator)
    self.last = list(batch['targets'].shape)
    return batch


def stage_base(corpus: str, workdir: str, steps: int) -> Dict[str, Any]:
  import jax  # pylint: disable=import-outside-toplevel
  from t2t_jax.runtime import checkpoint  # pylint: disable=import-outside-toplevel
  from t2t_jax.training import train  # pylint: disable=import-outside-toplevel
  config = _base_config(corpus, steps)
  out: Dict[str, Any] = {'devices': jax.device_count()}
  with harness.timed() as sw:
    run = train._Run(config, workdir)  # pylint: disable=protected-access
  out['startup_s'] = sw.seconds
  out['train_pipeline'] = run.data.train.info.batches_per_epoch
  step_records = []
  batches = _Shapes(run.data.train)
  for step in range(1, steps + 1):
    compiled = len(run.steps.shapes)
    with harness.timed() as sw:
      run.state, sums = run.steps(run.state, batches)
      jax.block_until_ready(sums)
    step_records.append({'step': step, 'seconds': sw.seconds, 'last_shape': batches.last,
                         'new_shapes': len(run.steps.shapes) - compiled,
                         'real_target_tokens': float(jax.device_get(sums['weight']))})
    with harness.timed() as sw:
      run.checkpointer.save(step, run.state, run.data.train.get_state(), config)
      run.checkpointer.wait()
    step_records[-1]['save_s'] = sw.seconds
    step_records[-1]['checkpoint_bytes'] = _dir_bytes(
        os.path.join(run.checkpointer.directory, str(step)))
  out['steps'] = step_records
  with harness.timed() as sw:
    restored = run.checkpointer.restore(checkpoint.abstract_like(run.state), steps)
    jax.block_until_ready(restored)
  out['restore_s'] = sw.seconds
  del restored
  with harness.timed() as sw:
    result = run.evaluator(steps, run.state.params)
  out['dev_eval_s'] = sw.seconds
  out['dev_eval'] = {k: result[k] for k in ('loss', 'nll', 'bleu') if k in result}
  out['dev_sentences'] = len(run.data.bleu_pairs)
  out['dev_batches'] = len(run.data.eval_batches)
  run.checkpointer.close()
  run.writer.close()
  run.data.train.close()
  out.update(harness.peak_rss())
  return out


def stage_average(workdir: str, num: int) -> Dict[str, Any]:
  from t2t_jax.inference import averaging  # pylint: disable=import-outside-toplevel
  with harness.timed() as sw:
    averaged = averaging.average_checkpoints(workdir, num)
  return {'average_s': sw.seconds, 'steps': list(averaged.steps),
          'averaged_bytes': _dir_bytes(averaged.path), **harness.peak_rss()}


def stage_big_save(workdir: str, saves: int) -> Dict[str, Any]:
  import jax  # pylint: disable=import-outside-toplevel
  sys.path.insert(0, ROOT)
  from configs import wmt_big  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import transformer as model  # pylint: disable=import-outside-toplevel
  from t2t_jax.runtime import checkpoint, parallel  # pylint: disable=import-outside-toplevel
  from t2t_jax.training import optim  # pylint: disable=import-outside-toplevel
  config = wmt_big.get_config()
  mesh = parallel.make_mesh()
  with harness.timed() as sw:
    state = parallel.create_train_state(model.TransformerConfig.from_config(config),
                                        optim.make_optimizer(config), 0, mesh)
    jax.block_until_ready(state)
  out: Dict[str, Any] = {'init_s': sw.seconds}
  leaves = jax.tree_util.tree_leaves(state)
  out['state_bytes'] = sum(x.size * x.dtype.itemsize for x in leaves)
  out['params'] = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
  ckpt = checkpoint.Checkpointer(workdir, keep=saves)
  saves_out = []
  for step in range(1, saves + 1):
    with harness.timed() as sw:
      ckpt.save(step, state, {'epoch': 0}, config)
      ckpt.wait()
    saves_out.append({'step': step, 'save_s': sw.seconds,
                      'bytes': _dir_bytes(os.path.join(ckpt.directory, str(step)))})
  out['saves'] = saves_out
  with harness.timed() as sw:
    jax.block_until_ready(ckpt.restore(checkpoint.abstract_like(state), saves))
  out['restore_s'] = sw.seconds
  ckpt.close()
  out.update(harness.peak_rss())
  return out


STAGES = ('base', 'average', 'big_save', 'big_average')


def _child(stage: str, **options) -> Dict[str, Any]:
  # The base stages on the 8-device CPU mesh; the big ones on one device: the mesh replicates
  # the state on every device, and 8 copies of big's 2.6 GB state do not fit this machine.
  devices = 1 if stage.startswith('big') else 8
  env = dict(os.environ, XLA_FLAGS=(os.environ.get('XLA_FLAGS', '') +
                                    f' --xla_force_host_platform_device_count={devices}').strip(),
             JAX_PLATFORMS='cpu')
  return common.run_stage('benchmarks.scale.wmt_dry_run', stage, options, ROOT, env)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--pairs', type=int, default=4_500_000)
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--stage', choices=STAGES)
  parser.add_argument('--corpus')
  parser.add_argument('--workdir')
  parser.add_argument('--scratch', default=None, help='temp folder (default: $TMPDIR)')
  parser.add_argument('--skip', default='', help='comma-separated stages to leave out')
  harness.add_out_argument(parser)
  args = parser.parse_args()
  if args.stage:
    harness.start_jax()
    result = {'base': lambda: stage_base(args.corpus, args.workdir, args.steps),
              'average': lambda: stage_average(args.workdir, args.steps),
              'big_save': lambda: stage_big_save(args.workdir, 5),
              'big_average': lambda: stage_average(args.workdir, 5)}[args.stage]()
    print(json.dumps(result))
    return
  emit = harness.Emitter(args.out)
  skip = set(filter(None, args.skip.split(',')))
  scratch = tempfile.mkdtemp(prefix='t2t_jax-dry-run-', dir=args.scratch)
  try:
    corpus = os.path.join(scratch, 'corpus')
    made = data_scale.make_corpus(corpus, args.pairs)
    make_dev(corpus)
    base_dir, big_dir = os.path.join(scratch, 'base'), os.path.join(scratch, 'big')
    record = {'name': 'wmt_dry_run', **made}
    if 'base' not in skip:
      emit({**record, 'stage': 'base',
            **_child('base', corpus=corpus, workdir=base_dir, steps=args.steps)})
      emit({**record, 'stage': 'average',
            **_child('average', workdir=base_dir, steps=args.steps)})
    shutil.rmtree(corpus, ignore_errors=True)
    if 'big' not in skip:
      emit({**record, 'stage': 'big_save', **_child('big_save', workdir=big_dir)})
      emit({**record, 'stage': 'big_average', **_child('big_average', workdir=big_dir)})
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
  main()
