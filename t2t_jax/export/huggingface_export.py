"""`--mode=export --format=huggingface`: a directory that transformers'
`AutoModelForSeq2SeqLM.from_pretrained` and `AutoTokenizer.from_pretrained` load:
- a post-LN model as a `MarianMTModel` with a `MarianTokenizer` (a source and a target
  SentencePiece model over one `vocab.json`);
- a pre-LN model with fairseq's positions and language tokens (an imported M2M100 model) as
  an `M2M100ForConditionalGeneration` with an `M2M100Tokenizer`.

Written without PyTorch or transformers (safetensors' numpy API, JSON;
`huggingface_files.py` writes each family's config and tokenizer files). What the family's
class cannot express exactly is refused in one line (`check_expressible`): another LayerNorm
epsilon than PyTorch's 1e-5 (fixed in both classes), learned positions, an untied output
projection, separate vocabularies, head widths other than d_model / h, grouped-query
attention, a sliding window, a model variant. The paper's interleaved sinusoids are carried
into Marian's class exactly: every d_model axis is permuted so that the sines come first
(`_halves`), which every part of the model is equivariant to (LayerNorm included).

The export checks itself where torch and transformers are installed (`self_check`).
"""

import os
from typing import Any, Dict

import numpy as np

from t2t_jax.export import huggingface_files as files
from t2t_jax.export.common import ExportError, ExportSource

# Marian's and M2M100's LayerNorms are torch.nn.LayerNorm(d_model): epsilon 1e-5, fixed.
TORCH_EPSILON = 1e-5


def family(source: ExportSource) -> str:
  """'marian' (post-LN) or 'm2m_100' (pre-LN with fairseq's positions), the class that
  expresses the model; ExportError for a pre-LN model with other positions."""
  cfg = source.model_config
  if cfg.norm_position == 'post':
    return 'marian'
  if cfg.positional == 'sinusoidal_fairseq':
    return 'm2m_100'
  raise ExportError(f"--format=huggingface: norm_position='pre' with positional="
                    f"{cfg.positional!r}: transformers' pre-LN class (M2M100) has fairseq's "
                    "positions ('sinusoidal_fairseq'), MarianMTModel is post-LN")


def check_expressible(source: ExportSource) -> str:
  """The family (`family`), or ExportError naming the first thing its class cannot express."""
  cfg, config = source.model_config, source.config
  kind = family(source)
  refusals = (
      (getattr(config, 'model', ''), f'--config.model={getattr(config, "model", "")}: a model variant '
       'has parts no transformers class has'),
      (cfg.layer_norm_epsilon != TORCH_EPSILON, f'layer_norm_epsilon={cfg.layer_norm_epsilon:g}: '
       "transformers' LayerNorm epsilon is PyTorch's 1e-5 and cannot be set; a model meant "
       'for transformers trains with --config.layer_norm_epsilon=1e-5'),
      (cfg.positional == 'learned', "positional='learned': transformers recomputes its "
       'sinusoids on load'),
      (kind == 'marian' and cfg.positional == 'sinusoidal_fairseq', "positional="
       "'sinusoidal_fairseq' with norm_position='post': no transformers class has both"),
      (kind == 'm2m_100' and cfg.logits_bias, 'logits_bias=True: M2M100 has no logit bias'),
      (kind == 'marian' and getattr(config, 'language_tokens', ''), 'language_tokens with '
       "norm_position='post': MarianTokenizer has no language tokens"),
      (not cfg.share_embeddings, 'share_embeddings=False: transformers ties the output '
       'projection to the embedding'),
      (cfg.source_vocab_size is not None, 'share_vocab=False: separate vocabularies are not '
       'exported yet'),
      (cfg.d_k * cfg.num_heads != cfg.d_model or cfg.d_v * cfg.num_heads != cfg.d_model,
       f'd_k={cfg.d_k}, d_v={cfg.d_v}: transformers\' heads are d_model / num_heads wide'),
      (cfg.num_kv_heads is not None, f'num_kv_heads={cfg.num_kv_heads}: one key/value head '
       'per query head in transformers\' classes'),
      (cfg.decoder_window is not None, f'decoder_window={cfg.decoder_window}: transformers\' '
       'classes attend to every earlier position'),
      (cfg.positional == 'sinusoidal' and cfg.d_model % 2, f'd_model={cfg.d_model} is odd: '
       'the paper\'s sinusoids cannot be reordered into Marian\'s halves'),
  )
  for refused, why in refusals:
    if refused:
      raise ExportError(f'--format=huggingface: {why}')
  return kind


