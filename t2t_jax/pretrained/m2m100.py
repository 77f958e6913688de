"""transformers' M2M100 (and NLLB's model, `model_type` 'm2m_100') as a t2t_jax model.

M2M100 is fairseq's Transformer: pre-LN with a final LayerNorm after each stack
(`norm_position='pre'`), biases on every projection (`attention_bias`), fairseq's sinusoids
counted from position 2 (`positional='sinusoidal_fairseq'`), PyTorch's LayerNorm epsilon, the
decoder starting from EOS (ours too), shared scaled embeddings tied to the output. Its
tokenizer is one SentencePiece model (`sentencepiece.bpe.model`) under fairseq's dictionary
(`vocab.json`), then one token per language (`__en__`, the `language_codes` list below) and
8 made-up words; the source starts with its language's token, the target with the target's,
which generation forces: `language_tokens='__{lang}__'` (`data/language_tokens.py`).

NLLB is the same model under another tokenizer (`NllbTokenizer`): the same SentencePiece file,
but its ids in `tokenizer.json` (fairseq's `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, the pieces
one up from SentencePiece's, then `<mask>` and the FLORES-200 codes as added tokens), and the
codes themselves as language tokens (`eng_Latn`): `language_tokens='{lang}'`.
"""

import os
import re
from typing import Any, Dict, List, Tuple

import numpy as np

from t2t_jax.data import language_tokens
from t2t_jax.pretrained import hf_files, id_map, marian, spm_protos
from t2t_jax.pretrained.hf_files import PretrainedError
from t2t_jax.storage import paths

FAMILY = 'm2m_100'
SPM_FILE = 'sentencepiece.bpe.model'
LANGUAGE_TOKENS = '__{lang}__'
NLLB_LANGUAGE_TOKENS = '{lang}'
# A FLORES-200 code, NLLB's language tokens: ISO 639-3, '_', ISO 15924 (eng_Latn, zho_Hant).
NLLB_CODE = re.compile(r'[a-z]{3}_[A-Z][a-z]{3}')
MADEUP_WORDS = 'madeupword{:04d}'
LANGUAGE_CODES = language_tokens.M2M100_LANGUAGE_CODES


def vocabulary(folder: str, hf_config: Dict[str, Any]) -> Tuple[Dict[str, int], List[str]]:
  """(piece -> their id, the language tokens) of an M2M100 directory: `vocab.json`, the
  language tokens after it, the made-up words after those (tokenizer_config.json's
  `language_codes` and `num_madeup_words`)."""
  if os.path.isfile(os.path.join(folder, 'tokenizer.json')) and not os.path.isfile(
      os.path.join(folder, 'vocab.json')):
    return _nllb_vocabulary(folder)
  vocab = dict(hf_files.read_json(folder, 'vocab.json'))
  settings = {}
  if os.path.isfile(os.path.join(folder, 'tokenizer_config.json')):
    settings = hf_files.read_json(folder, 'tokenizer_config.json')
  codes = settings.get('language_codes', 'm2m100')
  if codes not in LANGUAGE_CODES:
    raise PretrainedError(f'{os.path.join(folder, "tokenizer_config.json")}: language_codes='
                          f'{codes!r}; expected one of {", ".join(LANGUAGE_CODES)}')
  size = len(vocab)
  tokens = [LANGUAGE_TOKENS.format(lang=c) for c in LANGUAGE_CODES[codes]]
  for i, token in enumerate(tokens):
    vocab[token] = size + i
  for i in range(int(settings.get('num_madeup_words', 8))):
    vocab[MADEUP_WORDS.format(i)] = size + len(tokens) + i
  del hf_config
  return vocab, tokens


