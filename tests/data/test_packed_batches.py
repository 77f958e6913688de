"""Packed training batches against bucketed ones, through the real pipeline: each pair scores
the same loss in either form, and packed rows carry more real target tokens per batch.

The WMT configs train on packed rows (configs/wmt_base.py): this is what makes that a
batching change only, not a change of what the model learns from each pair.
"""

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.data import pipeline
from t2t_jax.model import losses, transformer as model
from t2t_jax.runtime import parallel
from test_pipeline import ROWS_MULTIPLE, _Named, _config, source, tok  # noqa: F401

CFG = model.TransformerConfig(vocab_size=1000, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                              num_layers=2, max_len=64, dropout_rate=0.0, deterministic=True)


def _epoch(corpus, tokenizer, packed: bool):
  """Every batch of one epoch: packed rows of 64 tokens, or buckets of 16-64 tokens."""
  config = _config(max_length=64, bucket_lengths=(16, 32, 48, 64), tokens_per_batch=1024,
                   pack_examples=packed)
  it = pipeline.make_train_iterator(config, corpus, tokenizer, rows_multiple=ROWS_MULTIPLE,
                                    num_epochs=1)
  return list(it)


def _members(batch):
  """[(row, segment id, source ids, target ids)] of every pair in `batch`; an unpacked row
  is one pair, segment 0 (its non-padding tokens)."""
  found = []
  for r, (x, y) in enumerate(zip(batch['inputs'], batch['targets'])):
    if 'targets_segmentation' not in batch:
      if y.any():
        found.append((r, 0, tuple(x[x != 0].tolist()), tuple(y[y != 0].tolist())))
      continue
    for k in range(1, int(batch['targets_segmentation'][r].max()) + 1):
      src = x[batch['inputs_segmentation'][r] == k]
      found.append((r, k, tuple(src.tolist()), tuple(y[batch['targets_segmentation'][r] == k]
                                                     .tolist())))
  return found


@jax.jit
def _pair_nll(params, batch, weights):
  """[pairs] NLL of each pair, summed over its target tokens (`losses.negative_log_likelihood`
  under each pair's `[batch, length]` mask of `weights` [pairs, batch, length])."""
  packing_args = {k: batch[k] for k in parallel.PACKING_KEYS if k in batch}
  logits = model.Transformer(CFG).apply({'params': params}, batch['inputs'], batch['targets'],
                                        **packing_args)
  return jax.vmap(lambda w: losses.negative_log_likelihood(logits, batch['targets'], w))(
      weights)


def _scores(params, batches):
  """{(source ids, target ids): NLL} of every pair of `batches`."""
  scores = {}
  for batch in batches:
    members = _members(batch)
    targets = batch['targets']
    seg = batch.get('targets_segmentation', (targets != 0).astype(np.int32))
    weights = np.zeros((len(members),) + targets.shape, np.float32)
    for i, (r, k, _, _) in enumerate(members):
      weights[i, r] = seg[r] == max(k, 1)
    nll = _pair_nll(params, {k: jnp.asarray(v) for k, v in batch.items()}, weights)
    for (_, _, src, tgt), value in zip(members, np.asarray(nll)):
      assert (src, tgt) not in scores  # every pair once per epoch
      scores[src, tgt] = float(value)
  return scores


def _real_target_tokens_per_batch(batches) -> float:
  return sum(int((b['targets'] != 0).sum()) for b in batches) / len(batches)


def test_packed_and_bucketed_batches_give_each_pair_the_same_loss(source, tok):
  corpus = _Named(source[:300])
  packed, bucketed = _epoch(corpus, tok, True), _epoch(corpus, tok, False)
  assert {b['targets'].shape for b in packed} == {(16, 64)}  # one shape: 1024 slots
  assert len({b['targets'].shape for b in bucketed}) == 4
  params = model.init_params(CFG, jax.random.PRNGKey(0))
  by_packed, by_bucket = _scores(params, packed), _scores(params, bucketed)
  assert set(by_packed) == set(by_bucket) and len(by_packed) > 250  # those within 64 tokens
  pairs = sorted(by_packed)
  np.testing.assert_allclose([by_packed[p] for p in pairs], [by_bucket[p] for p in pairs],
                             rtol=1e-5, atol=1e-5)
  assert np.std([by_packed[p] for p in pairs]) > 1.0  # pairs differ: the test has teeth
  # The same budget of 1024 padded target slots a batch carries more of the corpus packed.
  real_packed = _real_target_tokens_per_batch(packed)
  real_bucketed = _real_target_tokens_per_batch(bucketed)
  assert sum(len(t) for _, t in pairs) == sum(int((b['targets'] != 0).sum()) for b in packed)
  assert real_packed > 1.15 * real_bucketed, (real_packed, real_bucketed)
