"""Speed against peers: training steps, decoding and serving of t2t_jax beside a PyTorch peer
(benchmarks/shared/torch_peer.py) and CTranslate2, in the same run on the same machine."""
