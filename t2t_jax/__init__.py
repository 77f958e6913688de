"""t2t_jax: the original Transformer (Vaswani et al. 2017) in JAX/Flax.

The public API, re-exported from the packages that own it (docs/architecture.md has the map).
Importing t2t_jax also registers the tasks beyond translation (`t2t_jax.parsing`: 'treebank').
"""

from t2t_jax.model.attention import (causal_mask, combine_masks, dot_product_attention,
                                     dot_product_attention_reference, merge_heads, padding_mask,
                                     segment_mask, split_heads)
from t2t_jax.config import ConfigError, validate
from t2t_jax.model.layers import (AddPositions, FeedForward, MultiHeadAttention, Residual,
                                  SharedEmbedding, sinusoidal_positions)
from t2t_jax.model.losses import (compute_metrics, label_smoothed_cross_entropy,
                                  negative_log_likelihood, padding_weights, perplexity,
                                  token_accuracy)
from t2t_jax.model.transformer import (BOS_ID, EOS_ID, PAD_ID, Transformer, TransformerConfig,
                                       count_params, DecodeContext, decode_context, decode_step,
                                       grow_cache, init_cache, init_params, param_shapes,
                                       shift_right)
from t2t_jax.training.optim import learning_rate_schedule, make_optimizer
from t2t_jax.model.search import beam_search, greedy_search, length_penalty
from t2t_jax.inference.bleu import corpus_bleu, tokenized_bleu
from t2t_jax.inference.averaging import average_checkpoints
from t2t_jax.inference.checkpoint_choice import load_inference_params
from t2t_jax.runtime.checkpoint import Checkpointer
from t2t_jax.runtime.parallel import (TrainState, create_train_state, initialize_distributed,
                                      make_mesh, make_eval_step, make_train_step, shard_batch,
                                      train_state_shardings)
from t2t_jax.inference.translate import Translator
from t2t_jax.training.plots import load_curves, write_learning_curves
from t2t_jax.inspect.attention_maps import AttentionWeights, attention_weights
from t2t_jax.inspect.attention_plots import attention_figure, attention_heatmaps, attention_lines
from t2t_jax.export.common import ExportError
from t2t_jax.export.ctranslate2_export import export_ctranslate2
from t2t_jax.export.ctranslate2_decoding import gnmt_rerank
from t2t_jax.export.stablehlo_export import export_stablehlo
from t2t_jax.inference.portable import ExportedTranslator
from t2t_jax.plan import PlanError, make_plan
from t2t_jax import parsing  # noqa: F401  (registers the 'treebank' task: data.tasks)

__version__ = '0.1.0'
