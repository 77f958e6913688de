"""The Transformer itself: attention, layers, the model and its decode cache, losses, search.

Nothing here knows about data, files, devices or checkpoints: `attention` is pure
`jax.numpy` (Eq. 1, the one `AttentionFn` every path calls), `layers` and `transformer` are
flax linen modules, `parts` names a model's extension points (docs/architecture.md, "A new
model variant"), `transformer_config` its validated hyperparameters, `incremental` decodes
one position at a time with a key/value cache (and checks it against teacher forcing),
`variant` builds the model a run config names (`--config.model=module:factory`, the paper's
by default), `losses` are the §5.4 training objectives, `search` is beam/greedy search over any
`logits_fn`, `scoring` gives per-token log probabilities, `nnx_bridge` the model as an NNX
module, and `info` describes a config's sizes (`--mode=info`). Importing it loads jax, flax
and numpy only (tests/test_import.py).
"""
