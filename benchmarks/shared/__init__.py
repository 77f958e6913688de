"""What the benchmarks share: the harness (timing, interleaving, the machine, JSON-lines
records), model sizes and FLOP formulas, the PyTorch peer, the serving helpers and the results
printer. Imports nothing else of benchmarks/."""
