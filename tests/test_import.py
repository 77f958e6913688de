"""The package's import surface (t2t_jax/__init__.py) and what it installs (pyproject.toml).

The model imports jax, flax and numpy only (checked in a fresh process, whose `sys.modules` no
earlier test has filled); the top-level package re-exports lazily from one table with an
`__all__`; the dependency groups are the requirements files; nothing installs a top-level
`configs`."""

import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

from conftest import ROOT

# Each runtime dependency in pyproject.toml, as the top-level module it installs.
DEPENDENCY_MODULES = {
    'optax': 'optax', 'orbax-checkpoint': 'orbax', 'tensorflow-datasets': 'tensorflow_datasets',
    'array_record': 'array_record', 'grain': 'grain', 'sentencepiece': 'sentencepiece',
    'sacrebleu': 'sacrebleu', 'sacremoses': 'sacremoses', 'absl-py': 'absl',
    'ml-collections': 'ml_collections', 'tensorboardX': 'tensorboardX',
    'matplotlib': 'matplotlib', 'importlib_resources': 'importlib_resources',
    'ctranslate2': 'ctranslate2', 'flatbuffers': 'flatbuffers', 'libtpu': 'libtpu',
    'gcsfs': 'gcsfs', 'safetensors': 'safetensors',
}
# Dependencies of ours that jax or flax import themselves (measured with `import flax.linen`
# alone), so a model-only import cannot avoid them; each only where it is installed.
ALLOWED = {
    'absl': 'flax.linen imports absl.logging (flax/linen/recurrent.py)',
    'etils': 'jax imports etils.epath for its file I/O (jax/_src/path.py)',
    'flatbuffers': 'jax imports it for jax.export serialization (jax/_src/export/serialization.py)',
    'libtpu': 'jax imports the TPU runtime when installed (jax/_src/cloud_tpu_init.py)',
}
FORBIDDEN = sorted(set(DEPENDENCY_MODULES.values()) - set(ALLOWED)) + ['tensorflow', 'torch']

_MODEL_ONLY = '''
import json, sys
def loaded():
  return sorted({m.partition('.')[0] for m in sys.modules} - set(sys.stdlib_module_names))
import flax.linen, jax.numpy  # what jax and flax import by themselves
before = loaded()
import importlib, pkgutil
import t2t_jax.model
for info in pkgutil.iter_modules(t2t_jax.model.__path__):
  importlib.import_module('t2t_jax.model.' + info.name)
from t2t_jax import Transformer, TransformerConfig, as_model, beam_search
print(json.dumps({'before': before, 'after': loaded()}))
'''


def _run(code, cwd):
  """Runs `code` in a fresh interpreter that finds this checkout's t2t_jax, outside the repo."""
  result = subprocess.run([sys.executable, '-c', code], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, 'PYTHONPATH': ROOT}, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout


def _pyproject():
  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    return tomllib.load(f)


def test_the_model_imports_jax_flax_and_numpy_only(tmp_path):
  found = json.loads(_run(_MODEL_ONLY, tmp_path).splitlines()[-1])
  added = set(found['after']) - set(found['before'])
  assert added == {'t2t_jax'}, f'the model imports more than jax, flax, numpy: {added}'
  assert not set(found['after']) & set(FORBIDDEN), set(found['after']) & set(FORBIDDEN)
  assert {'jax', 'flax', 'numpy'} <= set(found['before'])


def test_every_runtime_dependency_is_classified():
  # A new dependency gets a module name above, so the model-only check forbids it too.
  groups = _pyproject()['project']['optional-dependencies']
  names = [re.split(r'[<>=!~\[; ]', spec)[0] for group in ('train', 'serve', 'plan', 'gcs')
           for spec in groups[group]]
  assert sorted(set(names) - set(DEPENDENCY_MODULES)) == []


def _requirement_names(filename):
  """The distribution names a requirements file installs, following its `-r` includes."""
  names = set()
  with open(os.path.join(ROOT, filename), encoding='utf-8') as f:
    for line in f:
      line = line.split('#', 1)[0].strip()
      if line.startswith('-r '):
        names |= _requirement_names(line[3:].strip())
      elif line:
        names.add(re.split(r'[<>=!~\[; ]', line)[0])
  return names


def _group_names(groups, group):
  names = set()
  for spec in groups[group]:
    name, _, extras = spec.partition('[')
    if name == 't2t_jax':  # t2t_jax[train,serve,...]: the other groups
      for other in extras.rstrip(']').split(','):
        names |= _group_names(groups, other)
    else:
      names.add(re.split(r'[<>=!~; ]', name)[0])
  return names


def test_dependency_groups_are_the_requirements_files():
  project = _pyproject()['project']
  base = {re.split(r'[<>=!~; ]', spec)[0] for spec in project['dependencies']}
  assert base == {'jax', 'flax', 'numpy'}
  groups = dict(project['optional-dependencies'], base=project['dependencies'])
  # jaxlib comes with jax; pytest is in requirements.txt for the tests, not to train.
  pinned = _requirement_names('requirements.txt')
  assert base | _group_names(groups, 'train') == pinned - {'jaxlib', 'pytest'}
  assert _group_names(groups, 'serve') == _requirement_names('requirements-serving.txt') - pinned
  assert _group_names(groups, 'plan') == _requirement_names('requirements-tpu.txt') - pinned
  assert _group_names(groups, 'gcs') == _requirement_names('requirements-gcs.txt')
  assert _group_names(groups, 'tracking') == _requirement_names('requirements-tracking.txt') - pinned
  assert (base | _group_names(groups, 'dev')
          == _requirement_names('requirements-dev.txt') - {'jaxlib'})


