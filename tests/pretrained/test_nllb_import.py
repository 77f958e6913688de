"""`--mode=import` of an NLLB directory (M2M100's model under `NllbTokenizer`: tokenizer.json's
ids, FLORES-200 codes as language tokens), checked against transformers' own model and
tokenizer, offline."""

import json
import os
import shutil

import pytest

from benchmarks.shared import transformers_models as hf_models

torch = pytest.importorskip('torch')
pytest.importorskip('transformers')

from t2t_jax.inference.translate import Translator  # noqa: E402
from t2t_jax.model import variant  # noqa: E402
from t2t_jax.pretrained import import_mode  # noqa: E402
from t2t_jax.pretrained.hf_files import PretrainedError  # noqa: E402


def test_ids_are_nllb_tokenizer_ids_with_its_language_codes(nllb):
  _, workdir, _, tok = nllb
  _, config, ours = hf_models.imported(workdir)
  assert (config.language_tokens, config.source_lang, config.target_lang,
          config.decoder_start_id) == ('{lang}', 'eng_Latn', 'spa_Latn', 1)
  order = hf_models.id_order(tok, config.vocab_size)
  theirs = tok(hf_models.SOURCES, text_target=hf_models.TARGETS)
  for sentence, ids in zip(hf_models.SOURCES, theirs['input_ids']):
    assert [int(order[i]) for i in ours.encode(sentence) + [1]] == ids  # eng_Latn first
  for sentence, ids in zip(hf_models.TARGETS, theirs['labels']):
    assert [int(order[i]) for i in ours.target.encode(sentence) + [1]] == ids  # spa_Latn first


def test_greedy_outputs_start_with_the_target_language_as_transformers(nllb):
  _, workdir, model, tok = nllb
  inference, config, ours = hf_models.imported(workdir)
  order = hf_models.id_order(tok, config.vocab_size)
  translator = Translator(variant.from_config(config), inference.params, ours,
                          strategy='greedy')
  outputs = set()
  for sentence, ids in zip(hf_models.SOURCES, translator.translate_ids(hf_models.SOURCES)):
    batch = tok([sentence], return_tensors='pt')
    with torch.no_grad():
      theirs = model.generate(
          **batch, num_beams=1, do_sample=False,
          max_new_tokens=batch['input_ids'].shape[1] + translator.max_decode_extra,
          forced_bos_token_id=tok.convert_tokens_to_ids('spa_Latn'),
          # at the length limit EOS, as ours forces it (an output that never ends: 'Amen.')
          forced_eos_token_id=tok.eos_token_id,
          bad_words_ids=[[tok.pad_token_id]]).tolist()[0][1:]
    theirs = theirs[:theirs.index(tok.eos_token_id)] if tok.eos_token_id in theirs else theirs
    assert [int(order[i]) for i in ids] == theirs, sentence
    outputs.add(tuple(theirs))
  assert len(outputs) >= 2


def test_a_tokenizer_file_without_nllbs_layout_is_refused_in_one_line(nllb, tmp_path):
  folder = str(tmp_path / 'broken')
  shutil.copytree(nllb[0], folder)
  path = os.path.join(folder, 'tokenizer_config.json')
  with open(path, encoding='utf-8') as f:
    settings = json.load(f)
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(dict(settings, legacy_behaviour=True), f)
  with pytest.raises(PretrainedError, match=r"tokenizer_config.json: legacy_behaviour=true puts "
                     r"the language token after the source's EOS"):
    import_mode.read(folder, hf_models.NLLB_PAIR)
  path = os.path.join(folder, 'tokenizer.json')
  with open(path, encoding='utf-8') as f:
    data = json.load(f)
  data['added_tokens'] = [t for t in data['added_tokens'] if '_' not in t['content']]
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(data, f)
  with pytest.raises(PretrainedError, match=r'^\S+/tokenizer.json: no language tokens among '
                     r"its added tokens \(NLLB's eng_Latn"):
    import_mode.read(folder, hf_models.NLLB_PAIR)
