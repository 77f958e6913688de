"""`export_stablehlo_model`: the StableHLO artifact of a model, its parameters and vocabulary
in memory (no workdir) is the workdir export's (same files, same serve.py), translates as
`Translator` with the same settings, and bad requests fail in one line, writing nothing."""

import gzip
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip('flatbuffers')

import t2t_jax  # noqa: E402
from conftest import BUNDLED  # noqa: E402
from export_helpers import PieceTokenizer, random_params  # noqa: E402
from t2t_jax.data import tokenizer  # noqa: E402
from t2t_jax.export import common, stablehlo_export  # noqa: E402
from t2t_jax.inference import portable, translate  # noqa: E402
from t2t_jax.model import transformer as model  # noqa: E402

VOCAB = 120
# Two layers of sharpened random weights: sentences get different, clear-cut translations.
CFG = model.TransformerConfig(vocab_size=VOCAB, d_model=32, d_ff=64, num_heads=4, d_k=8,
                              d_v=8, num_layers=2, max_len=32, deterministic=True)
SETTINGS = dict(beam_size=2, alpha=0.6, max_decode_extra=50, batch_sentences=2,
                bucket_lengths=(16, 32))


def _lines(lang, count):
  with gzip.open(os.path.join(BUNDLED, f'train.{lang}.gz'), 'rt', encoding='utf-8') as f:
    return [next(f).rstrip('\n') for _ in range(count)]


@pytest.fixture(scope='module')
def tok(tmp_path_factory):
  """A 120-piece vocabulary of 800 bundled lines (a fraction of a second)."""
  path = tmp_path_factory.mktemp('vocab') / 'spm.model'
  return tokenizer.train(_lines('en', 400) + _lines('es', 400), VOCAB, str(path))


