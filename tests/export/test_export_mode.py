"""`main.py --mode=export` on a trained tiny model: the CTranslate2 model translates (greedy)
and scores like ours; the StableHLO artifact, run by a process that cannot import flax or
t2t_jax, reproduces `Translator` exactly; bad requests fail in one line, writing nothing."""

import gzip
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from etils import epath

from conftest import BUNDLED, run_main

ctranslate2 = pytest.importorskip('ctranslate2')
pytest.importorskip('flatbuffers')

from t2t_jax import config as config_lib  # noqa: E402
from t2t_jax.export import ctranslate2_decoding  # noqa: E402
from t2t_jax.inference import checkpoint_choice  # noqa: E402
from t2t_jax.export import common, formats  # noqa: E402
from t2t_jax.inference import translate  # noqa: E402
from t2t_jax.model import transformer as model  # noqa: E402
from t2t_jax.data import tokenizer  # noqa: E402
from export_helpers import log_probs  # noqa: E402

# Only what the artifact's runtime may use: these imports fail in its process.
_ONLY_JAX = ("import sys; sys.modules.update(dict.fromkeys(['flax', 'optax', 'orbax', "
             "'t2t_jax', 'tensorflow_datasets', 'grain', 'ml_collections'])); ")


@pytest.fixture(scope='module')
def workdir(tiny_workdir):
  return tiny_workdir


def _test_lines(lang, count):
  with gzip.open(os.path.join(BUNDLED, f'test.{lang}.gz'), 'rt', encoding='utf-8') as f:
    return [next(f).rstrip('\n') for _ in range(count)]


def _ours(workdir, **overrides):
  inference = checkpoint_choice.load_inference_params(workdir)
  config = config_lib.from_json(inference.config_json)
  for key, value in overrides.items():
    config[key] = value
  tok = tokenizer.load(tokenizer.vocab_path(workdir))
  return config, inference.params, tok


