"""The config and tokenizer files of a transformers directory (`huggingface_export.py`), per
family: Marian's (`config.json`, `vocab.json`, `source.spm`, `target.spm`) and M2M100's
(`config.json`, `vocab.json`, `sentencepiece.bpe.model`), and how their ids are ours.

Marian keeps our ids (padding 0, EOS 1, unknown 2). M2M100's positions count from its padding
id + 1, which fairseq's models fix at 1: its ids are fairseq's (`<s>` 0, `<pad>` 1, `</s>` 2,
`<unk>` 3), ours 3, 0, 1, 2 (an imported model's own order), every other id the same, and
its language tokens must sit where `M2M100Tokenizer` numbers them (after vocab.json).
"""

import json
import os
from typing import Any, Dict, List

import numpy as np

from t2t_jax.data import language_tokens, vocab_pair
from t2t_jax.export.common import ExportError, ExportSource

MADEUP_PREFIX = 'madeupword'


def id_rows(kind: str, source: ExportSource) -> np.ndarray:
  """`rows[their id]` = our id, for the family `kind`."""
  size = source.model_config.vocab_size
  if kind == 'marian':
    return np.arange(size)
  return np.array([3, 0, 1, 2] + list(range(4, size)))


def _dump(folder: str, name: str, value: Any) -> None:
  with open(os.path.join(folder, name), 'w', encoding='utf-8') as f:
    json.dump(value, f, ensure_ascii=False, indent=1)


def _common(source: ExportSource, rows: np.ndarray) -> Dict[str, Any]:
  """config.json's fields both families share (BART's), ids theirs."""
  cfg = source.model_config
  theirs = {int(ours): j for j, ours in enumerate(rows)}
  return {
      'vocab_size': cfg.vocab_size, 'd_model': cfg.d_model, 'encoder_layers': cfg.encoder_layers,
      'decoder_layers': cfg.decoder_layers, 'encoder_attention_heads': cfg.num_heads,
      'decoder_attention_heads': cfg.num_heads, 'encoder_ffn_dim': cfg.d_ff,
      'decoder_ffn_dim': cfg.d_ff, 'activation_function': cfg.activation,
      'max_position_embeddings': cfg.max_len, 'scale_embedding': cfg.scale_embeddings,
      'dropout': cfg.dropout_rate, 'attention_dropout': cfg.attention_dropout_rate,
      'activation_dropout': 0.0, 'encoder_layerdrop': 0.0, 'decoder_layerdrop': 0.0,
      'pad_token_id': theirs[0], 'eos_token_id': theirs[1],
      # Ours end a translation with EOS at its length limit: so do theirs.
      'forced_eos_token_id': theirs[1], 'bad_words_ids': [[theirs[0]]],  # padding: never
      'decoder_start_token_id': theirs[cfg.decoder_start_id], 'tie_word_embeddings': True,
      'is_encoder_decoder': True, 'num_beams': int(source.config.beam_size),
      # The exponent; transformers' generate divides by |Y| ** it, as length_penalty_rule
      # 'transformers' does (the paper's GNMT rule has no transformers equivalent).
      'length_penalty': float(source.config.length_penalty_alpha)}


def _write_marian(source: ExportSource, rows: np.ndarray, folder: str) -> None:
  config = dict(_common(source, rows), architectures=['MarianMTModel'], model_type='marian',
                decoder_vocab_size=source.model_config.vocab_size,
                share_encoder_decoder_embeddings=True)
  _dump(folder, 'config.json', config)
  _dump(folder, 'generation_config.json', {k: config[k] for k in (
      'decoder_start_token_id', 'eos_token_id', 'pad_token_id', 'forced_eos_token_id',
      'bad_words_ids', 'num_beams', 'length_penalty')})
  pieces, vocab = source.pieces('target'), {}
  for i, piece in enumerate(pieces):
    vocab.setdefault(piece, i)
  _dump(folder, 'vocab.json', vocab)
  _dump(folder, 'tokenizer_config.json', {
      'tokenizer_class': 'MarianTokenizer', 'unk_token': pieces[2], 'eos_token': pieces[1],
      'pad_token': pieces[0], 'separate_vocabs': False,
      'model_max_length': source.model_config.max_len})
  tok = source.tokenizer()
  for side, name in (('source', 'source.spm'), ('target', 'target.spm')):
    with open(os.path.join(folder, name), 'wb') as f:
      f.write(vocab_pair.side(tok, side)._proto)  # pylint: disable=protected-access


def _m2m100_codes(pieces: List[str], rows: np.ndarray) -> tuple:
  """(the `language_codes` list name, the size of vocab.json): the language tokens must be
  `M2M100Tokenizer`'s, right after vocab.json's pieces, then its made-up words."""
  theirs = [pieces[int(r)] for r in rows]
  first = next((j for j, p in enumerate(theirs) if p.startswith('__') and p.endswith('__')
                and len(p) > 4), None)
  for name, codes in language_tokens.M2M100_LANGUAGE_CODES.items():
    tokens = [f'__{c}__' for c in codes]
    if first is not None and theirs[first:first + len(tokens)] == tokens and all(
        p.startswith(MADEUP_PREFIX) for p in theirs[first + len(tokens):]):
      return name, first
  raise ExportError('--format=huggingface: the vocabulary\'s language tokens are not '
                    'M2M100Tokenizer\'s (its m2m100 or wmt21 list, after the other pieces, '
                    'then its made-up words)')


def _write_m2m100(source: ExportSource, rows: np.ndarray, folder: str) -> None:
  pieces = source.pieces('target')
  codes, size = _m2m100_codes(pieces, rows)
  config = dict(_common(source, rows), architectures=['M2M100ForConditionalGeneration'],
                model_type='m2m_100', bos_token_id=0)
  _dump(folder, 'config.json', config)
  _dump(folder, 'generation_config.json', {k: config[k] for k in (
      'decoder_start_token_id', 'eos_token_id', 'pad_token_id', 'bos_token_id',
      'forced_eos_token_id', 'bad_words_ids', 'num_beams', 'length_penalty')})
  _dump(folder, 'vocab.json', {pieces[int(rows[j])]: j for j in range(size)})
  made_up = len(rows) - size - len(language_tokens.M2M100_LANGUAGE_CODES[codes])
  _dump(folder, 'tokenizer_config.json', {
      'tokenizer_class': 'M2M100Tokenizer', 'language_codes': codes,
      'num_madeup_words': made_up, 'src_lang': source.config.source_lang,
      'tgt_lang': source.config.target_lang, 'bos_token': pieces[int(rows[0])],
      'pad_token': pieces[0], 'eos_token': pieces[1], 'unk_token': pieces[2],
      'sep_token': pieces[1], 'model_max_length': source.model_config.max_len})
  with open(os.path.join(folder, 'sentencepiece.bpe.model'), 'wb') as f:
    f.write(vocab_pair.side(source.tokenizer(), 'target')._proto)  # pylint: disable=protected-access


def write(kind: str, source: ExportSource, rows: np.ndarray, folder: str) -> None:
  """The config and tokenizer files of family `kind` into `folder`."""
  (_write_marian if kind == 'marian' else _write_m2m100)(source, rows, folder)
