"""What training and inference both run on: the device mesh and sharded steps (`parallel`),
checkpoints (`checkpoint`, `damage`), work split across processes (`multihost`), the XLA
compilation cache and the quiet start of native backends (`backends`)."""
