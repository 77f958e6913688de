"""Training: the loop (`train`), optimizer and schedule, when to save, preemption, dev eval,
metrics and learning curves, and the end-of-run report."""
