"""Training: the loop and everything that happens around its steps.

`train` (the loop), `optim` (Adam and the §5.3 schedule), `save_policy`, `preemption`,
`dev_eval` (dev loss and BLEU during training), `metrics` (metrics.jsonl, TensorBoard),
`plots` (learning curves), `summary` (`--mode=train`: the run, then the end-of-run report).
"""
