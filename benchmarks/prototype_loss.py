"""What-if: the training loss without a materialised log-softmax, against t2t_jax.losses.

Times value-and-gradient of `losses.compute_metrics` (what the train step runs), of
`losses.label_smoothed_cross_entropy` alone, and of the logsumexp form proposed in
docs/performance.md, on `[rows, length, vocab]` float32 logits, interleaved; checks that the
loss and the gradient agree.

  python -m benchmarks.prototype_loss --vocab 37000 --rows 64 --length 64
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402


def logsumexp_loss(logits, targets, weights, label_smoothing):
  """Same values as losses.compute_metrics' loss and nll, no [.., vocab] log-probabilities."""
  import jax
  import jax.numpy as jnp
  z = logits.astype(jnp.float32)
  vocab = z.shape[-1]
  conf, low = 1.0 - label_smoothing, label_smoothing / (vocab - 1)
  lse = jax.nn.logsumexp(z, axis=-1)
  z_t = jnp.take_along_axis(z, targets[..., None], axis=-1)[..., 0]
  per_token = lse - conf * z_t - low * (jnp.sum(z, axis=-1) - z_t)
  w = weights.astype(jnp.float32)
  return jnp.sum(jnp.where(w != 0, per_token * w, 0.0)), {'nll': jnp.sum((lse - z_t) * w)}


def main(argv=None):
  parser = common.add_common_args(argparse.ArgumentParser(description=__doc__))
  parser.add_argument('--vocab', type=int, default=37000)
  parser.add_argument('--rows', type=int, default=64)
  parser.add_argument('--length', type=int, default=64)
  parser.add_argument('--rounds', type=int, default=4)
  args = parser.parse_args(argv)
  import jax
  import jax.numpy as jnp
  from t2t_jax import losses
  rng = np.random.default_rng(0)
  z = jnp.asarray(rng.standard_normal((args.rows, args.length, args.vocab), np.float32))
  y = jnp.asarray(rng.integers(2, args.vocab, (args.rows, args.length), dtype=np.int32))
  w = losses.padding_weights(y)

  def library(z):
    m = losses.compute_metrics(z, y, w, 0.1)
    return m['loss'], m

  def library_xent(z):
    return losses.label_smoothed_cross_entropy(z, y, w, 0.1)[0], {}

  fns = {'library compute_metrics': library, 'library label_smoothed_cross_entropy': library_xent,
         'logsumexp form': lambda z: logsumexp_loss(z, y, w, 0.1)}
  grads = {k: jax.jit(jax.value_and_grad(f, has_aux=True)) for k, f in fns.items()}
  out = {k: jax.block_until_ready(g(z)) for k, g in grads.items()}
  (ref_loss, _), ref_grad = out['library compute_metrics']
  (new_loss, _), new_grad = out['logsumexp form']
  times = {k: [] for k in grads}
  for _ in range(args.rounds):
    for k, g in grads.items():
      t0 = time.perf_counter()
      jax.block_until_ready(g(z))
      times[k].append(time.perf_counter() - t0)
  common.Emitter(args.out)({
      'name': 'prototype_loss', 'config': {'vocab_size': args.vocab, 'label_smoothing': 0.1},
      'shapes': {'rows': args.rows, 'length': args.length}, 'device': common.jax_device_info(),
      'loss': {'library': float(ref_loss), 'logsumexp_form': float(new_loss)},
      'max_abs_grad_diff': float(jnp.max(jnp.abs(ref_grad - new_grad))),
      'value_and_grad_median_s': {k: statistics.median(v) for k, v in times.items()}})


if __name__ == '__main__':
  main()
