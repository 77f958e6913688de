"""Measurements of t2t_jax, one folder per purpose; JSON lines out, into benchmarks/results/.

  shared/   the harness (the only clock), model sizes and FLOPs, the PyTorch peer, the serving
            helpers, the results printer: what every other folder imports;
  peers/    speed of training, decoding and serving against PyTorch and CTranslate2 peers;
  device/   the device check: the prepared run for a lent GPU;
  scale/    the paper's sizes: data path, dry run, compile times, TPU plans, state bytes;
  studies/  what the model learns: Table 3 in miniature, variants, sweeps, parsing, EVALB.

Run from the repository root, e.g. `python -m benchmarks.peers.train_step --help`, or the
CPU suite with `bash benchmarks/run_all.sh`. Each folder's README.md names its commands; see
docs/performance.md and docs/architecture.md ("benchmarks/ and tours/").
"""