@pytest.mark.slow
def test_the_artifact_of_a_model_in_memory_translates_as_translator(tok, tmp_path):
  params = random_params(CFG)
  output = t2t_jax.export_stablehlo_model(CFG, params, tok, str(tmp_path / 'hlo'),
                                          description='random weights', **SETTINGS)
  assert output == str(tmp_path / 'hlo')
  # The files of `--mode=export --format=stablehlo`, one module per bucket a batch can have.
  assert sorted(os.listdir(output)) == ['decode_16x32.stablehlo', 'decode_32x32.stablehlo',
                                        'manifest.json', 'params.npz', 'serve.py', 'spm.model']
  with open(os.path.join(output, 'manifest.json')) as f:
    manifest = json.load(f)
  assert (manifest['beam_size'], manifest['length_penalty_alpha'], manifest['rows'],
          manifest['max_decode_extra'], manifest['bucket_lengths'], manifest['max_len'],
          manifest['checkpoint'], manifest['platforms'], manifest['length_penalty_rule']) == (
              2, 0.6, 2, 50, [16, 32], 32, 'random weights', ['cpu', 'cuda', 'tpu'], 'gnmt')
  with open(os.path.join(output, 'spm.model'), 'rb') as f, open(tok.path, 'rb') as g:
    assert f.read() == g.read()
  with open(os.path.join(output, 'serve.py')) as f, open(portable.__file__) as g:
    assert f.read() == g.read()

  # Short sentences, a blank line and one cut to max_len: three batches, two buckets.
  sentences = ['Amen.', 'And God said.', 'Let there be light.', 'In the beginning', '',
               ' '.join(_lines('en', 6))]
  translator = translate.Translator(CFG, params, tok, **SETTINGS)
  expected = translator.translate(sentences)
  assert translator.compiled_shapes == {(16, 32), (32, 32)}
  assert expected[4] == '' and len(set(expected[:4])) >= 3  # the sources matter
  exported = portable.ExportedTranslator(output)
  assert exported.translate(sentences) == expected
  assert exported.truncated_lines == translator.truncated_lines == [6]


  # `python serve.py` where nobody chose a platform: where libtpu is installed (the README's
  # install line has it) and this is no TPU VM, serve.py names cpu as `import t2t_jax` does,
  # so libtpu's failed TPU start-up ('E0000 ... unexpected worker hostname') is not printed.
  env = {k: v for k, v in os.environ.items() if k not in ('JAX_PLATFORMS', 'PYTHONPATH')}
  run = subprocess.run([sys.executable, os.path.join(output, 'serve.py')], input='Amen.\n',
                       capture_output=True, text=True, timeout=300, cwd=output, env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout == expected[0] + '\n'
  assert 'E0000' not in run.stderr and 'TPU' not in run.stderr, run.stderr[-3000:]


def test_bad_requests_fail_in_one_line_and_write_nothing(tok, tmp_path):
  (tmp_path / 'taken').mkdir()
  params, new = random_params(CFG), str(tmp_path / 'new')
  export = stablehlo_export.export_stablehlo_model
  # A library call names its arguments: no --flags, no workdir (there is none).
  with pytest.raises(FileExistsError, match=rf'^export_stablehlo_model: output={tmp_path}/taken '
                     'already exists; '):
    export(CFG, params, tok, str(tmp_path / 'taken'))
  with pytest.raises(tokenizer.TokenizerError, match=rf'^export_stablehlo_model: tokenizer='
                     rf'{tmp_path}/none.model: no such file; expected the SentencePiece .model '
                     'file the model was trained with$'):
    export(CFG, params, str(tmp_path / 'none.model'), new)
  (tmp_path / 'taken' / 'text.model').write_text('not a model\n')
  with pytest.raises(tokenizer.TokenizerError) as error:
    export(CFG, params, str(tmp_path / 'taken' / 'text.model'), new)
  assert str(error.value) == (f'export_stablehlo_model: tokenizer={tmp_path}/taken/text.model '
                              'is not a SentencePiece model t2t_jax can use (12 bytes that are '
                              'not a SentencePiece model)')
  without_decoder = {k: v for k, v in params.items() if k != 'decoder'}
  for bad, message in [
      (dict(platforms=('gpu9',)), r"platforms=\('gpu9',\): unknown platform 'gpu9'; "
       'jax.export lowers for cpu, cuda, rocm, tpu'),
      (dict(platforms=()), r'platforms=\(\): expected a non-empty tuple of platforms'),
      (dict(params=None), 'params is a NoneType; expected the model\'s parameter tree'),
      (dict(params=without_decoder), r'params has no decoder/layer_0/\S+ \(\d+ more differ\); '
       'are they the parameters of this model\\?'),
      (dict(params={'params': params}), 'params has no '),
      (dict(model=CFG.replace(d_ff=32)), r'params decoder/layer_0/ffn/wi/bias is \(64,\), the '
       r"model's \(32,\)"),
      (dict(tokenizer=PieceTokenizer()), 'tokenizer is a PieceTokenizer; expected the SentencePiece .model '
       'path or a t2t_jax.data.tokenizer.Tokenizer'),
      (dict(model=CFG.replace(vocab_size=100), params=random_params(CFG.replace(
          vocab_size=100))), f"{tok.path} has 120 pieces but the model's vocab_size is 100: "
       r'ids 100\.\.119 have no embedding; expected the SentencePiece model the model was '
       r'trained with \(100 pieces\)$'),
      # Each setting says what it expects, not only that it is not valid (issue 51 x7).
      (dict(beam_size=0), r'beam_size=0 is not a valid setting: expected an int >= 1 \(1: '
       r'greedy\)$'),
      (dict(max_decode_extra=-1), 'max_decode_extra=-1 is not a valid setting: expected an '
       'int >= 0'),
      (dict(batch_sentences=2.0), 'batch_sentences=2.0 is not a valid setting: expected an '
       'int >= 1$'),
      (dict(alpha=float('nan')), 'alpha=nan is not a valid setting: expected a finite number'),
      (dict(length_rule='hf'), "length_rule='hf' is not a valid setting: expected one of gnmt, "
       'transformers$'),
      (dict(bucket_lengths=(32, 16)), r'bucket_lengths=\(32, 16\) is not a valid setting: '
       r'expected a non-empty, strictly increasing sequence of ints >= 1, e.g. \(16, 32\) for '
       "the model's max_len 32$"),
      (dict(bucket_lengths=()), r'bucket_lengths=\(\) is not a valid setting: expected a '
       'non-empty, strictly increasing sequence of ints >= 1, e.g. '),
      (dict(bucket_lengths=16), 'bucket_lengths=16 is not a valid setting: expected a '
       'non-empty, '),
      # A batch of 17 to 31 tokens would be padded to 64 > max_len.
      (dict(bucket_lengths=(16, 64)), r'bucket_lengths=\(16, 64\) is not a valid setting: '
       "expected buckets a batch is padded to within the model's max_len 32: a batch of 17 "
       r'to 31 tokens would be padded to 64; e.g. \(16, 32\)$')]:
    args = {**dict(model=CFG, params=params, tokenizer=tok, output=new), **bad}
    with pytest.raises(common.ExportError, match=f'^export_stablehlo_model: {message}'):
      export(**args)
  assert sorted(os.listdir(tmp_path)) == ['taken']
  assert os.listdir(tmp_path / 'taken') == ['text.model']


def test_a_vocabulary_smaller_than_the_model_is_refused_before_anything_is_written(
    tok, tmp_path):
  """Issue 51 x8: a 120-piece vocabulary for a 150-id model was exported and passed its
  self-check (both sides decode to the same ids), and serve.py died on the first id >= 120
  (`IndexError: OUT_OF_RANGE`). The vocabulary must be the model's: as many pieces as ids."""
  big = CFG.replace(vocab_size=150)
  output = str(tmp_path / 'hlo')
  with pytest.raises(common.ExportError) as error:
    stablehlo_export.export_stablehlo_model(big, random_params(big), tok, output, **SETTINGS)
  assert str(error.value) == (
      f"export_stablehlo_model: {tok.path} has 120 pieces but the model's vocab_size is 150: "
      'the model can output ids 120..149, which have no piece, so the export could not decode '
      'them; expected the SentencePiece model the model was trained with (150 pieces)')
  # The run's exports (`--mode=export`, `export_stablehlo`, `formats.export`) check their
  # `ExportSource` the same way, whichever format.
  source = common.ExportSource(None, random_params(big), tok.path, 'random weights', big)
  with pytest.raises(common.ExportError, match=rf"^{tok.path} has 120 pieces but the model's "
                     'vocab_size is 150: the model can output ids 120..149'):
    stablehlo_export.write_artifact(source, output)
  assert os.listdir(tmp_path) == []


def test_a_vocabulary_with_other_special_ids_is_refused(tmp_path):
  """The artifact pads with id 0 and ends with EOS id 1 (`portable.PAD_ID`, `EOS_ID`): a
  SentencePiece model with other ids would translate to other pieces."""
  import sentencepiece as spm
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(_lines('en', 300)), model_prefix=str(tmp_path / 'other'),
      model_type='bpe', vocab_size=VOCAB, bos_id=0, eos_id=2, unk_id=1, pad_id=-1,
      minloglevel=2)
  with pytest.raises(tokenizer.TokenizerError, match=r'^export_stablehlo_model: tokenizer='
                     rf'{tmp_path}/other.model is not a SentencePiece model t2t_jax can use '
                     r'\(ids \(pad, eos, unk, bos\) are \(-1, 2, 1, 0\); t2t_jax needs '
                     r'\(0, 1, 2, -1\): train it with --pad_id=0 --eos_id=1 --unk_id=2 '
                     r'--bos_id=-1\)$'):
    stablehlo_export.export_stablehlo_model(CFG, random_params(CFG), str(
        tmp_path / 'other.model'), str(tmp_path / 'hlo'), **SETTINGS)
  assert not os.path.exists(tmp_path / 'hlo')
