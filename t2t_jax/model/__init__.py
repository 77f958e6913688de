"""The Transformer itself: attention, layers, the model and its decode cache, losses, search.

Nothing here knows about data, files, devices or checkpoints: `attention` is pure
`jax.numpy`, `layers` and `transformer` are flax linen modules, `losses` are the §5.4
training objectives, `search` is beam/greedy search over any `logits_fn`, and `info`
describes a config's sizes (`--mode=info`).
"""
