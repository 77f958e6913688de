"""Inference on a trained run: averaging, translation, evaluation, BLEU.

`averaging` (the last N checkpoints, §6.1, and the parameters to decode with), `translate`
(`Translator`: batched beam search), `portable` (its fixed-shape batching with jax and numpy
only, copied into StableHLO artifacts as serve.py), `evaluate` (loss and BLEU on a split),
`bleu` (sacreBLEU and paper-style tokenized BLEU), `modes` (`--mode=eval|decode|average`).
"""
