"""`--mode=import` of an M2M100 directory (pre-LN, fairseq's positions, language tokens),
checked against transformers' own model and tokenizer, offline."""

import numpy as np
import pytest

from conftest import run_main
from pretrained_fixtures import fine_tune, n_best_against_transformers
from benchmarks.shared import transformers_models as hf_models

torch = pytest.importorskip('torch')
pytest.importorskip('transformers')

from t2t_jax import config as config_lib  # noqa: E402
from t2t_jax.data import language_tokens  # noqa: E402
from t2t_jax.inference import checkpoint_choice  # noqa: E402
from t2t_jax.inference.translate import Translator  # noqa: E402
from t2t_jax.model import variant  # noqa: E402
from t2t_jax.pretrained import import_mode  # noqa: E402
from t2t_jax.runtime import resolution  # noqa: E402



def test_ids_with_language_tokens_are_transformers_ids(m2m):
  _, workdir, _, tok = m2m
  _, config, ours = hf_models.imported(workdir)
  assert (config.norm_position, config.positional, config.language_tokens,
          config.decoder_start_id, config.logits_bias) == (
              'pre', 'sinusoidal_fairseq', '__{lang}__', 1, False)
  order = hf_models.id_order(tok, config.vocab_size)
  theirs = tok(hf_models.SOURCES, text_target=hf_models.TARGETS)
  for sentence, ids in zip(hf_models.SOURCES, theirs['input_ids']):
    assert [int(order[i]) for i in ours.encode(sentence) + [1]] == ids  # __en__ first
  for sentence, ids in zip(hf_models.TARGETS, theirs['labels']):
    assert [int(order[i]) for i in ours.target.encode(sentence) + [1]] == ids  # __es__ first


@pytest.mark.parametrize('target_lang', ['es', 'fr'])
def test_greedy_outputs_start_with_the_target_language_as_transformers(m2m, target_lang):
  _, workdir, model, tok = m2m
  inference, config, ours = hf_models.imported(workdir, target_lang=target_lang)  # a pair of many
  order = hf_models.id_order(tok, config.vocab_size)
  translator = Translator(variant.from_config(config), inference.params, ours,
                          strategy='greedy')
  ours = translator.translate_ids(hf_models.SOURCES)
  for sentence, ids in zip(hf_models.SOURCES, ours):
    batch = tok([sentence], return_tensors='pt')
    with torch.no_grad():
      theirs = model.generate(
          **batch, num_beams=1, do_sample=False,
          max_new_tokens=batch['input_ids'].shape[1] + translator.max_decode_extra,
          forced_bos_token_id=tok.get_lang_id(target_lang),
          bad_words_ids=[[tok.pad_token_id]]).tolist()[0][1:]
    theirs = theirs[:theirs.index(tok.eos_token_id)] if tok.eos_token_id in theirs else theirs
    assert [int(order[i]) for i in ids] == theirs, sentence
    assert theirs[0] == tok.get_lang_id(target_lang)


def test_beam_n_best_lists_with_a_forced_language_are_transformers_under_its_length_rule(m2m):
  """As Marian's: each 4-best list is `generate(num_beams=4, forced_bos_token_id=__es__)`'s.
  transformers scores the forced token 0 (its logits processor), ours its log probability
  (a target prefix counts): near 0 in a model trained to put it first, within the tolerance."""
  _, workdir, model, tok = m2m
  sources = hf_models.short_dev_sources(tok, 13)
  mine, theirs, my_scores, their_scores = n_best_against_transformers(
      workdir, model, tok, sources, 0.6, 'transformers',
      forced_bos_token_id=tok.get_lang_id('es'))
  assert mine == theirs
  np.testing.assert_allclose(my_scores, their_scores, rtol=5e-4)


def test_the_language_pair_is_asked_for_and_checked(m2m, tmp_path):
  folder, workdir, _, _ = m2m
  with pytest.raises(config_lib.ConfigError, match=r'needs --config.source_lang and '
                     r'--config.target_lang'):
    import_mode.read(folder)
  with pytest.raises(config_lib.ConfigError, match=r"^--config.target_lang=xx: .* has no "
                     r"language token '__xx__'$"):
    import_mode.read(folder, {'source_lang': 'en', 'target_lang': 'xx'})
  with pytest.raises(language_tokens.LanguageTokenError,
                     match=r"^--config.target_lang=xx: the vocabulary has no language token "
                     r"'__xx__'; its languages: af, am, ar"):
    hf_models.imported(workdir, target_lang='xx')


@pytest.mark.slow
def test_main_decodes_another_target_language_when_asked(m2m, tmp_path):
  _, workdir, _, tok = m2m
  source = tmp_path / 'in.en'
  source.write_text('\n'.join(hf_models.SOURCES) + '\n', encoding='utf-8')
  outputs = {}
  for lang in ('es', 'fr'):
    result = run_main('--mode=decode', f'--workdir={workdir}', f'--input={source}',
                      f'--config.target_lang={lang}', '--config.decode_strategy=greedy',
                      '--config.nbest=1', '--config.output_scores=True', timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs[lang] = result.stdout
  assert outputs['es'] != outputs['fr']


@pytest.mark.slow
def test_init_from_alone_fine_tunes_with_its_language_tokens(m2m, corpus, tmp_path):
  """A fine-tune of the imported M2M100 model on an EN->ES corpus with `init_from` alone: its
  keys (language tokens, pre-LN) adopted, the pair recorded, and the run decodes."""
  _, workdir, _, _ = m2m
  run = tmp_path / 'ft'
  result = fine_tune(workdir, corpus, run, 1, '--config.eval_batches=1',
                     '--config.dropout_rate=0.0')
  assert result.returncode == 0, result.stderr[-3000:]
  tuned = checkpoint_choice.load_inference_params(str(run), '1')
  config = resolution.from_saved(tuned.config_json)
  assert (config.language_tokens, config.norm_position, config.source_lang,
          config.target_lang) == ('__{lang}__', 'pre', 'en', 'es')
  decoded = run_main('--mode=decode', f'--workdir={run}', f'--input={corpus}/dev.en',
                     timeout=300)
  assert decoded.returncode == 0, decoded.stderr[-3000:]
  assert len(decoded.stdout.splitlines()) == 64
