"""What training and inference both run on: the mesh, sharded steps, checkpoints, processes.

`parallel` builds the device mesh and the jitted, shard_mapped train and eval steps;
`checkpoint` saves and restores them with orbax (`damage` triages unreadable ones);
`multihost` splits decoding across processes; `compile_cache` turns on the persistent XLA
cache; `backends` keeps native libraries' start-up noise off the console.
"""