def test_configs_install_inside_the_package():
  setuptools = _pyproject()['tool']['setuptools']
  assert setuptools['package-dir'] == {'t2t_jax.configs': 'configs'}
  # Every folder of t2t_jax/ (as setuptools' namespace find), and no top-level `configs`.
  found = [os.path.relpath(folder, ROOT).replace(os.sep, '.')
           for folder, _, _ in os.walk(os.path.join(ROOT, 't2t_jax'))
           if os.path.basename(folder) != '__pycache__']
  assert sorted(setuptools['packages']) == sorted(found + ['t2t_jax.configs'])


def test_presets_import_from_any_folder(tmp_path):
  code = ('from t2t_jax.configs import table3, wmt_base\n'
          'import t2t_jax\n'
          'print(wmt_base.__file__, table3.get_config("B1").d_k, t2t_jax.configs.__name__)\n')
  path, d_k, name = _run(code, tmp_path).split()
  assert path == os.path.join(ROOT, 'configs', 'wmt_base.py') and d_k == '16'
  assert name == 't2t_jax.configs'


def test_star_import_binds_the_api_and_not_the_subpackages():
  import inspect  # pylint: disable=import-outside-toplevel
  import t2t_jax  # pylint: disable=import-outside-toplevel
  namespace = {}
  exec('import inspect\nfrom t2t_jax import *', namespace)  # pylint: disable=exec-used
  assert namespace['inspect'] is inspect  # the standard library's, not t2t_jax.inspect
  assert {'Transformer', 'beam_search', 'as_model', 'ModelLike', 'Translator'} <= set(
      t2t_jax.__all__)
  for name in t2t_jax.__all__:
    assert namespace[name] is getattr(t2t_jax, name), name
  assert not {'config', 'inspect', 'model', 'parsing'} & set(t2t_jax.__all__)


def test_the_documented_names_resolve():
  # Every `t2t_jax.<name>` the README, docs and notebook use (names and subpackages alike).
  import t2t_jax  # pylint: disable=import-outside-toplevel
  texts = [os.path.join(ROOT, 'README.md'), os.path.join(ROOT, 'notebooks', 't2t_jax.py')]
  texts += [os.path.join(ROOT, 'docs', n) for n in os.listdir(os.path.join(ROOT, 'docs'))
            if n.endswith('.md')]
  used = set()
  for path in texts:
    with open(path, encoding='utf-8') as f:
      used |= set(re.findall(r'\bt2t_jax\.([A-Za-z_]\w*)', f.read()))
  files = {'py', 'ipynb', 'egg', 'lock', 'lease'}  # t2t_jax.py, t2t_jax.lock, ...: not names
  missing = [n for n in sorted(used - files) if not hasattr(t2t_jax, n)]
  assert missing == []
  assert {'config', 'configs', 'parsing', 'inspect'} <= set(dir(t2t_jax))
  assert set(t2t_jax.__all__) <= set(dir(t2t_jax))


# Using the library outside main.py, as a notebook or script does; jax imported before or after.
_LIBRARY_USE = {
    'jax first': 'import jax\nfrom t2t_jax import Transformer\nprint(jax.devices())\n',
    't2t_jax first': 'from t2t_jax import Transformer\nimport jax\nprint(jax.devices())\n',
}
# What libtpu prints off a TPU VM when jax tries a TPU backend (runtime/backends.py).
_LIBTPU_NOISE = ('host bounds', 'TPU_ACCELERATOR_TYPE', 'worker hostname', 'libtpu',
                 'E0000', 'InitGoogle')


@pytest.mark.parametrize('order', sorted(_LIBRARY_USE))
def test_the_library_keeps_libtpu_quiet_off_a_tpu_vm(tmp_path, order):
  import importlib.util  # pylint: disable=import-outside-toplevel
  import t2t_jax  # pylint: disable=import-outside-toplevel
  if importlib.util.find_spec('libtpu') is None:
    pytest.skip('libtpu is not installed (requirements-tpu.txt): nothing to keep quiet')
  if t2t_jax._on_tpu_vm():  # pylint: disable=protected-access
    pytest.skip('a TPU VM: libtpu is the runtime here and its messages stay')
  # As a user's shell has it: no JAX_PLATFORMS (conftest sets cpu for the test processes).
  env = {k: v for k, v in os.environ.items() if k not in ('JAX_PLATFORMS', 'JAX_FORCE_TPU_INIT')}
  result = subprocess.run([sys.executable, '-c', _LIBRARY_USE[order]], cwd=tmp_path, env={
      **env, 'PYTHONPATH': ROOT}, capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'cpu' in result.stdout.lower()
  noise = [line for line in result.stderr.splitlines()
           if any(word in line for word in _LIBTPU_NOISE)]
  assert noise == [], result.stderr[-3000:]
