"""Storage helpers, the bottom layer: paths, text I/O, the workdir and its lock or lease.

`paths` reads and writes local or gs:// files through etils.epath (atomic writes, GCS's
write-once precondition), `textio` reads and writes UTF-8 text files of lines, `workdir`
locks a run's directory (`lease` on object stores). Nothing here imports the rest of t2t_jax,
jax or flax.
"""
