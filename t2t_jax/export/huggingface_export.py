"""`--mode=export --format=huggingface`: a directory that transformers'
`AutoModelForSeq2SeqLM.from_pretrained` and `AutoTokenizer.from_pretrained` load, as a
`MarianMTModel` (post-LN, biased projections, a logit bias, its own sinusoids) with a
`MarianTokenizer` (a source and a target SentencePiece model over one `vocab.json`).

Written without PyTorch or transformers (safetensors' numpy API, JSON). Our ids are kept as
the directory's ids: padding 0, EOS 1, unknown 2, the decoder's start token ours
(`decoder_start_id`). What Marian's class cannot express exactly is refused in one line:
another LayerNorm epsilon than PyTorch's 1e-5 (Marian's is fixed), pre-LN, learned positions,
an untied output projection, separate vocabularies, head widths other than d_model / h,
grouped-query attention, a sliding window, a model variant. The paper's interleaved sinusoids
are carried exactly: every d_model axis is permuted so that the sines come first
(`_halves`), which every part of the model is equivariant to (LayerNorm included).

The export checks itself where torch and transformers are installed (`self_check`).
"""

import json
import os
from typing import Any, Dict

import numpy as np

from t2t_jax.export.common import ExportError, ExportSource

# Marian's LayerNorm is torch.nn.LayerNorm(d_model): its epsilon cannot be set.
MARIAN_EPSILON = 1e-5


def check_expressible(source: ExportSource) -> None:
  """Raises ExportError naming the first thing of the model `MarianMTModel` cannot express."""
  cfg, config = source.model_config, source.config
  refusals = (
      (config.get('model', ''), f'--config.model={config.get("model", "")}: a model variant '
       'has parts no transformers class has'),
      (cfg.layer_norm_epsilon != MARIAN_EPSILON, f'layer_norm_epsilon={cfg.layer_norm_epsilon:g}: '
       "MarianMTModel's LayerNorm epsilon is PyTorch's 1e-5 and cannot be set; a model meant "
       'for transformers trains with --config.layer_norm_epsilon=1e-5'),
      (cfg.norm_position != 'post', "norm_position='pre': MarianMTModel is post-LN"),
      (cfg.positional == 'learned', "positional='learned': MarianMTModel recomputes its "
       'sinusoids on load'),
      (not cfg.share_embeddings, 'share_embeddings=False: MarianMTModel ties the output '
       'projection to the embedding'),
      (cfg.source_vocab_size is not None, 'share_vocab=False: separate vocabularies are not '
       'exported yet'),
      (cfg.d_k * cfg.num_heads != cfg.d_model or cfg.d_v * cfg.num_heads != cfg.d_model,
       f'd_k={cfg.d_k}, d_v={cfg.d_v}: MarianMTModel\'s heads are d_model / num_heads wide'),
      (cfg.num_kv_heads is not None, f'num_kv_heads={cfg.num_kv_heads}: MarianMTModel has one '
       'key/value head per query head'),
      (cfg.decoder_window is not None, f'decoder_window={cfg.decoder_window}: MarianMTModel '
       'attends to every earlier position'),
      (cfg.positional == 'sinusoidal' and cfg.d_model % 2, f'd_model={cfg.d_model} is odd: '
       'the paper\'s sinusoids cannot be reordered into Marian\'s halves'),
  )
  for refused, why in refusals:
    if refused:
      raise ExportError(f'--format=huggingface: {why}')


