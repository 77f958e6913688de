"""main.py trains, decodes and describes a model with 3 encoder / 1 decoder layers and untied,
unscaled embeddings: the keys travel from the command line into the checkpoint, and every
mode that reads the run (decode, info --workdir) builds that model."""

import os

import pytest
from conftest import TINY, run_main


@pytest.mark.slow
def test_train_decode_and_info_of_3_1_layers_untied_unscaled(corpus, tmp_path):
  workdir, text = str(tmp_path / 'run'), tmp_path / 'in.txt'
  options = ['--config.num_encoder_layers=3', '--config.num_decoder_layers=1',
             '--config.share_embeddings=False', '--config.scale_embeddings=False']
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY,
                    *options, '--config.num_train_steps=10', '--config.eval_every_steps=0')
  assert result.returncode == 0, result.stderr[-3000:]
  text.write_text('hello world\nthe house\n')
  out = tmp_path / 'out.txt'
  result = run_main('--mode=decode', f'--workdir={workdir}', f'--input={text}',
                    f'--output={out}', *TINY, '--config.beam_size=2')
  assert result.returncode == 0, result.stderr[-3000:]
  assert len(out.read_text().splitlines()) == 2
  # info --workdir: the run's recorded model, not the command line's default one.
  result = run_main('--mode=info', f'--workdir={workdir}', '--config=configs/quickstart.py')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'encoder_layers=3 decoder_layers=1' in result.stdout
  assert 'share_embeddings=False scale_embeddings=False' in result.stdout
  assert 'shared_embedding/projection' in result.stdout
  assert 'decoder/layer_1' not in result.stdout and 'encoder/layer_2' in result.stdout
  # A model key the checkpoint fixes is refused on the command line.
  result = run_main('--mode=info', f'--workdir={workdir}', '--config=configs/quickstart.py',
                    '--config.num_decoder_layers=2')
  assert result.returncode != 0 and 'fixed by the checkpoint' in result.stderr
  assert os.path.isdir(workdir)
