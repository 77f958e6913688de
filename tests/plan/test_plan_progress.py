"""`--mode=plan` says what it compiles while it compiles (issue 51 D29: the paper's big model
on v5e:2x4 printed nothing for 300 s): a line before each program, one every
`progress.EVERY_S` while it compiles, one after it. The compiles here are fakes of a set
length; the real compiler's are in test_plan.py (libtpu)."""

import io
import re
import time
import types

import pytest

from t2t_jax.plan import cache as cache_lib, compile as compile_lib, progress


class _Compiled:
  def memory_analysis(self):
    return types.SimpleNamespace(argument_size_in_bytes=1000, output_size_in_bytes=200,
                                 alias_size_in_bytes=100, temp_size_in_bytes=300,
                                 generated_code_size_in_bytes=10)

  def cost_analysis(self):
    return {'flops': 5e9, 'bytes accessed': 2e6}

  def as_text(self):
    return ''


class _Lowered:
  def __init__(self, seconds, error):
    self.seconds, self.error = seconds, error

  def as_text(self):
    return f'module {self.seconds} {self.error}'

  def compile(self):
    time.sleep(self.seconds)
    if self.error:
      raise self.error
    return _Compiled()


class _Jitted:
  """Lowers at once; its compile takes `seconds`, then raises `error` if given."""

  def __init__(self, seconds, error=None):
    self.seconds, self.error = seconds, error

  def lower(self, *args):
    del args
    return _Lowered(self.seconds, self.error)


_SO_FAR = re.compile(r'^plan: still compiling the train step, batch 96 x 256: ([\d.]+) s so far$')


def _lines(capsys):
  return capsys.readouterr().err.splitlines()


def test_a_long_compile_says_what_it_compiles_and_for_how_long_so_far(monkeypatch, capsys,
                                                                     tmp_path):
  monkeypatch.setattr(progress, 'EVERY_S', 0.1)
  cache = cache_lib.PlanCache(str(tmp_path / 'plan'))
  stats = compile_lib.compile_step('train', _Jitted(0.45), (), {'batch': (96, 256)}, cache)
  assert (stats.flops, stats.hbm_bytes, stats.cached) == (5e9, 1410, False)
  lines = _lines(capsys)
  assert lines[0] == 'plan: compiling the train step, batch 96 x 256 ...'
  ticks = [float(_SO_FAR.match(line).group(1)) for line in lines[1:-1]]
  assert len(ticks) >= 2 and ticks == sorted(ticks) and 0.1 <= ticks[0] < ticks[-1] < 0.5
  end = re.fullmatch(r'plan: compiled the train step, batch 96 x 256 in ([\d.]+) s', lines[-1])
  assert end and 0.4 <= float(end.group(1)) < 5, lines[-1]
  # The same program again comes from the plan cache: at once, and said so.
  compile_lib.compile_step('train', _Jitted(0.45), (), {'batch': (96, 256)}, cache)
  assert _lines(capsys) == ['plan: compiling the train step, batch 96 x 256 ...',
                            'plan: compiled the train step, batch 96 x 256 in 0.0 s (read '
                            'from the plan cache)']


def test_a_refused_or_failed_compile_says_so(capsys):
  refused = RuntimeError('RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory '
                         'required for HLO temporaries (27.71G) exceeds available HBM (15.75G).')
  with pytest.raises(compile_lib.DoesNotFit):
    compile_lib.compile_step('decode', _Jitted(0.0, refused), (),
                             {'inputs': (64, 64), 'outputs': (64, 114)})
  assert _lines(capsys) == [
      'plan: compiling the decode step, inputs 64 x 64, outputs 64 x 114 ...',
      'plan: compiled the decode step, inputs 64 x 64, outputs 64 x 114 in 0.0 s (too big for '
      'a chip)']
  with pytest.raises(ValueError, match='broken'):
    compile_lib.compile_step('train_apply', _Jitted(0.0, ValueError('broken')), (), {})
  assert _lines(capsys) == ['plan: compiling the train_apply step ...',
                            'plan: stopped compiling the train_apply step after 0.0 s '
                            '(ValueError)']


def test_seconds_read_as_minutes_beyond_one():
  assert [progress.seconds_text(s) for s in (0.44, 9.96, 41.2, 59.7, 300.4, 3725)] == [
      '0.4 s', '10 s', '41 s', '1 min 0 s', '5 min 0 s', '62 min 5 s']
  stream = io.StringIO()
  with progress.compiling('the eval step, batch 8 x 16', every_s=60, stream=stream):
    pass
  assert stream.getvalue() == ('plan: compiling the eval step, batch 8 x 16 ...\n'
                               'plan: compiled the eval step, batch 8 x 16 in 0.0 s\n')
