"""A run moved with its files keeps working in every mode (issue 51, 2): the workdir, its local
corpus and its `--config.model` file moved elsewhere, byte-identical, are accepted by their
content (the data fingerprint, the factory file's sha256); a factory file that is gone is the
checkpoints' record of it (issue 60, 1), and a changed one is still refused."""

import os
import shutil

import pytest
from conftest import ROOT, TINY, run_main, short_corpus

WINDOW = 'import t2t_jax\n\ndef win(cfg):\n  return t2t_jax.Transformer(cfg.replace(decoder_window=8))\n'
ARGS = [f'--config={os.path.join(ROOT, "configs", "quickstart.py")}' if a.startswith('--config=')
        else a for a in TINY if not a.startswith('--config.num_layers')]


def _main(cwd, *args, input=None):
  return run_main(*ARGS, *args, cwd=cwd, input=input)


def _ok(result):
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@pytest.mark.slow
def test_a_run_moved_with_its_corpus_and_factory_works_in_every_mode(tmp_path, corpus):
  short_corpus(corpus, tmp_path / 'A')  # a copy of its own, to move (a short dev split)
  os.makedirs(tmp_path / 'F')
  (tmp_path / 'F' / 'myvar.py').write_text(WINDOW)
  _ok(_main(tmp_path, '--workdir=W1', '--config.local_corpus_dir=A', '--config.num_layers=1',
            '--config.model=F/myvar.py:win', '--config.num_train_steps=10'))
  for old, new in (('A', 'B'), ('F', 'G'), ('W1', 'W2')):
    os.rename(tmp_path / old, tmp_path / new)

  # The recorded file has moved: the checkpoints' record of it is what the run loads.
  _ok(_main(tmp_path, '--mode=eval', '--workdir=W2', '--config.local_corpus_dir=B'))

  model = '--config.model=G/myvar.py:win'
  # Resume: the same model spelt otherwise, the corpus and the factory file moved.
  resumed = _ok(_main(tmp_path, '--workdir=W2', '--config.local_corpus_dir=B', model,
                      '--config.num_encoder_layers=1', '--config.num_decoder_layers=1',
                      '--config.num_train_steps=20'))
  assert 'the corpus moved from' in resumed.stderr
  assert os.path.isdir(tmp_path / 'W2' / 'checkpoints' / '20')
  _ok(_main(tmp_path, '--mode=eval', '--workdir=W2', '--config.local_corpus_dir=B', model))
  _ok(_main(tmp_path, '--mode=average', '--workdir=W2', '--config.average_last=2', model))
  decoded = _ok(_main(tmp_path, '--mode=decode', '--workdir=W2', model, input='In the beginning\n'))
  assert len(decoded.stdout.splitlines()) == 1
  info = _ok(_main(tmp_path, '--mode=info', '--workdir=W2', model)).stdout
  assert '  decoder_window            = 8' in info and '  num_decoder_layers        = 1' in info
  (tmp_path / 'in.txt').write_text('In the beginning\n')
  _ok(_main(tmp_path, '--mode=attention', '--workdir=W2', model, '--input=in.txt',
            '--output=maps'))
  _ok(_main(tmp_path, '--mode=export', '--format=stablehlo', '--workdir=W2', model,
            '--output=exported'))

  # Another content is another model: refused, naming the key.
  with open(tmp_path / 'G' / 'myvar.py', 'a') as f:
    f.write('# edited\n')
  os.rename(tmp_path / 'G', tmp_path / 'H')
  changed = _main(tmp_path, '--mode=eval', '--workdir=W2', '--config.model=H/myvar.py:win')
  assert changed.returncode == 1 and 'Traceback' not in changed.stderr
  assert "config key 'model' would change the model fixed by the checkpoint" in changed.stderr, changed.stderr.splitlines()[-1]


