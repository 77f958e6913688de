"""A variant of about 1.5B parameters for mesh planning (issue 54): d_model 2048, d_ff 8192,
16 heads, 12+12 layers, the shared 37000-token vocabulary, trained as `wmt_big`.

In float32 its parameters (5.9 GB) and Adam moments (11.9 GB) alone exceed a v5e chip's 16 GiB:
it does not fit data-parallel on v5e-8 and needs `--config.mesh` with `fsdp` or `tensor`
(`python main.py --mode=plan --config=configs/wmt_1b.py --topology=v5e:2x4
--plan_meshes='data:-1;fsdp:-1;data:-1,tensor:4'`, docs/meshes.md).
"""

from t2t_jax.configs import wmt_big


def get_config():
  c = wmt_big.get_config()
  c.d_model, c.d_ff, c.num_heads = 2048, 8192, 16
  c.num_layers = 12
  c.dtype = 'bfloat16'
  return c
