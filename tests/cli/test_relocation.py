"""A run moved with its files keeps working in every mode (issue 51, 2): the workdir, its local
corpus and its `--config.model` file moved elsewhere, byte-identical, are accepted by their
content (the data fingerprint, the factory file's sha256); a recorded file that is gone gets
advice that works, and a changed one is still refused."""

import hashlib
import os
import subprocess

import pytest
from conftest import ROOT, TINY, main_command, short_corpus

WINDOW = 'import t2t_jax\n\ndef win(cfg):\n  return t2t_jax.Transformer(cfg.replace(decoder_window=8))\n'
ARGS = [f'--config={os.path.join(ROOT, "configs", "quickstart.py")}' if a.startswith('--config=')
        else a for a in TINY if not a.startswith('--config.num_layers')]


def _main(cwd, *args, input=None):
  return subprocess.run(main_command(*ARGS, *args), cwd=cwd, capture_output=True, text=True,
                        timeout=600, input=input)


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

  # The recorded file is gone: the advice names the flag that points at its new place.
  gone = _main(tmp_path, '--mode=eval', '--workdir=W2', '--config.local_corpus_dir=B')
  assert gone.returncode == 1 and 'Traceback' not in gone.stderr
  assert gone.stderr.splitlines()[-1].endswith(
      'if myvar.py moved, name its new place with --config.model=NEW/PATH/myvar.py:win; a file '
      f'with the recorded content (sha256 {_sha(tmp_path / "G" / "myvar.py")[:12]}...) is '
      'accepted'), gone.stderr[-2000:]

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


def _sha(path):
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()
