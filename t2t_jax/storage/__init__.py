"""Storage helpers at the bottom of the package: paths (epath, local or gs://), text I/O, the
workdir and its lock or lease. They import nothing else from t2t_jax."""
