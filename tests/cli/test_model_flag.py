"""`--config.model=module:factory` through main.py: a variant written in Python (a SwiGLU
feed-forward, in a module of the current folder) trains, decodes, evaluates and exports with
the whole machinery; its checkpoint records the spec, and a folder where the factory cannot
be imported gets one line naming it and the workdir."""

import json
import os

import pytest
from conftest import ROOT, TINY, run_main, short_corpus
from variant_helpers import SWIGLU_MODULE

from t2t_jax import config as config_lib
from t2t_jax.configs import default
from t2t_jax.inference import modes

SPEC = 'my_variants:swiglu'
# TINY, with its config file found from any folder.
ARGS = [f'--config={os.path.join(ROOT, "configs", "quickstart.py")}' if arg.startswith(
    '--config=') else arg for arg in TINY]
REFUSAL = ('error: {workdir} was trained with --config.model=my_variants:swiglu, which cannot '
           "be imported here (No module named 'my_variants'): run from the folder that has it, "
           'or put it on PYTHONPATH')


def _main(cwd, *args):
  """`python main.py ARGS` run from the folder `cwd`."""
  return run_main(*args, cwd=cwd)


def _ok(result):
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def _one_line_error(result, line):
  assert result.returncode == 1, result.stderr[-3000:]
  assert result.stderr.splitlines()[-1] == line, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr and result.stderr.count('error:') == 1


@pytest.fixture
def folder(tmp_path):
  (tmp_path / 'my_variants.py').write_text(SWIGLU_MODULE)
  return tmp_path


def test_info_and_train_name_the_variant_or_refuse_it_before_any_work(folder, corpus):
  info = _ok(_main(folder, '--mode=info', *ARGS, f'--config.model={SPEC}'))
  assert info.stdout.splitlines()[0].endswith(f' model={SPEC}')
  assert 'encoder/layer_0/ffn/gate/kernel' in info.stdout
  assert 'encoder/layer_0/ffn/wi/kernel' not in info.stdout  # the paper's FFN is not there
  workdir = folder / 'run'
  result = _main(folder, f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *ARGS,
                 '--config.model=my_variants:nope')
  _one_line_error(result, "error: --config.model=my_variants:nope cannot be used (cannot "
                  "import name 'nope' from my_variants)")
  assert not workdir.exists()


def test_a_workdir_names_its_factory_when_it_cannot_be_imported(monkeypatch, tmp_path):
  monkeypatch.chdir(tmp_path)
  config = default.get_config()
  modes.check_model('DIR', config)  # the paper's: nothing to import
  config.model = 'my_variants:swiglu'
  with pytest.raises(config_lib.ConfigError) as raised:
    modes.check_model('DIR', config)
  assert f'error: {raised.value}' == REFUSAL.format(workdir='DIR')


def _train_decode_export(folder, corpus, spec):
  """Trains `spec` 10 steps through main.py, decodes three lines and exports the artifact,
  which must translate them as the decode did (beam 2). Returns the workdir."""
  workdir = folder / spec.split(':')[1]
  _ok(_main(folder, f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *ARGS,
            f'--config.model={spec}', '--config.num_train_steps=10',
            '--config.eval_every_steps=0'))
  from t2t_jax.inference import checkpoint_choice  # pylint: disable=import-outside-toplevel
  assert checkpoint_choice.latest_training_config(str(workdir))['model'] == spec
  (folder / 'in.txt').write_text('In the beginning\nAmen.\nAnd God said\n')
  out, hlo = workdir / 'out.txt', workdir / 'hlo'
  _ok(_main(folder, '--mode=decode', f'--workdir={workdir}', f'--input={folder / "in.txt"}',
            f'--output={out}', *QUICK))
  assert len(out.read_text().splitlines()) == 3
  exported = _ok(_main(folder, '--mode=export', '--format=stablehlo', f'--workdir={workdir}',
                       f'--output={hlo}', *QUICK))
  assert exported.stdout.strip() == str(hlo)
  from t2t_jax.inference import portable  # pylint: disable=import-outside-toplevel
  artifact = portable.ExportedTranslator(str(hlo))
  assert artifact.translate((folder / 'in.txt').read_text().splitlines()) == (
      out.read_text().splitlines())
  return workdir


