"""`--mode=export --format=huggingface`: a directory transformers loads, checked through
transformers itself; import -> export -> import is bitwise; what Marian cannot express is
refused in one line."""

import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from conftest import run_main
from benchmarks.shared import transformers_models as hf_models

torch = pytest.importorskip('torch')
pytest.importorskip('transformers')

from t2t_jax.export import common, formats  # noqa: E402
from t2t_jax.export.common import ExportError  # noqa: E402
from t2t_jax.model import scoring, transformer as model_lib, variant  # noqa: E402
from t2t_jax.pretrained import import_mode  # noqa: E402


@pytest.mark.parametrize('family', ['marian', 'm2m100'])
def test_import_export_import_is_bitwise(marian, m2m, family, tmp_path):
  folder, workdir, _, _ = marian if family == 'marian' else m2m
  out = formats.export('huggingface', common.load_source(workdir), str(tmp_path / 'out'))
  languages = None if family == 'marian' else hf_models.PAIR
  first, again = import_mode.read(folder, languages), import_mode.read(out, languages)
  assert first['keys'] == again['keys']
  assert first['protos'] == again['protos']
  mine = jax.tree_util.tree_leaves_with_path(first['params'])
  theirs = dict(jax.tree_util.tree_leaves_with_path(again['params']))
  assert len(mine) == len(theirs)
  for path, leaf in mine:
    assert np.array_equal(leaf, theirs[path]), jax.tree_util.keystr(path)


def _paper_source(tiny_workdir, **changes):
  """The tiny run (the paper's model: interleaved sinusoids, no biases) with `changes` to its
  config; its trained parameters where they fit the changed model, else fresh ones."""
  source = common.load_source(tiny_workdir)
  config = source.config.copy_and_resolve_references()
  for key, value in changes.items():
    config[key] = value
  net = variant.from_config(config)
  params = source.params
  if variant.parameter_mismatch(net, params):
    params = model_lib.init_params(net, jax.random.PRNGKey(3))
  return dataclasses.replace(source, config=config, params=params)


def test_the_paper_model_leaves_with_its_sinusoids_reordered_and_scores_the_same(
    tiny_workdir, tmp_path):
  source = _paper_source(tiny_workdir, layer_norm_epsilon=1e-5)
  assert source.model_config.positional == 'sinusoidal'  # the paper's interleaved columns
  out = formats.export('huggingface', source, str(tmp_path / 'paper'))
  model, tok = hf_models.load(out)
  sentences = ['In the beginning God created', 'and the earth was without form']
  ours = source.tokenizer()
  inputs = hf_models.rows([ours.encode(s) + [1] for s in sentences])
  targets = hf_models.rows([ours.encode(s)[:5] + [1] for s in reversed(sentences)])
  mine = np.asarray(scoring.token_log_probs(source.transformer, source.params, inputs,
                                            targets)).sum(1)
  batch = tok(sentences, padding=True, return_tensors='pt')
  labels = torch.tensor(targets, dtype=torch.long)
  assert batch['input_ids'].tolist() == inputs.tolist()  # our ids are the directory's
  with torch.no_grad():
    logits = model(**batch, labels=labels).logits
  chosen = torch.log_softmax(logits, -1).gather(2, labels[..., None])[..., 0]
  theirs = (chosen * (labels != 0)).sum(1).numpy()
  np.testing.assert_allclose(mine, theirs, atol=1e-4, rtol=0)
  # transformers' generate searches with the run's beam and exponent (its own length rule).
  assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (4, 0.6)


def test_a_run_decoding_by_transformers_rule_is_refused_by_the_ctranslate2_export(
    tiny_workdir, tmp_path):
  source = _paper_source(tiny_workdir, length_penalty_rule='transformers')
  with pytest.raises(ExportError, match=r"^--config.length_penalty_rule='transformers': the "
                     r"CTranslate2 export decodes by the paper's GNMT rule only"):
    formats.export('ctranslate2', source, str(tmp_path / 'refused'))
  assert not (tmp_path / 'refused').exists()


@pytest.mark.parametrize('changes, why', [
    ({}, r"layer_norm_epsilon=1e-06: transformers' LayerNorm epsilon is PyTorch's 1e-5"),
    ({'layer_norm_epsilon': 1e-5, 'norm_position': 'pre'}, r"norm_position='pre' with "
     r"positional='sinusoidal': transformers' pre-LN class \(M2M100\)"),
    ({'layer_norm_epsilon': 1e-5, 'positional': 'learned'}, r"positional='learned'"),
    ({'layer_norm_epsilon': 1e-5, 'num_kv_heads': 2}, r'num_kv_heads=2'),
])
def test_what_marian_cannot_express_is_refused_in_one_line(tiny_workdir, tmp_path, changes,
                                                           why):
  source = _paper_source(tiny_workdir, **changes)
  with pytest.raises(ExportError, match=r'^--format=huggingface: ' + why):
    formats.export('huggingface', source, str(tmp_path / 'refused'))
  assert not (tmp_path / 'refused').exists()


@pytest.mark.parametrize('family', ['marian', 'm2m100'])
def test_imported_models_export_to_ctranslate2_and_translate_as_ours(marian, m2m, family,
                                                                    tmp_path):
  """The CTranslate2 export expresses both families (biases, swish, pre-LN, their positions,
  a logit bias, the decoder's start); its self-check decodes with CTranslate2 as ours,
  language token forced as its target_prefix."""
  _, workdir, _, _ = marian if family == 'marian' else m2m
  out = formats.export('ctranslate2', common.load_source(workdir), str(tmp_path / 'ct2'))
  with open(os.path.join(out, 't2t_jax_decoding.json'), encoding='utf-8') as f:
    options = json.load(f)
  assert options.get('target_prefix') == (None if family == 'marian' else ['__es__'])


@pytest.mark.slow
def test_main_exports_an_imported_model(marian, tmp_path):
  _, workdir, _, _ = marian
  out = tmp_path / 'hf'
  result = run_main('--mode=export', f'--workdir={workdir}', '--format=huggingface',
                    f'--output={out}', timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == str(out)
  assert 'checked through transformers' in result.stderr
  assert sorted(p.name for p in out.iterdir()) == [
      'config.json', 'generation_config.json', 'model.safetensors', 'source.spm',
      'target.spm', 'tokenizer_config.json', 'vocab.json']