def _halves(d_model: int) -> np.ndarray:
  """The permutation of d_model taking the paper's interleaved columns (sin, cos, sin, ...) to
  Marian's halves (every sine, then every cosine): column j of the result is column
  `perm[j]` of the paper's layout."""
  return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def tensors(source: ExportSource) -> Dict[str, np.ndarray]:
  """Marian's state dict (its names, `[out, in]` linear weights) of `source`'s parameters,
  their d_model axes permuted to Marian's sinusoid layout when ours is the paper's."""
  cfg, params = source.model_config, source.params
  d, heads = cfg.d_model, cfg.num_heads
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
    out[f'{name}.weight'] = a(p['norm']['scale'])[perm]
    out[f'{name}.bias'] = a(p['norm']['bias'])[perm]

  def ffn(prefix: str, p: Dict[str, Any]) -> None:
    out[f'{prefix}fc1.weight'] = np.ascontiguousarray(a(p['wi']['kernel'])[perm].T)
    out[f'{prefix}fc1.bias'] = a(p['wi']['bias'])
    out[f'{prefix}fc2.weight'] = np.ascontiguousarray(a(p['wo']['kernel'])[:, perm].T)
    out[f'{prefix}fc2.bias'] = a(p['wo']['bias'])[perm]

  embedding = params['shared_embedding']
  out['model.shared.weight'] = np.ascontiguousarray(a(embedding['embedding'])[:, perm])
  out['final_logits_bias'] = (a(embedding['logits_bias']) if 'logits_bias' in embedding
                              else np.zeros(cfg.vocab_size, np.float32))[None]
  del heads
  for i in range(cfg.encoder_layers):
    p, name = params['encoder'][f'layer_{i}'], f'model.encoder.layers.{i}.'
    attention(name + 'self_attn', p['self_attention'])
    norm(name + 'self_attn_layer_norm', p['attention_block'])
    ffn(name, p['ffn'])
    norm(name + 'final_layer_norm', p['ffn_block'])
  for i in range(cfg.decoder_layers):
    p, name = params['decoder'][f'layer_{i}'], f'model.decoder.layers.{i}.'
    attention(name + 'self_attn', p['self_attention'])
    norm(name + 'self_attn_layer_norm', p['self_attention_block'])
    attention(name + 'encoder_attn', p['cross_attention'])
    norm(name + 'encoder_attn_layer_norm', p['cross_attention_block'])
    ffn(name, p['ffn'])
    norm(name + 'final_layer_norm', p['ffn_block'])
  return out


def model_config(source: ExportSource) -> Dict[str, Any]:
  """config.json of the `MarianMTModel` that computes `source`'s model."""
  cfg, config = source.model_config, source.config
  return {
      'architectures': ['MarianMTModel'], 'model_type': 'marian',
      'vocab_size': cfg.vocab_size, 'decoder_vocab_size': cfg.vocab_size,
      'd_model': cfg.d_model, 'encoder_layers': cfg.encoder_layers,
      'decoder_layers': cfg.decoder_layers, 'encoder_attention_heads': cfg.num_heads,
      'decoder_attention_heads': cfg.num_heads, 'encoder_ffn_dim': cfg.d_ff,
      'decoder_ffn_dim': cfg.d_ff, 'activation_function': cfg.activation,
      'max_position_embeddings': cfg.max_len, 'scale_embedding': cfg.scale_embeddings,
      'dropout': cfg.dropout_rate, 'attention_dropout': cfg.attention_dropout_rate,
      'activation_dropout': 0.0, 'pad_token_id': 0, 'eos_token_id': 1,
      'forced_eos_token_id': 1, 'decoder_start_token_id': cfg.decoder_start_id,
      'share_encoder_decoder_embeddings': True, 'tie_word_embeddings': True,
      'is_encoder_decoder': True, 'bad_words_ids': [[0]],
      'num_beams': int(config.beam_size), 'max_length': cfg.max_len,
  }