def _nllb_vocabulary(folder: str) -> Tuple[Dict[str, int], List[str]]:
  """`vocabulary` of an NLLB directory: `tokenizer.json`'s model vocabulary and added tokens,
  the FLORES-200 codes among those the language tokens; one line for a file that is not
  NllbTokenizer's default layout."""
  where = os.path.join(folder, 'tokenizer.json')
  data = hf_files.read_json(folder, 'tokenizer.json')
  model = data.get('model') if isinstance(data, dict) else None
  entries = model.get('vocab') if isinstance(model, dict) else None
  if isinstance(entries, list):  # a Unigram model: [piece, score] at each id
    entries = {entry[0]: i for i, entry in enumerate(entries)
               if isinstance(entry, list) and entry and isinstance(entry[0], str)}
  added = data.get('added_tokens', []) if isinstance(data, dict) else []
  if not isinstance(entries, dict) or not isinstance(added, list) or not all(
      isinstance(t, dict) and isinstance(t.get('content'), str) for t in added):
    raise PretrainedError(f'{where}: expected a tokenizers file with model.vocab and '
                          'added_tokens (NllbTokenizer\'s)')
  vocab = dict(entries)
  vocab.update({t['content']: t.get('id') for t in added})
  tokens = [t['content'] for t in added if NLLB_CODE.fullmatch(t['content'])]
  if not tokens:
    raise PretrainedError(f'{where}: no language tokens among its added tokens (NLLB\'s '
                          'eng_Latn, fra_Latn, ...)')
  config_path = os.path.join(folder, 'tokenizer_config.json')
  if os.path.isfile(config_path) and hf_files.read_json(folder, 'tokenizer_config.json').get(
      'legacy_behaviour'):
    raise PretrainedError(f'{config_path}: legacy_behaviour=true puts the language token after '
                          "the source's EOS; t2t_jax imports NllbTokenizer's default (false)")
  return vocab, tokens


def protos(folder: str, ids: id_map.IdMap, tokens: List[str]) -> Dict[str, bytes]:
  """The one SentencePiece model of both sides, renumbered; the language tokens and made-up
  words are control pieces (added by id, never read from text)."""
  path = hf_files.need_file(folder, SPM_FILE, 'the SentencePiece model of both sides')
  madeup = [p for p in ids.pieces if p.startswith('madeupword')]
  return {'target': spm_protos.remapped(paths.read_bytes(path), ids, path,
                                        control=list(tokens) + madeup)}


def model_keys(config: Dict[str, Any], ids: id_map.IdMap, where: str) -> Dict[str, Any]:
  """Our run-config keys of the M2M100 `config` (config.json's fields)."""
  if config.get('pad_token_id') != 1:
    raise PretrainedError(f'{where}: pad_token_id={config.get("pad_token_id")!r}; fairseq\'s '
                          'positions count from the padding id 1 (expected 1)')
  keys = marian.model_keys(dict(config, share_encoder_decoder_embeddings=True), ids, where)
  nllb = not any(p.startswith('__') and p.endswith('__') and len(p) > 4 for p in ids.pieces)
  keys.update(norm_position='pre', positional='sinusoidal_fairseq', logits_bias=False,
              share_tokenizer=True,
              language_tokens=NLLB_LANGUAGE_TOKENS if nllb else LANGUAGE_TOKENS)
  return keys


_IGNORED = ('model.encoder.embed_tokens.weight', 'model.decoder.embed_tokens.weight',
            'lm_head.weight', 'model.encoder.embed_positions.weights',
            'model.decoder.embed_positions.weights')


def params(tensors: Dict[str, np.ndarray], path: str, keys: Dict[str, Any],
           ids: id_map.IdMap) -> Dict[str, Any]:
  """Our parameter tree of M2M100's `tensors`: Marian's layers (`marian.layer_params`), the
  stacks' final LayerNorms, no logit bias."""
  w = marian.Weights(tensors, path)
  d = keys['d_model']
  tree = marian.layer_params(w, tensors, path, keys, ids, logits_bias=False)
  tree['encoder']['final_norm'] = marian.norm(w, 'model.encoder.layer_norm', d)['norm']
  tree['decoder']['final_norm'] = marian.norm(w, 'model.decoder.layer_norm', d)['norm']
  w.check_used(_IGNORED)
  return tree