QUICK = ['--config.beam_size=2', '--config.max_decode_extra=4']


@pytest.mark.slow
@pytest.mark.parametrize('name', ['gqa', 'rotary', 't5_bias', 'pre_rmsnorm', 'switch_moe'])
def test_each_example_variant_trains_decodes_and_exports_as_it_decodes(folder, corpus, name):
  """examples/variants.py through main.py: the artifact is the variant, not the paper."""
  workdir = _train_decode_export(folder, corpus, f'my_variants:{name}')
  manifest = json.loads((workdir / 'hlo' / 'manifest.json').read_text())
  expected = {'gqa': 'decoder/layer_0/self_attention/key/kernel',
              'rotary': 'decoder/layer_0/self_attention/query/kernel',
              't5_bias': 'shared/decoder', 'pre_rmsnorm': 'decoder/final_norm/scale',
              'switch_moe': 'decoder/layer_0/ffn/router/kernel'}[name]
  assert expected in manifest['params']
  if name == 'rotary':
    assert not any('positions' in key for key in manifest['params'])
  if name == 'switch_moe':  # CTranslate2 has no expert layers: one line, nothing written
    ct2 = workdir / 'ct2'
    refused = _main(folder, '--mode=export', '--format=ctranslate2', f'--workdir={workdir}',
                    f'--output={ct2}')
    assert refused.returncode == 1 and 'Traceback' not in refused.stderr, refused.stderr[-3000:]
    assert refused.stderr.splitlines()[-1] == (
        "error: CTranslate2 runs the paper's layers; this model replaces its feed_forward: "
        "export it with --format=stablehlo, which runs the model's own code")
    assert not ct2.exists()


@pytest.mark.slow
def test_a_variant_trains_decodes_evaluates_and_exports(folder, corpus):
  # The corpus's training split, 8 short dev sentences to evaluate (not 64 long ones).
  workdir = _train_decode_export(folder, short_corpus(corpus, folder / 'corpus'), SPEC)
  evaluated = json.loads(_ok(_main(folder, '--mode=eval', f'--workdir={workdir}', '--split=dev',
                                   *QUICK)).stdout)
  assert evaluated['sentences'] == 8 and 'bleu' in evaluated
  manifest = json.loads((workdir / 'hlo' / 'manifest.json').read_text())
  assert 'encoder/layer_0/ffn/gate/kernel' in manifest['params']
  # From another folder the module is not there: decode refuses in one line, writes nothing.
  refused = _main(ROOT, '--mode=decode', f'--workdir={workdir}', f'--input={folder / "in.txt"}',
                  f'--output={folder / "refused.txt"}')
  _one_line_error(refused, REFUSAL.format(workdir=workdir))
  assert not (folder / 'refused.txt').exists()


@pytest.mark.slow
def test_the_sliding_window_variant_trains_decodes_and_exports_with_a_window_cache(folder,
                                                                                  corpus):
  """examples/variants.py:sliding_window (decoder_window=16) through main.py by its file path:
  trains, decodes and exports, the artifact translating as the decode did; its model decodes
  with a cache of 16 slots, not max_decode_len."""
  spec = f'{os.path.join(ROOT, "examples", "variants.py")}:sliding_window'
  _train_decode_export(folder, corpus, spec)
  from t2t_jax.model import incremental, variant  # pylint: disable=import-outside-toplevel
  config = default.get_config()
  config.model = spec
  net = variant.from_config(config)
  assert net.cfg.decoder_window == 16
  cache = incremental.init_cache(net, 1, 64)
  assert cache['decoder']['layer_0']['self_attention']['cached_key'].shape[2] == 16