def write(source: ExportSource, folder: str) -> None:
  """The model, config and tokenizer files of `source` into the existing folder `folder`."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  from t2t_jax.data import vocab_pair  # pylint: disable=import-outside-toplevel
  check_expressible(source)
  save_file(tensors(source), os.path.join(folder, 'model.safetensors'),
            metadata={'format': 'pt'})
  config = model_config(source)
  generation = {k: config[k] for k in ('decoder_start_token_id', 'eos_token_id', 'pad_token_id',
                                       'forced_eos_token_id', 'bad_words_ids', 'num_beams',
                                       'max_length')}
  tok = source.tokenizer()
  pieces = source.pieces('target')
  vocab = {}
  for i, piece in enumerate(pieces):
    vocab.setdefault(piece, i)
  files = {'config.json': config, 'generation_config.json': generation, 'vocab.json': vocab,
           'tokenizer_config.json': {
               'tokenizer_class': 'MarianTokenizer', 'unk_token': pieces[2],
               'eos_token': pieces[1], 'pad_token': pieces[0], 'separate_vocabs': False,
               'model_max_length': config['max_position_embeddings']}}
  for name, value in files.items():
    with open(os.path.join(folder, name), 'w', encoding='utf-8') as f:
      json.dump(value, f, ensure_ascii=False, indent=1)
  for side, name in (('source', 'source.spm'), ('target', 'target.spm')):
    with open(os.path.join(folder, name), 'wb') as f:
      f.write(vocab_pair.side(tok, side)._proto)  # pylint: disable=protected-access


def self_check(source: ExportSource, folder: str) -> str:
  """Loads `folder` with transformers (where torch and transformers are installed) and checks
  that it decodes greedily as ours on the self-check sentences and scores our greedy outputs
  as ours to 1e-4 per sentence; returns what was checked, or why nothing was. Raises
  ExportError naming the first sentence that differs."""
  try:
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
  except ImportError:
    return 'not checked through transformers (torch and transformers are not installed)'
  from t2t_jax.export import self_check as checks  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference import translate  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import scoring  # pylint: disable=import-outside-toplevel
  tok = source.tokenizer()
  sentences = checks.check_sentences(source.config, tok)
  settings = checks.Settings.of(source.config)
  ours = translate.Translator(source.transformer, source.params, tok, strategy='greedy',
                              max_decode_extra=settings.max_decode_extra, threads=1,
                              parallelism='threads').translate_ids(sentences)
  model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
  theirs_tok = transformers.AutoTokenizer.from_pretrained(folder)
  worst = 0.0
  for i, (sentence, mine) in enumerate(zip(sentences, ours)):
    batch = theirs_tok([sentence], return_tensors='pt')
    if batch['input_ids'][0].tolist() != list(tok.encode(sentence)) + [1]:
      raise ExportError(f'the transformers tokenizer written to {folder} encodes self-check '
                        f'sentence {i + 1} {sentence[:40]!r} otherwise; nothing was written')
    with torch.no_grad():
      # Ours: at most input + max_decode_extra tokens, EOS included, within max_len; theirs
      # count the start token too, and force EOS last (`forced_eos_token_id`) as ours.
      limit = min(batch['input_ids'].shape[1] + settings.max_decode_extra,
                  source.model_config.max_len)
      generated = model.generate(**batch, num_beams=1, do_sample=False,
                                 max_length=limit + 1).tolist()[0][1:]
      labels = torch.tensor([list(mine) + [1]])
      logits = model(**batch, labels=labels).logits
    its = generated[:generated.index(1)] if 1 in generated else generated
    if its != list(mine):
      raise ExportError(f'the transformers model written to {folder} decodes self-check '
                        f'sentence {i + 1} {sentence[:40]!r} as {its[:8]}..., ours greedily as '
                        f'{list(mine)[:8]}...; nothing was written')
    theirs = float(torch.log_softmax(logits, -1)[0].gather(1, labels[0][:, None]).sum())
    mine_lp = float(scoring.token_log_probs(source.transformer, source.params,
                                            np.asarray([list(tok.encode(sentence)) + [1]]),
                                            labels.numpy()).sum())
    worst = max(worst, abs(theirs - mine_lp))
    if abs(theirs - mine_lp) > 1e-4:
      raise ExportError(f'the transformers model written to {folder} scores self-check '
                        f'sentence {i + 1} {theirs:.6f}, ours {mine_lp:.6f}; nothing was written')
  return (f'checked through transformers {transformers.__version__}: {len(sentences)} '
          f'sentences decode as ours (greedy), log probs within {worst:.1e}')


def convert(source: ExportSource, output: str) -> str:
  """Writes `source` as a transformers directory into the new directory `output`, checked
  (`self_check`) before it takes the name; returns its absolute path."""
  from t2t_jax.export.common import new_directory  # pylint: disable=import-outside-toplevel
  check_expressible(source)
  source.check_vocabulary()
  with new_directory(output) as folder:
    write(source, folder)
    checked = self_check(source, folder)
  from absl import logging  # pylint: disable=import-outside-toplevel
  logging.info('huggingface export: %s', checked)
  return os.path.abspath(output)
