"""--config.init_from (training/init_from.py): a run that starts from another run's parameters
and vocabulary, with a fresh optimizer and step, recorded, and resumed as itself."""

import hashlib
import os
import shutil

import pytest
from conftest import TINY, read_metrics, run_main

from t2t_jax import config as config_lib
from t2t_jax.inference import checkpoint_choice, evaluate
from t2t_jax.runtime import resolution
from t2t_jax.training import init_from

# TINY without the vocabulary's training settings, which a given vocabulary makes ineffective
# (refused on the command line).
GIVEN = [a for a in TINY if not a.startswith('--config.vocab_sample')]


def _sha(path):
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


def test_the_spec_names_a_workdir_and_a_checkpoint():
  assert config_lib.init_from_parts('runs/a') == ('runs/a', None)
  assert config_lib.init_from_parts('runs/a:1200') == ('runs/a', '1200')
  assert config_lib.init_from_parts('runs/a:best') == ('runs/a', 'best')
  assert config_lib.init_from_parts('gs://b/run') == ('gs://b/run', None)
  assert config_lib.absolute_value('init_from', 'a:best') == os.path.abspath('a') + ':best'


@pytest.mark.slow  # a whole run (or several compiles): the slow tier
def test_a_fine_tune_starts_from_the_source_and_resumes_as_itself(tiny_workdir, corpus,
                                                                  tmp_path):
  run = str(tmp_path / 'ft')
  args = [f'--workdir={run}', f'--config.local_corpus_dir={corpus}', *GIVEN,
          f'--config.init_from={tiny_workdir}:10', '--config.eval_every_steps=10',
          '--config.num_train_steps=10']
  first = run_main(*args)
  assert first.returncode == 0, first.stderr[-3000:]
  # The source's vocabulary as it is, and its model: the first evaluation (step 0, before any
  # update) is the source checkpoint's dev loss, as --mode=eval computes it.
  assert _sha(os.path.join(run, 'vocab', 'spm.model')) == _sha(
      os.path.join(tiny_workdir, 'vocab', 'spm.model'))
  source = checkpoint_choice.load_inference_params(tiny_workdir, '10')
  config = resolution.from_saved(source.config_json)
  # On a copy: evaluate writes its JSON into the workdir, and tiny_workdir is shared.
  copy = str(tmp_path / 'source')
  shutil.copytree(tiny_workdir, copy)
  expected = evaluate.evaluate(config, copy, 'dev', checkpoint='10', show_progress=False)['loss']
  step0 = next(m for m in read_metrics(run) if m['step'] == 0 and 'eval_dev/loss' in m)
  assert step0['eval_dev/loss'] == pytest.approx(expected, rel=1e-5)
  record = checkpoint_choice.load_inference_params(run, '10').init_record
  assert record['step'] == 10 and record['params_sha256'] == init_from.params_sha256(
      source.params)
  # Rerun with more steps: it resumes its own checkpoint, never re-initialises.
  again = run_main(*args[:-1], '--config.num_train_steps=20')
  assert again.returncode == 0 and 'resumed from step 10' in again.stderr
  assert 'fine-tuning from' not in again.stderr
  info = run_main('--mode=info', f'--workdir={run}', *GIVEN)
  assert f'fine-tuned from {tiny_workdir}/checkpoints/10' in info.stdout


@pytest.mark.parametrize('extra, says', [
    (['--config.d_ff=128'], 'is another model (d_ff: 64 there, 128 here)'),
    (['--config.init_from=nowhere'], 'nowhere is not a folder'),
    (['--config.init_from=.'], 'is not the workdir of a trained run (it has no vocab/spm.model)'),
])
def test_a_source_that_does_not_fit_is_refused_in_one_line(tiny_workdir, corpus, tmp_path,
                                                           extra, says):
  result = run_main(f'--workdir={tmp_path / "ft"}', f'--config.local_corpus_dir={corpus}',
                    *GIVEN, f'--config.init_from={tiny_workdir}', *extra)
  assert result.returncode == 1 and 'Traceback' not in result.stderr
  assert says in result.stderr.splitlines()[-1]


def test_a_given_vocabulary_is_used_as_it_is(tiny_workdir, corpus, tmp_path):
  """--config.vocab_model: copied byte for byte, vocab_size follows it, bad ones refused."""
  given = os.path.join(tiny_workdir, 'vocab', 'spm.model')
  tiny = [a for a in GIVEN if not a.startswith('--config.vocab_size')]
  result = run_main(f'--workdir={tmp_path / "own"}', f'--config.local_corpus_dir={corpus}',
                    *tiny, f'--config.vocab_model={given}', '--config.num_train_steps=2',
                    '--config.checkpoint_every_steps=2')
  assert result.returncode == 0, result.stderr[-3000:]
  assert _sha(tmp_path / 'own' / 'vocab' / 'spm.model') == _sha(given)
  assert checkpoint_choice.load_inference_params(str(tmp_path / 'own')).params[
      'shared_embedding']['embedding'].shape[0] == 400  # vocab_size followed the model
  clash = run_main(f'--workdir={tmp_path / "clash"}', *tiny, f'--config.vocab_model={given}',
                   '--config.vocab_size=500')
  assert clash.returncode == 1 and clash.stderr.splitlines()[-1].endswith(
      'has 400 pieces, but the command line gives --config.vocab_size=500; drop one of the two')
