"""transformers' MarianMT (OPUS-MT) as a t2t_jax model: its config as our keys, its weights as
our parameter tree, its two SentencePiece models over one vocabulary as ours.

Marian's model is the paper's (§3) with these differences, each a key of ours: biases on every
attention projection (`attention_bias`), the FFN's `activation_function` (OPUS-MT: swish), the
sinusoids' sines and cosines in two halves (`positional='sinusoidal_halves'`), a bias on the
logits (`logits_bias`: `final_logits_bias`), PyTorch's LayerNorm epsilon 1e-5
(`layer_norm_epsilon`), and the decoder starting from padding (`decoder_start_id`). Post-LN,
shared scaled embeddings tied to the output projection, as the paper.
"""

import os
from typing import Any, Dict, List, Tuple

import numpy as np

from t2t_jax.pretrained import hf_files, id_map, spm_protos
from t2t_jax.storage import paths
from t2t_jax.pretrained.hf_files import PretrainedError

FAMILY = 'marian'
ACTIVATIONS = {'swish': 'swish', 'silu': 'swish', 'relu': 'relu', 'gelu': 'gelu'}
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which Marian's layers use


def vocabulary(folder: str, hf_config: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
  """(piece -> their id: `vocab.json`, Marian's `>>xx<<` language codes in it)."""
  del hf_config
  vocab = hf_files.read_json(folder, 'vocab.json')
  if not isinstance(vocab, dict):
    raise PretrainedError(f'{os.path.join(folder, "vocab.json")}: expected an object '
                          'mapping pieces to ids')
  return vocab, [p for p in vocab if p.startswith('>>') and p.endswith('<<')]


def protos(folder: str, ids: id_map.IdMap, codes: List[str]) -> Dict[str, bytes]:
  """Both sides' SentencePiece models renumbered (`spm_protos.remapped`); the source side
  keeps the language codes whole, as Marian's tokenizer splits them off."""
  out = {}
  for side, name in (('source', 'source.spm'), ('target', 'target.spm')):
    path = hf_files.need_file(folder, name, f'the {side} side\'s SentencePiece model')
    out[side] = spm_protos.remapped(paths.read_bytes(path), ids, path,
                                    user_defined=codes if side == 'source' else ())
  return out


def model_keys(config: Dict[str, Any], ids: id_map.IdMap, where: str) -> Dict[str, Any]:
  """Our run-config keys of the Marian `config` (config.json's fields), ids mapped by `ids`."""
  field = lambda name, kind: hf_files.field(config, name, kind, where)  # noqa: E731
  d_model, heads = field('d_model', int), field('encoder_attention_heads', int)
  for name, ours in (('decoder_attention_heads', heads), ('decoder_ffn_dim',
                                                          field('encoder_ffn_dim', int))):
    if field(name, int) != ours:
      raise PretrainedError(f'{where}: {name}={config[name]} differs from the encoder\'s '
                            f'{ours}; t2t_jax\'s stacks share that width')
  if not config.get('share_encoder_decoder_embeddings', True):
    raise PretrainedError(f'{where}: share_encoder_decoder_embeddings=false (separate '
                          'vocabularies) is not supported yet')
  activation = field('activation_function', str)
  if activation not in ACTIVATIONS:
    raise PretrainedError(f'{where}: activation_function={activation!r}; expected one of '
                          f'{", ".join(sorted(ACTIVATIONS))}')
  if d_model % heads:
    raise PretrainedError(f'{where}: d_model={d_model} is not a multiple of '
                          f'encoder_attention_heads={heads}')
  return dict(
      vocab_size=field('vocab_size', int), d_model=d_model,
      d_ff=field('encoder_ffn_dim', int), num_heads=heads,
      num_layers=field('encoder_layers', int),
      num_decoder_layers=field('decoder_layers', int),
      max_len=field('max_position_embeddings', int),
      scale_embeddings=bool(config.get('scale_embedding', False)),
      activation=ACTIVATIONS[activation], attention_bias=True, logits_bias=True,
      layer_norm_epsilon=LAYER_NORM_EPSILON, positional='sinusoidal_halves',
      norm_position='post', share_embeddings=True, share_vocab=True, share_tokenizer=False,
      dropout_rate=float(config.get('dropout', 0.1)),
      attention_dropout_rate=float(config.get('attention_dropout', 0.0)),
      decoder_start_id=ids.ours(field('decoder_start_token_id', int)))


class Weights:
  """The weights by name, each taken at most once (what is left is named by `check_used`)."""

  def __init__(self, tensors: Dict[str, np.ndarray], path: str):
    self._tensors, self._path, self._used = tensors, path, set()

  def take(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
    if name not in self._tensors:
      raise PretrainedError(f'{self._path}: no tensor {name!r}')
    value = self._tensors[name]
    if value.shape != shape:
      raise PretrainedError(f'{self._path}: {name} has shape {value.shape}; config.json says '
                            f'{shape}')
    self._used.add(name)
    return value

  def check_used(self, ignored: Tuple[str, ...]) -> None:
    left = sorted(set(self._tensors) - self._used - set(ignored))
    if left:
      raise PretrainedError(f'{self._path}: {len(left)} tensors have no place in the model '
                            f'(e.g. {left[0]!r})')


def _attention(w: Weights, prefix: str, d: int, heads: int) -> Dict[str, Any]:
  width = d // heads
  out = {}
  for ours, theirs in (('query', 'q_proj'), ('key', 'k_proj'), ('value', 'v_proj')):
    kernel = w.take(f'{prefix}.{theirs}.weight', (d, d))  # [out = heads * width, in]
    out[ours] = {'kernel': kernel.T.reshape(d, heads, width),
                 'bias': w.take(f'{prefix}.{theirs}.bias', (d,)).reshape(heads, width)}
  out['out'] = {'kernel': w.take(f'{prefix}.out_proj.weight', (d, d)).T.reshape(heads, width, d),
                'bias': w.take(f'{prefix}.out_proj.bias', (d,))}
  return out


def norm(w: Weights, prefix: str, d: int) -> Dict[str, Any]:
  return {'norm': {'scale': w.take(f'{prefix}.weight', (d,)),
                   'bias': w.take(f'{prefix}.bias', (d,))}}


def _ffn(w: Weights, prefix: str, d: int, d_ff: int) -> Dict[str, Any]:
  return {'wi': {'kernel': w.take(f'{prefix}fc1.weight', (d_ff, d)).T,
                 'bias': w.take(f'{prefix}fc1.bias', (d_ff,))},
          'wo': {'kernel': w.take(f'{prefix}fc2.weight', (d, d_ff)).T,
                 'bias': w.take(f'{prefix}fc2.bias', (d,))}}


# Tensors of theirs that are no parameters of ours: the fixed position tables (recomputed by
# `positional`), and the tied copies of the shared embedding.
_IGNORED = ('model.encoder.embed_positions.weight', 'model.decoder.embed_positions.weight',
            'model.encoder.embed_tokens.weight', 'model.decoder.embed_tokens.weight',
            'lm_head.weight')


def params(tensors: Dict[str, np.ndarray], path: str, keys: Dict[str, Any],
           ids: id_map.IdMap) -> Dict[str, Any]:
  """Our parameter tree (numpy float32) of Marian's `tensors` (its state dict's names)."""
  w = Weights(tensors, path)
  tree = layer_params(w, tensors, path, keys, ids, logits_bias=True)
  w.check_used(_IGNORED)
  return tree


def layer_params(w: Weights, tensors: Dict[str, np.ndarray], path: str, keys: Dict[str, Any],
                 ids: id_map.IdMap, logits_bias: bool) -> Dict[str, Any]:
  """The embedding (rows in our id order), its logit bias (`final_logits_bias`, with
  `logits_bias`), and every layer of both stacks, in BART's names (Marian, M2M100)."""
  d, d_ff, heads, vocab = keys['d_model'], keys['d_ff'], keys['num_heads'], keys['vocab_size']
  shared = w.take('model.shared.weight', (vocab, d))
  for tied in ('model.encoder.embed_tokens.weight', 'model.decoder.embed_tokens.weight',
               'lm_head.weight'):
    if tied in tensors and not np.array_equal(tensors[tied], shared):
      raise PretrainedError(f'{path}: {tied} differs from model.shared.weight; t2t_jax ties '
                            'them (share_encoder_decoder_embeddings, tie_word_embeddings)')
  tree: Dict[str, Any] = {'shared_embedding': {'embedding': ids.rows(shared)},
                          'encoder': {}, 'decoder': {}}
  if logits_bias:
    bias = (w.take('final_logits_bias', (1, vocab))[0] if 'final_logits_bias' in tensors
            else np.zeros(vocab, np.float32))
    tree['shared_embedding']['logits_bias'] = ids.rows(bias)
  for i in range(keys['num_layers']):
    p = f'model.encoder.layers.{i}.'
    tree['encoder'][f'layer_{i}'] = {
        'self_attention': _attention(w, p + 'self_attn', d, heads),
        'attention_block': norm(w, p + 'self_attn_layer_norm', d),
        'ffn': _ffn(w, p, d, d_ff), 'ffn_block': norm(w, p + 'final_layer_norm', d)}
  for i in range(keys['num_decoder_layers']):
    p = f'model.decoder.layers.{i}.'
    tree['decoder'][f'layer_{i}'] = {
        'self_attention': _attention(w, p + 'self_attn', d, heads),
        'self_attention_block': norm(w, p + 'self_attn_layer_norm', d),
        'cross_attention': _attention(w, p + 'encoder_attn', d, heads),
        'cross_attention_block': norm(w, p + 'encoder_attn_layer_norm', d),
        'ffn': _ffn(w, p, d, d_ff), 'ffn_block': norm(w, p + 'final_layer_norm', d)}
  return tree
