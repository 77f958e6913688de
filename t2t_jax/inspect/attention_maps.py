"""Attention weights of a trained model, read from the model's own forward pass.

`attention_weights(model, params, inputs, targets)` runs the teacher-forced model with
`capture_attention` on: every `MultiHeadAttention` then asks the model's `attention_fn` (Eq. 1,
the same function training and decoding call) for the weights it applies
(`return_weights=True`) and sows them; nothing here recomputes attention.

Axes. Encoder positions are the source ids (EOS-terminated). Decoder position i reads the
decoder input (BOS, then targets[:i]) and predicts targets[i]; the maps label it with
targets[i], the token it outputs, so the encoder-decoder attention reads as an alignment.
"""

import dataclasses
import functools
from typing import Dict, Iterator, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.model import transformer as model_lib
from t2t_jax.model.id_arrays import check_ids, check_same_batch

Array = jax.Array

# The three kinds of attention (§3.2.3), in the order the paper lists them.
KINDS = ('encoder', 'decoder', 'encoder_decoder')
TITLES = {'encoder': 'encoder self-attention', 'decoder': 'decoder self-attention',
          'encoder_decoder': 'encoder-decoder attention'}
# The module that sows each kind: (stack, attention module of every layer).
_SOURCES = {'encoder': ('encoder', 'self_attention'), 'decoder': ('decoder', 'self_attention'),
            'encoder_decoder': ('decoder', 'cross_attention')}


@dataclasses.dataclass(frozen=True)
class AttentionWeights:
  """Every layer's attention weights for a batch, float32 numpy arrays.

  `weights[kind]` also works, for kind in `KINDS`. Rows (queries) of real positions sum to 1
  over the real keys; padding keys and (decoder self-attention) future positions get exactly 0.
  Padding positions are kept: crop with `sentence`.
  """
  encoder: np.ndarray          # [layers, batch, heads, src_len, src_len]
  decoder: np.ndarray          # [layers, batch, heads, tgt_len, tgt_len]
  encoder_decoder: np.ndarray  # [layers, batch, heads, tgt_len, src_len]

  def __getitem__(self, kind: str) -> np.ndarray:
    if kind not in KINDS:
      raise KeyError(f'unknown attention kind {kind!r}; expected one of {", ".join(KINDS)}')
    return getattr(self, kind)

  def items(self) -> Iterator[Tuple[str, np.ndarray]]:
    return ((kind, self[kind]) for kind in KINDS)

  def sentence(self, index: int, src_len: int, tgt_len: int) -> Dict[str, np.ndarray]:
    """One batch row without its padding: {kind: `[layers, heads, q_len, k_len]`}.

    `src_len`, `tgt_len`: the row's real source and target lengths (EOS included).
    """
    lengths = {'encoder': (src_len, src_len), 'decoder': (tgt_len, tgt_len),
               'encoder_decoder': (tgt_len, src_len)}
    return {kind: np.ascontiguousarray(w[:, index, :, :lengths[kind][0], :lengths[kind][1]])
            for kind, w in self.items()}


def attention_weights(model: model_lib.ModelLike, params, inputs, targets) -> AttentionWeights:
  """Encoder, decoder and encoder-decoder attention weights of every layer, teacher-forced.

  Args:
    model: the model (a `Transformer` or a variant), or its config
      (`TransformerConfig.from_config(run_config)`); deterministic mode (no dropout) and
      `capture_attention` are set here.
    params: model parameters (e.g. `load_inference_params(workdir).params`).
    inputs: `[batch, src_len]` int source ids, EOS-terminated, 0-padded.
    targets: `[batch, tgt_len]` int target ids, EOS-terminated, 0-padded (not shifted: the
      model shifts them right itself, as in training).

  Returns:
    AttentionWeights with `[layers, batch, heads, q_len, k_len]` float32 arrays.
  """
  net = model_lib.as_model(model, deterministic=True, decode=False, capture_attention=True)
  for name, ids, size in (('inputs', inputs, net.cfg.input_vocab_size),
                          ('targets', targets, net.cfg.vocab_size)):
    check_ids('attention_weights', name, ids, size)
  check_same_batch('attention_weights', inputs, targets)
  captured = _capture(net, params, jnp.asarray(inputs, jnp.int32),
                      jnp.asarray(targets, jnp.int32))
  return AttentionWeights(**{kind: np.asarray(w) for kind, w in captured.items()})


@functools.partial(jax.jit, static_argnums=0)
def _capture(model: model_lib.Transformer, params, inputs: Array, targets: Array
             ) -> Dict[str, Array]:
  _, state = model.apply({'params': params}, inputs, targets, mutable=['intermediates'])
  sown = state['intermediates']

  def stack(stack_name: str, module: str) -> Array:
    # sow keeps a tuple per call; each attention module runs once per forward pass.
    n = model.cfg.encoder_layers if stack_name == 'encoder' else model.cfg.decoder_layers
    layers = [sown[stack_name][f'layer_{i}'][module]['attention_weights'][0]
              for i in range(n)]
    return jnp.stack(layers).astype(jnp.float32)

  return {kind: stack(*_SOURCES[kind]) for kind in KINDS}
