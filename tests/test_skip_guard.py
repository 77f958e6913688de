"""tests/skip_guard.py: a skip caused by a broken install of a requirements-dev.txt package fails
the run; other skips do not."""

import os
import subprocess
import sys

import pytest

import skip_guard
from conftest import ROOT

DEV = os.path.join(ROOT, 'requirements-dev.txt')


def test_requirements_dev_lists_every_optional_extra_through_its_files():
  packages, files = skip_guard.read_requirements(DEV)
  assert {'ctranslate2', 'flatbuffers', 'nbformat', 'nbclient', 'jupytext', 'libtpu', 'gcsfs',
          'gcpstorageemulator', 'importlinter', 'pytestxdist', 'jax'} <= packages
  assert files == {'requirements.txt', 'requirements-test.txt', 'requirements-notebook.txt',
                   'requirements-serving.txt', 'requirements-tpu.txt', 'requirements-gcs.txt',
                   'requirements-hf.txt', 'requirements-tracking.txt'}


@pytest.mark.parametrize('reason, culprit', [
    # The suite's own skip reasons when an extra is missing or broken.
    ("could not import 'ctranslate2': libctranslate2.so.4: cannot open shared object file",
     'ctranslate2 is in requirements-dev.txt but failed to import'),
    ("could not import 'gcp_storage_emulator.server': No module named 'gcp_storage_emulator'",
     'gcp_storage_emulator is in requirements-dev.txt'),
    ("module 'flatbuffers' has __version__ '1.0', required is: '25.0'",
     'flatbuffers is in requirements-dev.txt'),
    ('pip install -r requirements-notebook.txt', 'requirements-dev.txt installs '
     'requirements-notebook.txt'),
    ('libtpu missing: pip install -r requirements-tpu.txt', 'installs requirements-tpu.txt'),
    # Legitimate skips.
    ('needs a C compiler for evalb.c', None),
    ('needs node to run the page script', None),
    ('documents lowering where no CUDA libraries are installed', None),
    ("could not import 'jax_cuda12_plugin': No module named 'jax_cuda12_plugin'", None),
    ('pip install -r requirements-bench.txt', None),  # not part of requirements-dev.txt
])
def test_which_skip_reasons_are_install_problems(reason, culprit):
  message = skip_guard.install_problem(reason, *skip_guard.read_requirements(DEV))
  if culprit is None:
    assert message is None
  else:
    assert culprit in message and 'fix the install' in message and reason in message


_CONFTEST = f"""
import sys
sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
import skip_guard

def pytest_configure(config):
  skip_guard.register(config, {DEV!r})
"""

_LEGITIMATE = """
import pytest

def test_runs():
  pass

def test_needs_a_gpu():
  pytest.skip('no GPU on this machine')

def test_optional_package_outside_requirements_dev():
  pytest.importorskip('surely_not_a_package_t2t')
"""

# A ctranslate2 that is installed but cannot load, as a wheel missing its shared library.
_BROKEN_CTRANSLATE2 = "raise ImportError('libctranslate2.so.4: cannot open shared object file')\n"
_USES_CTRANSLATE2 = """
import pytest
ctranslate2 = pytest.importorskip('ctranslate2')

def test_export():
  pass
"""


def _pytest(folder, *args):
  return subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-rs',
                         *args, str(folder)], cwd=folder, capture_output=True, text=True,
                        timeout=120)


def _folder(tmp_path, broken):
  (tmp_path / 'pytest.ini').write_text('[pytest]\n')
  (tmp_path / 'conftest.py').write_text(_CONFTEST)
  (tmp_path / 'test_legitimate.py').write_text(_LEGITIMATE)
  if broken:
    (tmp_path / 'ctranslate2.py').write_text(_BROKEN_CTRANSLATE2)
    (tmp_path / 'test_export.py').write_text(_USES_CTRANSLATE2)
  return tmp_path


def test_legitimate_skips_pass(tmp_path):
  fine = _pytest(_folder(tmp_path, broken=False))
  assert fine.returncode == 0, fine.stdout[-3000:]
  assert '1 passed, 2 skipped' in fine.stdout and 'fix the install' not in fine.stdout


@pytest.mark.parametrize('workers', [[], ['-n', '2']], ids=['one process', 'xdist'])
def test_a_broken_required_install_fails_the_run(tmp_path, workers):
  broken = _pytest(_folder(tmp_path, broken=True), '-W',
                   'ignore::pytest.PytestDeprecationWarning', *workers)
  assert broken.returncode == 1, broken.stdout[-3000:]
  assert '1 passed, 3 skipped' in broken.stdout
  assert ("test_export.py: ctranslate2 is in requirements-dev.txt but failed to import: "
          "could not import 'ctranslate2': libctranslate2.so.4: cannot open shared object "
          "file; fix the install") in broken.stdout, broken.stdout[-3000:]
  assert broken.stdout.count('fix the install') == 1  # the legitimate skips are not named
