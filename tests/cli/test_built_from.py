"""A run pins what it was built from: a `--config.model` file edited after training is named
by decode, eval, export and resume (a warning; parameters that no longer match stop in one
line naming them), and a relative corpus folder is stored absolute, so eval from another
folder scores the run's corpus, and says so when the data it scores is not the checkpoint's."""

import os

import pytest
from conftest import ROOT, TINY, run_main, short_corpus
from variant_helpers import SWIGLU_MODULE

ARGS = [f'--config={os.path.join(ROOT, "configs", "quickstart.py")}' if arg.startswith(
    '--config=') else arg for arg in TINY] + ['--config.eval_every_steps=0']
# test_model_flag.py's decode settings for the same SwiGLU model: its programs, from the cache.
QUICK = ['--config.beam_size=2', '--config.max_decode_extra=4']


def _main(cwd, *args):
  return run_main(*args, cwd=cwd)


def _ok(result):
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def _one_line_error(result):
  assert result.returncode == 1, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr and result.stderr.count('error:') == 1
  return result.stderr.splitlines()[-1]


@pytest.mark.slow
def test_an_edited_factory_file_is_named_and_renamed_parameters_stop_in_one_line(
    tmp_path, corpus):
  folder = tmp_path / 'a'
  folder.mkdir()
  (folder / 'variants.py').write_text(SWIGLU_MODULE)
  short_corpus(corpus, folder / 'c3k')  # a few short dev lines: evaluated twice below
  workdir = tmp_path / 'run'
  _ok(_main(folder, f'--workdir={workdir}', '--config.local_corpus_dir=c3k', *ARGS,
            '--config.model=variants.py:swiglu', '--config.num_train_steps=10'))
  (tmp_path / 'in.txt').write_text('In the beginning\n')
  decode = ['--mode=decode', f'--workdir={workdir}', f'--input={tmp_path / "in.txt"}', *QUICK]
  assert 'has changed since' not in _ok(_main(tmp_path, *decode)).stderr
  # The same file, nn.silu -> nn.relu: decode works (from any folder: the path is absolute)
  # and says which file changed.
  (folder / 'variants.py').write_text(SWIGLU_MODULE.replace('nn.silu(', 'nn.relu('))
  warned = _ok(_main(tmp_path, *decode)).stderr
  assert f'{folder / "variants.py"} has changed since it was recorded (sha256 ' in warned
  # Eval from another folder holding a corpus of the same relative name: the run's corpus
  # is scored (its path is absolute), and no data warning.
  other = tmp_path / 'b'
  short_corpus(corpus, other / 'c3k')
  # One letter of one reference changed: other data to the fingerprint, the same lengths to
  # the evaluation (its programs are the first evaluation's, not compiled again).
  dev = (other / 'c3k' / 'dev.es').read_text()
  (other / 'c3k' / 'dev.es').write_text(dev.replace('a', 'e', 1))
  evaluated = _ok(_main(other, '--mode=eval', f'--workdir={workdir}', '--split=dev', *QUICK))
  assert 'trained on other data' not in evaluated.stderr
  # ... unless that corpus is asked for: then it says the scores are not the run's.
  evaluated = _ok(_main(other, '--mode=eval', f'--workdir={workdir}', '--split=dev', *QUICK,
                        '--config.local_corpus_dir=c3k'))
  assert (f'was trained on other data than what --split=dev scores now: the dev split of '
          f'{other / "c3k"} (the checkpoint recorded {folder / "c3k"}) is not the one it '
          f'recorded: {other / "c3k" / "dev.es"} (sha256') in evaluated.stderr
  # Resume with the edited file: goes on (same parameters), saying which file changed.
  resumed = _ok(_main(folder, f'--workdir={workdir}', '--config.local_corpus_dir=c3k', *ARGS,
                      '--config.model=variants.py:swiglu', '--config.num_train_steps=20',
                      '--config.final_eval_split='))
  assert 'resuming checkpoint step 10 of' in resumed.stderr and (
      f'{folder / "variants.py"} has changed since' in resumed.stderr)
  # A renamed module: its parameters are not the checkpoint's. Decode, export and resume
  # stop in one line naming them (not flax's traceback, not the checkpoint's files).
  (folder / 'variants.py').write_text(SWIGLU_MODULE.replace("name='gate'", "name='gate2'"))
  for args in (decode, ['--mode=export', '--format=stablehlo', f'--workdir={workdir}',
                        f'--output={tmp_path / "hlo"}']):
    line = _one_line_error(_main(tmp_path, *args))
    assert 'does not hold the parameters of the model' in line, line
    assert ('missing from the checkpoint: decoder/layer_0/ffn/gate2/kernel, encoder/layer_0/'
            'ffn/gate2/kernel; unexpected (not in the model): decoder/layer_0/ffn/gate/kernel'
            in line), line
  line = _one_line_error(_main(folder, f'--workdir={workdir}', '--config.local_corpus_dir=c3k',
                               *ARGS, '--config.model=variants.py:swiglu',
                               '--config.num_train_steps=30'))
  assert 'checkpoint step 20 of' in line and 'unexpected (not in the model): decoder' in line
  assert 'could not be read' not in line
