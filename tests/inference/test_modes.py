"""modes.decode's --output: claimed before any work, released when the decode fails.

The checkpoint, tokenizer and translation are stubbed: what is tested is when the output file
is created, refused, replaced and removed, not the model."""

import os
import types

import pytest
from etils import epath

from configs import default
from t2t_jax import config as config_lib
from t2t_jax.inference import modes


@pytest.fixture
def stubbed(monkeypatch, tmp_path):
  """modes.decode with fakes below `load`; `calls` lists the outputs whose load ran, and
  `during_load` (settable) runs inside load, while the decode holds its output."""
  state = types.SimpleNamespace(calls=[], during_load=None, source=tmp_path / 'in.txt')
  state.source.write_text('one\ntwo\n')

  def load(workdir, checkpoint, overrides):
    state.calls.append(workdir)
    if state.during_load:
      state.during_load()
    return default.get_config(), types.SimpleNamespace(params=None)

  monkeypatch.setattr(modes, 'load', load)
  monkeypatch.setattr(modes.vocabularies, 'load', lambda *args: None)
  monkeypatch.setattr(modes.translate, 'from_config', lambda *args: None)
  monkeypatch.setattr(modes.multihost, 'translate_all',
                      lambda translator, lines, progress: [line.upper() for line in lines])
  state.decode = lambda workdir, output: modes.decode(
      workdir, modes.Overrides(default.get_config()), None, str(state.source), output)
  return state


def test_decode_writes_the_output_over_its_own_claim(stubbed, tmp_path):
  out = tmp_path / 'out.txt'
  stubbed.decode('first', str(out))
  assert out.read_text() == 'ONE\nTWO\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['in.txt', 'out.txt']


def test_a_second_decode_into_the_same_output_stops_before_loading(stubbed, tmp_path):
  out = str(tmp_path / 'out.txt')
  refused = []

  def second_decode():  # starts while the first is loading its checkpoint
    if len(stubbed.calls) == 1:
      with pytest.raises(FileExistsError) as e:
        stubbed.decode('second', out)
      refused.append(str(e.value))

  stubbed.during_load = second_decode
  stubbed.decode('first', out)
  assert stubbed.calls == ['first']  # the second never loaded anything
  assert refused == [f'{out} already exists (empty: another decode may be writing it, or one '
                     'was killed); choose another --output or remove it']
  assert open(out).read() == 'ONE\nTWO\n'  # the first finished and replaced its claim


def test_the_claim_itself_is_exclusive(tmp_path):
  # Two decodes past their up-front check at the same time: the claim decides.
  out = str(tmp_path / 'out.txt')
  with modes.claimed(out):
    with pytest.raises(FileExistsError, match='^' + out + ' already exists'):
      with modes.claimed(out):
        pass
    assert open(out).read() == ''


def test_a_claim_on_gcs_is_exclusive_and_released_on_failure(gcs_dir):
  out = f'{gcs_dir}/out.txt'
  with pytest.raises(RuntimeError):
    with modes.claimed(out):
      assert epath.Path(out).read_bytes() == b''
      with pytest.raises(FileExistsError, match='^' + out + ' already exists'):
        with modes.claimed(out):
          pass
      raise RuntimeError
  assert not epath.Path(out).exists()


def test_a_failed_decode_removes_its_claim_and_can_be_rerun(stubbed, tmp_path):
  out = tmp_path / 'out.txt'

  def fail():
    assert out.exists() and out.read_bytes() == b''  # claimed while loading
    raise KeyboardInterrupt

  stubbed.during_load = fail
  with pytest.raises(KeyboardInterrupt):
    stubbed.decode('first', str(out))
  assert not out.exists()
  stubbed.during_load = None
  stubbed.decode('again', str(out))
  assert out.read_text() == 'ONE\nTWO\n'


def test_a_failed_decode_never_removes_a_file_with_content(tmp_path):
  out = tmp_path / 'out.txt'
  with pytest.raises(RuntimeError):
    with modes.claimed(str(out)):
      out.write_text('someone else\n')  # the claim was removed and the path reused
      raise RuntimeError
  assert out.read_text() == 'someone else\n'
  # An existing output is refused up front and left as it is.
  with pytest.raises(FileExistsError, match=f'^{out} already exists; choose another'):
    modes.decode('w', modes.Overrides(default.get_config()), None, None, str(out))
  assert out.read_text() == 'someone else\n'


def test_stdout_on_a_full_disk_is_one_line(stubbed, monkeypatch):
  import errno
  import io
  from t2t_jax.storage.workdir import WorkdirError

  class Full(io.StringIO):
    def flush(self):
      raise OSError(errno.ENOSPC, 'No space left on device')

  monkeypatch.setattr(modes.sys, 'stdout', Full())
  with pytest.raises(WorkdirError, match='^cannot write <stdout>: No space left on device; '
                                         'free space$'):
    stubbed.decode('first', None)


def test_a_vocabulary_named_again_is_compared_by_content(tiny_workdir, tmp_path):
  """Issue 60, 1: a mode that reads a run takes its workdir's vocabulary; one named again is
  provenance when it is the same file or gone, refused in one line when it is another."""
  config = default.get_config()
  own = os.path.join(tiny_workdir, 'vocab', 'spm.model')
  copy, other = tmp_path / 'same.model', tmp_path / 'other.model'
  with open(own, 'rb') as f:
    copy.write_bytes(f.read())
  other.write_bytes(copy.read_bytes()[:-1] + b'x')
  for path in (str(copy), str(tmp_path / 'gone.model')):
    config.vocab_model = path
    modes.check_given_vocabularies(tiny_workdir, config, ['vocab_model'])
  config.vocab_model = str(other)
  modes.check_given_vocabularies(tiny_workdir, config, [])  # not typed: not read
  with pytest.raises(config_lib.ConfigError, match=(
      rf'^--config.vocab_model={other} is not the vocabulary {tiny_workdir} was trained with '
      r'\(.*spm.model: sha256 [0-9a-f]{12}\.\.\., the file given: [0-9a-f]{12}\.\.\.\); drop it')):
    modes.check_given_vocabularies(tiny_workdir, config, ['vocab_model'])