@pytest.mark.slow
def test_ctranslate2_export_scores_and_translates_like_ours(workdir, tmp_path):
  output = str(tmp_path / 'ct2')
  result = run_main('--mode=export', '--format=ctranslate2', f'--workdir={workdir}',
                    f'--output={output}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == output
  assert sorted(os.listdir(output)) == ['config.json', 'model.bin', 'shared_vocabulary.json',
                                        'spm.model', 't2t_jax_decoding.json']
  with open(os.path.join(output, 't2t_jax_decoding.json')) as f:
    assert json.load(f)['checkpoint'] == 'training checkpoint step 10'

  config, params, tok = _ours(workdir)
  cfg = model.TransformerConfig.from_config(config)
  pairs = [(s, t) for s, t in zip(_test_lines('en', 40), _test_lines('es', 40))
           if len(tok.encode(s)) < 40][:16]
  sources = [s for s, _ in pairs]
  ours = translate.Translator(cfg, params, tok, beam_size=1, alpha=0.0, max_decode_extra=50,
                              batch_sentences=16, bucket_lengths=(32,)).translate_ids(sources)
  ct2 = ctranslate2.Translator(output, device='cpu', intra_threads=1)
  theirs = ctranslate2_decoding.translate(ct2, [tok.pieces(tok.encode(s)) for s in sources],
                                          beam_size=1, max_decode_extra=50, max_len=cfg.max_len)
  assert theirs == [tok.pieces(row) for row in ours]

  targets = [tok.encode(t) for _, t in pairs]
  scored = ct2.score_batch([tok.pieces(tok.encode(s)) for s in sources],
                           [tok.pieces(t) for t in targets])
  expected = log_probs(cfg, params, [tok.encode(s) for s in sources], targets)
  for result, ours_row in zip(scored, expected):
    np.testing.assert_allclose(result.log_probs, ours_row, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_stablehlo_artifact_reproduces_translator_without_flax(workdir, tmp_path):
  # The trained tiny model says ',,,,' to everything; random weights of two layers translate
  # each of the sentences below differently (and run on to their maximum lengths).
  config, _, tok = _ours(workdir, decode_batch_sentences=2, beam_size=2, num_layers=2,
                         max_len=32)
  cfg = model.TransformerConfig.from_config(config)
  params = jax.jit(model.init_params, static_argnums=0)(cfg, jax.random.PRNGKey(0))
  source = common.ExportSource(config, params, tokenizer.vocab_path(workdir), 'random')
  output = formats.export('stablehlo', source, str(tmp_path / 'hlo'))
  with open(os.path.join(output, 'manifest.json')) as f:
    manifest = json.load(f)
  assert (manifest['rows'], manifest['beam_size'], manifest['max_len']) == (2, 2, 32)
  assert [(b['source_length'], b['max_decode_len']) for b in manifest['buckets']] == [
      (16, 32), (32, 32)]
  # One lowering per platform in every module, so the artifact runs on GPU and TPU hosts too
  # (what those lowerings compute is checked in tests/runtime/test_gpu_lowering.py).
  assert manifest['platforms'] == ['cpu', 'cuda', 'tpu']
  for bucket in manifest['buckets']:
    with open(os.path.join(output, bucket['file']), 'rb') as f:
      exported = jax.export.deserialize(bytearray(f.read()))
    assert exported.platforms == ('cpu', 'cuda', 'tpu')
    assert exported.out_avals[0].shape == (2, bucket['max_decode_len'])

  # Short sentences, a blank line and one cut to max_len: three batches, two buckets.
  short = ['Amen.', 'And God said.'] + sorted(_test_lines('en', 64),
                                               key=lambda s: len(tok.encode(s)))[:3]
  sentences = short + ['', ' '.join(_test_lines('en', 8))]
  translator = translate.from_config(config, params, tok)
  expected = translator.translate(sentences)
  assert translator.truncated_lines == [7]
  assert translator.compiled_shapes == {(16, 32), (32, 32)}
  assert expected[5] == '' and len(set(expected[:5])) >= 3  # the sources matter

  # `python serve.py < input` in a process where flax, optax, orbax and t2t_jax cannot be
  # imported.
  code = (_ONLY_JAX + f'sys.argv = ["serve.py"]; import runpy; '
          f'runpy.run_path({os.path.join(output, "serve.py")!r}, run_name="__main__")')
  run = subprocess.run([sys.executable, '-c', code], input='\n'.join(sentences) + '\n',
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=''))
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout == ''.join(line + '\n' for line in expected)
  assert '1 inputs were cut to max_len: lines [7]' in run.stderr


def test_stablehlo_export_to_gcs_uploads_the_artifact_and_refuses_an_existing_output(
    workdir, gcs_dir):
  config, params, tok = _ours(workdir, bucket_lengths=(32,), max_length=32, max_len=32)
  source = common.ExportSource(config, params, tokenizer.vocab_path(workdir), 'tiny')
  output = f'{gcs_dir}/hlo/'  # a trailing '/' names the same folder
  assert formats.export('stablehlo', source, output) == f'{gcs_dir}/hlo'
  folder = epath.Path(gcs_dir, 'hlo')
  assert sorted(p.name for p in folder.iterdir()) == [
      'decode_32x32.stablehlo', 'manifest.json', 'params.npz', 'serve.py', 'spm.model']
  manifest = json.loads((folder / 'manifest.json').read_text())
  assert manifest['checkpoint'] == 'tiny' and manifest['buckets'][0]['file'] == (
      'decode_32x32.stablehlo')
  exported = jax.export.deserialize(bytearray((folder / 'decode_32x32.stablehlo').read_bytes()))
  assert exported.out_avals[0].shape == (config.decode_batch_sentences, 32)
  with open(tokenizer.vocab_path(workdir), 'rb') as f:
    assert (folder / 'spm.model').read_bytes() == f.read()
  with pytest.raises(FileExistsError, match=rf'^--output={output} already exists'):
    formats.export('stablehlo', source, output)
  assert len(list(folder.iterdir())) == 5  # nothing written again


@pytest.mark.parametrize('args,message', [
    (['--format=onnx'], 'flag --format=onnx: value should be one of <ctranslate2|stablehlo|huggingface>'),
    ([], '--mode=export needs --format=ctranslate2 or --format=stablehlo or --format=huggingface'),
    (['--format=ctranslate2', '--output={tmp}/taken'], '--output={tmp}/taken already exists; '
     'choose a new directory or remove it (nothing was written)'),
    (['--format=stablehlo'], 'no checkpoint in workdir {tmp}/empty: looked in '
     '{tmp}/empty/checkpoints and {tmp}/empty/averaged'),
    (['--format=ctranslate2', '--config.decode_strategy=sample'], '--config.decode_strategy: '
     'an export does not decode, so it carries no decoding options; give them when translating '
     '(CTranslate2: num_hypotheses, sampling_topk/sampling_topp/sampling_temperature, '
     "no_repeat_ngram_size, target_prefix; the StableHLO artifact decodes with the paper's "
     'beam search)'),
], ids=['unknown-format', 'no-format', 'existing-output', 'no-checkpoint', 'decoding-key'])
def test_bad_export_requests_fail_in_one_line(tmp_path, args, message):
  (tmp_path / 'taken').mkdir()
  (tmp_path / 'taken' / 'keep').write_text('keep me')
  (tmp_path / 'empty').mkdir()
  args = [a.format(tmp=tmp_path) for a in args]
  if not any(a.startswith('--output=') for a in args):
    args.append(f'--output={tmp_path}/new')
  result = run_main('--mode=export', f'--workdir={tmp_path}/empty', *args)
  assert result.returncode == 1
  assert result.stderr == f'error: {message.format(tmp=tmp_path)}\n'
  assert sorted(os.listdir(tmp_path)) == ['empty', 'taken']
  assert os.listdir(tmp_path / 'empty') == []
  assert (tmp_path / 'taken' / 'keep').read_text() == 'keep me'


@pytest.mark.parametrize('export_format,quantization,message', [
    ('onnx', None, "--mode=export needs --format=ctranslate2 or --format=stablehlo or "
                   "--format=huggingface, got 'onnx'"),
    ('ctranslate2', 'int3', '--quantization=int3: unknown; CTranslate2 accepts int8, '
     'int8_float32, int8_float16, int8_bfloat16, int16, float16, bfloat16, float32'),
    ('stablehlo', 'int8', '--quantization=int8 applies to --format=ctranslate2 only; the '
     'StableHLO artifact keeps float32 parameters'),
])
def test_requests_are_checked_before_any_checkpoint_is_read(tmp_path, export_format,
                                                            quantization, message):
  with pytest.raises(common.ExportError) as error:
    formats.check_request(export_format, str(tmp_path / 'new'), quantization)
  assert str(error.value) == message
  assert os.listdir(tmp_path) == []



def test_a_parsing_model_is_refused_before_anything_is_written(workdir, tmp_path):
  config, params, _ = _ours(workdir, dataset='treebank')
  source = common.ExportSource(config, params, tokenizer.vocab_path(workdir), 'tiny parser')
  for export_format in formats.FORMATS:
    with pytest.raises(common.ExportError) as error:
      formats.export(export_format, source, str(tmp_path / export_format))
    assert str(error.value) == (
        'export supports translation runs; the model (tiny parser) is a parsing run '
        '(dataset=treebank): use --mode=decode, which outputs trees')
  assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_exporting_a_parsing_run_fails_in_one_line_and_writes_nothing(tmp_path):
  # What --mode=decode of a parsing run prints are trees made from the model's tokens; an
  # exported model would print the tokens, so export refuses instead of serving another output.
  from t2t_jax.parsing import grammar
  bank, run = str(tmp_path / 'treebank'), str(tmp_path / 'run')
  grammar.write_treebank(bank, {'train': 300, 'dev': 8, 'test': 12}, seed=5)
  result = run_main(
      '--config=configs/parsing_synthetic.py', f'--workdir={run}', f'--config.treebank_dir={bank}',
      '--config.vocab_size=200', '--config.d_model=32', '--config.d_ff=64',
      '--config.num_heads=4', '--config.num_layers=1', '--config.max_len=160',
      '--config.max_length=128', '--config.bucket_lengths=(128,)',
      '--config.tokens_per_batch=2048', '--config.num_train_steps=1',
      '--config.checkpoint_every_steps=1', '--config.eval_every_steps=0',
      '--config.final_eval_split=')
  assert result.returncode == 0, result.stderr[-3000:]
  before = sorted(os.listdir(tmp_path))
  for export_format in formats.FORMATS:
    result = run_main('--mode=export', f'--format={export_format}', f'--workdir={run}',
                      f'--output={tmp_path}/exported')
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f'error: export supports translation runs; {run} is a parsing run (dataset=treebank): '
        'use --mode=decode, which outputs trees')
    assert 'Traceback' not in result.stderr and result.stdout == ''
    assert sorted(os.listdir(tmp_path)) == before  # no --output, no temporary directory
