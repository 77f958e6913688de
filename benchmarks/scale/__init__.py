"""The paper's scale on the machines we have: the data path at WMT size, the full-size dry run,
compile times per shape, TPU plans, preemption and train-state bytes."""
