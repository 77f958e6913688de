"""`--mode=info`: parameter count and shapes of a configuration, without data or compute."""

import jax

from t2t_jax.model import param_paths, transformer as model, variant


def describe(config) -> str:
  """A human-readable summary: model sizes, total parameters, and every parameter's shape
  (of the model `config.model` names, the paper's by default)."""
  net = variant.from_config(config)
  cfg = net.cfg
  shapes = model.param_shapes(net)
  lines = [
      f'd_model={cfg.d_model} d_ff={cfg.d_ff} num_heads={cfg.num_heads} d_k={cfg.d_k} '
      f'd_v={cfg.d_v} num_layers={cfg.num_layers}'
      + (f' encoder_layers={cfg.encoder_layers} decoder_layers={cfg.decoder_layers}'
         if cfg.encoder_layers != cfg.decoder_layers else '')
      + f' vocab_size={cfg.vocab_size} '
      + (f'source_vocab_size={cfg.source_vocab_size} ' if cfg.source_vocab_size else '')
      + f'positional={cfg.positional} norm_position={cfg.norm_position} dtype={cfg.dtype.name}'
      + (f' num_kv_heads={cfg.num_kv_heads}' if cfg.num_kv_heads is not None else '')
      + ('' if cfg.share_embeddings else ' share_embeddings=False')
      + ('' if cfg.scale_embeddings else ' scale_embeddings=False')
      + (f' activation={cfg.activation}' if cfg.activation != 'relu' else '')
      + (' attention_bias=True' if cfg.attention_bias else '')
      + (' logits_bias=True' if cfg.logits_bias else '')
      + (f' layer_norm_epsilon={cfg.layer_norm_epsilon:g}' if cfg.layer_norm_epsilon != 1e-6
         else '')
      + (f' decoder_start_id={cfg.decoder_start_id}' if cfg.decoder_start_id != 1 else '')
      + (f' model={config.model}' if getattr(config, 'model', '') else ''),
  ]
  paper = ('shared_embedding', 'encoder', 'decoder')
  for name in paper + tuple(sorted(set(shapes) - set(paper))):  # a variant's 'shared' part
    lines.append(f'  {name:<17} {model.count_params(shapes[name]):>13,d}')
  lines.append(f'  {"total":<17} {model.count_params(shapes):>13,d}')
  if getattr(config, 'trainable', ''):
    trained, frozen = param_paths.counts(shapes, config.trainable)
    lines.append(f'  trainable={config.trainable!r}: {trained:,d} trained, {frozen:,d} frozen')
  lines.append('shapes:')
  flat = jax.tree_util.tree_flatten_with_path(shapes)[0]
  for path, leaf in flat:
    name = param_paths.path_name(path)
    lines.append(f'  {name:<60} {tuple(leaf.shape)}')
  return '\n'.join(lines)