@pytest.mark.slow
def test_a_workdir_needs_none_of_the_files_it_came_from_once_it_has_a_checkpoint(tmp_path,
                                                                                  corpus):
  """Issue 60, 1: a parent run P with a given vocabulary and a factory file, and its fine-tune
  C, moved with every input (corpus, vocabulary model, factory file, parent); then every input
  but the corpus deleted. What the modes read comes from each workdir's own record."""
  short_corpus(corpus, tmp_path / 'A')
  os.makedirs(tmp_path / 'F')
  (tmp_path / 'F' / 'myvar.py').write_text(WINDOW)
  model = '--config.model=F/myvar.py:win'
  _ok(_main(tmp_path, '--workdir=P', '--config.local_corpus_dir=A', '--config.num_layers=1',
            model, '--config.num_train_steps=10'))
  os.makedirs(tmp_path / 'V')
  os.replace(tmp_path / 'P' / 'vocab' / 'spm.model', tmp_path / 'V' / 'mine.model')
  shutil.rmtree(tmp_path / 'P')  # P again, now with a given vocabulary
  parent = ['--config.local_corpus_dir=A', '--config.num_layers=1', model,
            '--config.vocab_model=V/mine.model']
  _ok(_main(tmp_path, '--workdir=P', *parent, '--config.num_train_steps=10'))
  child = ['--config.local_corpus_dir=A', '--config.num_layers=1', model, '--config.init_from=P']
  _ok(_main(tmp_path, '--workdir=C', *child, '--config.num_train_steps=10'))

  for old, new in (('A', 'B'), ('F', 'G'), ('V', 'U'), ('P', 'P2'), ('C', 'C2')):
    os.rename(tmp_path / old, tmp_path / new)
  for gone in ('G', 'U'):
    shutil.rmtree(tmp_path / gone)

  # The parent: resumed with the same command (its vocabulary and factory gone), corpus moved.
  corpus_moved = ['--config.local_corpus_dir=B']
  resumed = _ok(_main(tmp_path, '--workdir=P2', *parent, *corpus_moved,
                      '--config.num_train_steps=20'))
  assert 'the corpus moved from' in resumed.stderr
  # The fine-tune: resumed with or without init_from (its parent moved), eval, decode, score,
  # info, export; then fine-tuned from.
  _ok(_main(tmp_path, '--workdir=C2', *child, *corpus_moved, '--config.num_train_steps=20'))
  shutil.rmtree(tmp_path / 'P2')
  _ok(_main(tmp_path, '--workdir=C2', '--config.local_corpus_dir=B', '--config.num_layers=1',
            model, '--config.num_train_steps=30'))
  assert sorted(os.listdir(tmp_path / 'C2' / 'checkpoints')) == ['10', '20', '30']
  _ok(_main(tmp_path, '--mode=eval', '--workdir=C2', '--config.local_corpus_dir=B'))
  decoded = _ok(_main(tmp_path, '--mode=decode', '--workdir=C2', input='In the beginning\n'))
  assert len(decoded.stdout.splitlines()) == 1
  (tmp_path / 'src.txt').write_text('In the beginning\n')
  (tmp_path / 'tgt.txt').write_text('En el principio\n')
  scored = _ok(_main(tmp_path, '--mode=score', '--workdir=C2', '--input=src.txt',
                     '--targets=tgt.txt'))
  assert float(scored.stdout.split()[0]) < 0
  info = _ok(_main(tmp_path, '--mode=info', '--workdir=C2')).stdout
  assert '  decoder_window            = 8' in info and 'fine-tuned from' in info
  _ok(_main(tmp_path, '--mode=export', '--format=stablehlo', '--workdir=C2', '--output=out'))
  _ok(_main(tmp_path, '--workdir=D', '--config.local_corpus_dir=B', '--config.num_layers=1',
            model, '--config.init_from=C2', '--config.num_train_steps=10'))
  with open(tmp_path / 'C2' / 'vocab' / 'spm.model', 'rb') as f, \
       open(tmp_path / 'D' / 'vocab' / 'spm.model', 'rb') as g:
    assert f.read() == g.read()
