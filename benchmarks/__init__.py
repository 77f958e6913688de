"""Throughput and memory benchmarks of t2t_jax against a PyTorch peer; JSON lines out.

Run from the repository root, e.g. `python -m benchmarks.train_step --help`, or everything on
CPU with `bash benchmarks/run_all.sh`. See docs/performance.md.
"""