def _halves(d_model: int) -> np.ndarray:
  """The permutation of d_model taking the paper's interleaved columns (sin, cos, sin, ...) to
  Marian's halves (every sine, then every cosine): column j of the result is column
  `perm[j]` of the paper's layout."""
  return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def tensors(source: ExportSource, rows: np.ndarray) -> Dict[str, np.ndarray]:
  """The state dict (BART's names, `[out, in]` linear weights) of `source`'s parameters; their
  id `j` is our id `rows[j]` (embedding rows, logit bias); d_model axes permuted to Marian's
  sinusoid layout when ours is the paper's."""
  cfg, params = source.model_config, source.params
  d = cfg.d_model
  perm = _halves(d) if cfg.positional == 'sinusoidal' else np.arange(d)
  a = lambda x: np.asarray(x, np.float32)  # noqa: E731
  out: Dict[str, np.ndarray] = {}

  def attention(prefix: str, p: Dict[str, Any]) -> None:
    for ours, theirs in (('query', 'q_proj'), ('key', 'k_proj'), ('value', 'v_proj')):
      kernel = a(p[ours]['kernel']).reshape(d, d)[perm]  # [in (permuted), heads * width]
      out[f'{prefix}.{theirs}.weight'] = np.ascontiguousarray(kernel.T)
      out[f'{prefix}.{theirs}.bias'] = (a(p[ours]['bias']).reshape(d) if 'bias' in p[ours]
                                        else np.zeros(d, np.float32))
    kernel = a(p['out']['kernel']).reshape(d, d)[:, perm]  # [heads * width, out (permuted)]
    out[f'{prefix}.out_proj.weight'] = np.ascontiguousarray(kernel.T)
    out[f'{prefix}.out_proj.bias'] = (a(p['out']['bias'])[perm] if 'bias' in p['out']
                                      else np.zeros(d, np.float32))

  def norm(name: str, p: Dict[str, Any]) -> None:
    out[f'{name}.weight'] = a(p['scale'])[perm]
    out[f'{name}.bias'] = a(p['bias'])[perm]

  def ffn(prefix: str, p: Dict[str, Any]) -> None:
    out[f'{prefix}fc1.weight'] = np.ascontiguousarray(a(p['wi']['kernel'])[perm].T)
    out[f'{prefix}fc1.bias'] = a(p['wi']['bias'])
    out[f'{prefix}fc2.weight'] = np.ascontiguousarray(a(p['wo']['kernel'])[:, perm].T)
    out[f'{prefix}fc2.bias'] = a(p['wo']['bias'])[perm]

  embedding = params['shared_embedding']
  out['model.shared.weight'] = np.ascontiguousarray(a(embedding['embedding'])[rows][:, perm])
  if cfg.norm_position == 'post':  # Marian's class always has a logit bias
    out['final_logits_bias'] = (a(embedding['logits_bias'])[rows] if 'logits_bias' in embedding
                                else np.zeros(cfg.vocab_size, np.float32))[None]
  for side in ('encoder', 'decoder'):
    stack = params[side]
    for i in range(cfg.encoder_layers if side == 'encoder' else cfg.decoder_layers):
      p, name = stack[f'layer_{i}'], f'model.{side}.layers.{i}.'
      attention(name + 'self_attn', p['self_attention'])
      norm(name + 'self_attn_layer_norm',
           (p['attention_block'] if side == 'encoder' else p['self_attention_block'])['norm'])
      if side == 'decoder':
        attention(name + 'encoder_attn', p['cross_attention'])
        norm(name + 'encoder_attn_layer_norm', p['cross_attention_block']['norm'])
      ffn(name, p['ffn'])
      norm(name + 'final_layer_norm', p['ffn_block']['norm'])
    if 'final_norm' in stack:  # pre-LN: M2M100's stack LayerNorm
      norm(f'model.{side}.layer_norm', stack['final_norm'])
  return out


def write(source: ExportSource, folder: str, kind: str) -> np.ndarray:
  """The model, config and tokenizer files of `source` (of family `kind`, `check_expressible`'s)
  into the existing folder `folder`; returns `rows` (their id -> our id)."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  rows = files.id_rows(kind, source)
  save_file(tensors(source, rows), os.path.join(folder, 'model.safetensors'),
            metadata={'format': 'pt'})
  files.write(kind, source, rows, folder)
  return rows


def convert(source: ExportSource, output: str) -> str:
  """Writes `source` as a transformers directory into the new directory `output`, checked
  (`huggingface_check.check`) before it takes the name; returns its absolute path."""
  from absl import logging  # pylint: disable=import-outside-toplevel
  from t2t_jax.export import huggingface_check  # pylint: disable=import-outside-toplevel
  from t2t_jax.export.common import new_directory  # pylint: disable=import-outside-toplevel
  kind = check_expressible(source)
  source.check_vocabulary()
  with new_directory(output) as folder:
    rows = write(source, folder, kind)
    checked = huggingface_check.check(source, folder, rows)
  logging.info('huggingface export: %s', checked)
  return os.path.abspath(output)
