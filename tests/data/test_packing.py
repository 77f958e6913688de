"""Example packing: the model sees each pair of a packed row as if it were alone, and the
packed pipeline covers every pair once per epoch with one shape, exact resume and shards."""

import collections
import functools
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import TINY as TINY_FLAGS, read_metrics, run_main
from t2t_jax.model import attention, losses, transformer as model
from t2t_jax.runtime import first_fit, parallel
from t2t_jax.data import packing, pipeline
from test_pipeline import ROWS_MULTIPLE, _config, _take, _tokenized, source, tok  # noqa: F401

CFG = model.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4, d_k=8, d_v=8,
                              num_layers=2, max_len=32, dropout_rate=0.0, deterministic=True)
LENGTH = 16
# (source, target) lengths with EOS of the pairs of each packed row.
ROWS = [[(4, 3), (3, 5), (5, 2)], [(7, 6), (2, 4)], [(9, 11)]]
PACKING_KEYS = parallel.PACKING_KEYS


def _pairs(seed=0):
  rng = np.random.RandomState(seed)
  seq = lambda n: [int(x) for x in rng.randint(2, CFG.vocab_size, n - 1)] + [1]  # noqa: E731
  return [[(seq(s), seq(t)) for s, t in row] for row in ROWS]


def _packed(rows, n_rows=None):
  rows = rows + [[]] * ((n_rows or len(rows)) - len(rows))
  batch = {}
  for key, side in (('inputs', 0), ('targets', 1)):
    tokens, seg, pos = packing.layout([[p[side] for p in row] for row in rows], LENGTH)
    batch[key], batch[f'{key}_segmentation'], batch[f'{key}_position'] = tokens, seg, pos
  return batch


def _unpacked(rows, n_rows=None):
  pairs = [p for row in rows for p in row]
  n = n_rows or len(pairs)
  batch = {'inputs': np.zeros((n, LENGTH), np.int32), 'targets': np.zeros((n, LENGTH), np.int32)}
  for r, (s, t) in enumerate(pairs):
    batch['inputs'][r, :len(s)], batch['targets'][r, :len(t)] = s, t
  return batch


@functools.partial(jax.jit, static_argnums=0)  # one program, not each operation compiled
def _logits(cfg, params, batch):
  packing_args = {k: batch[k] for k in PACKING_KEYS if k in batch}
  return model.Transformer(cfg).apply({'params': params}, batch['inputs'], batch['targets'],
                                      **packing_args)


def _loss_sum(cfg, params, batch, weights=None):
  targets = jnp.asarray(batch['targets'])
  weights = losses.padding_weights(targets) if weights is None else weights
  return losses.label_smoothed_cross_entropy(_logits(cfg, params, batch), targets, weights,
                                             0.1)[0]


def test_segment_mask_and_per_pair_shift_right():
  seg = jnp.asarray([[1, 1, 2, 2, 2, 0]])
  mask = attention.segment_mask(seg, jnp.asarray([[1, 2, 2, 0]]))
  assert mask.shape == (1, 1, 6, 4) and mask.dtype == jnp.bool_
  np.testing.assert_array_equal(mask[0, 0], [[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0],
                                             [0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]])
  # Every pair's decoder input starts with BOS (= EOS = 1), not the last token before it.
  targets = jnp.asarray([[5, 6, 7, 8, 9, 0]])
  np.testing.assert_array_equal(model.shift_right(targets, segmentation=seg),
                                [[1, 5, 1, 7, 8, 1]])
  np.testing.assert_array_equal(model.shift_right(targets), [[1, 5, 6, 7, 8, 9]])


def test_layout_puts_pairs_back_to_back_with_segments_and_positions():
  tokens, seg, pos = packing.layout([[[5, 1], [6, 7, 1]], [], [[8, 1]]], 6)
  np.testing.assert_array_equal(tokens, [[5, 1, 6, 7, 1, 0], [0] * 6, [8, 1, 0, 0, 0, 0]])
  np.testing.assert_array_equal(seg, [[1, 1, 2, 2, 2, 0], [0] * 6, [1, 1, 0, 0, 0, 0]])
  np.testing.assert_array_equal(pos, [[0, 1, 0, 1, 2, 0], [0] * 6, [0, 1, 0, 0, 0, 0]])
  assert tokens.dtype == seg.dtype == pos.dtype == np.int32
  with pytest.raises(ValueError, match='do not fit'):
    packing.layout([[[5] * 4, [6] * 3]], 6)


def test_pack_puts_every_pair_once_in_rows_that_fit():
  rng = np.random.default_rng(0)
  src = rng.integers(1, 17, 500)
  tgt = np.clip(src + rng.integers(-3, 4, 500), 1, 32)
  order = rng.permutation(500)[:400]
  members, starts = packing.pack(src, tgt, order, 32, open_rows=8)
  assert sorted(members.tolist()) == sorted(order.tolist())
  rows = [members[a:b] for a, b in zip(starts[:-1], starts[1:])]
  assert all(len(r) and src[r].sum() <= 32 and tgt[r].sum() <= 32 for r in rows)
  # Within a row, arrival order; and greedy: better than one pair per row by far.
  position = {p: i for i, p in enumerate(order.tolist())}
  assert all(list(r) == sorted(r, key=position.get) for r in rows)
  assert len(rows) < 0.4 * len(order)


def test_pack_is_first_fit_over_the_open_rows():
  lengths = np.asarray([10, 60, 10, 50, 4, 30])
  order = np.arange(6)
  rows = lambda members, starts: [members[a:b].tolist()  # noqa: E731
                                  for a, b in zip(starts[:-1], starts[1:])]
  # The oldest open row that fits takes the pair; both sides must fit.
  assert rows(*packing.pack(lengths, lengths, order, 64)) == [[0, 2, 4, 5], [1], [3]]
  assert rows(*packing.pack(lengths, np.asarray([10, 60, 10, 50, 60, 30]), order, 64)) == [
      [0, 2, 5], [1], [3], [4]]
  # One open row: next-fit. Closed rows come first, in closing order.
  assert rows(*packing.pack(lengths, lengths, order, 64, open_rows=1)) == [
      [0], [1], [2, 3, 4], [5]]
  assert rows(*packing.pack(lengths, lengths, order, 64, open_rows=2)) == [
      [0, 2], [1, 4], [3], [5]]


@pytest.mark.parametrize('kernel', ['loop', 'scan'])
def test_pairs_fill_a_row_exactly_and_not_one_token_over(kernel, monkeypatch):
  if kernel == 'scan':  # the training loop's kernel, taken from SCAN_MIN_PAIRS pairs on
    monkeypatch.setattr(packing, 'SCAN_MIN_PAIRS', 0)
  pack = lambda s, t, n=64: packing.pack(  # noqa: E731
      np.asarray(s), np.asarray(t), np.arange(len(s)), n,
      row_ids=first_fit.row_ids if kernel == 'scan' else None)
  rows = lambda members, starts: [members[a:b].tolist()  # noqa: E731
                                  for a, b in zip(starts[:-1], starts[1:])]
  # 40 + 24 = 64 and 10 + 54 = 64: the second pair fills both sides of row 0 exactly.
  assert rows(*pack([40, 24, 1], [10, 54, 1])) == [[0, 1], [2]]
  # One token more on either side does not fit: a new row.
  assert rows(*pack([40, 25, 1], [10, 54, 1])) == [[0, 2], [1]]
  assert rows(*pack([40, 24, 1], [10, 55, 1])) == [[0, 2], [1]]
  # A pair of exactly L tokens fits a row alone; L + 1 on either side is refused.
  assert rows(*pack([64, 64, 3], [1, 64, 3])) == [[0], [1], [2]]
  for s, t in ((65, 1), (1, 65)):
    with pytest.raises(ValueError, match=f'pair 1 \\({s}, {t} tokens\\) does not fit a row '
                       'of 64'):
      pack([3, s], [3, t])
  # The layout of an exactly full row, and of one token over.
  tokens, seg, _ = packing.layout([[[5] * 4, [6] * 2], [[7] * 6]], 6)
  np.testing.assert_array_equal(tokens, [[5, 5, 5, 5, 6, 6], [7] * 6])
  np.testing.assert_array_equal(seg, [[1, 1, 1, 1, 2, 2], [1] * 6])
  with pytest.raises(ValueError, match='row 0: 7 tokens do not fit 6'):
    packing.layout([[[5] * 4, [6] * 3]], 6)
  with pytest.raises(ValueError, match='row 1: 7 tokens do not fit 6'):
    packing.layout([[[5]], [[7] * 7]], 6)


@pytest.mark.parametrize('positional,norm_position', [('sinusoidal', 'post'),
                                                      ('learned', 'pre')])
@pytest.mark.slow
def test_packed_rows_give_the_unpacked_losses_and_gradients(positional, norm_position):
  cfg = CFG.replace(positional=positional, norm_position=norm_position)
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  rows = _pairs()
  packed, unpacked = _packed(rows), _unpacked(rows)
  assert packed['targets'].shape[0] < unpacked['targets'].shape[0]
  # Per pair: the loss sum over its target tokens.
  packed_logits, unpacked_logits = _logits(cfg, params, packed), _logits(cfg, params, unpacked)
  # Compiled: one program per batch shape, not one per operation and pair.
  loss = jax.jit(lambda logits, targets, weights: losses.label_smoothed_cross_entropy(
      logits, targets, weights, 0.1))
  pair = 0
  for r, row in enumerate(rows):
    for k in range(1, len(row) + 1):
      w_packed = np.zeros(packed['targets'].shape, np.float32)
      w_packed[r] = packed['targets_segmentation'][r] == k
      w_alone = np.zeros(unpacked['targets'].shape, np.float32)
      w_alone[pair] = unpacked['targets'][pair] != 0
      a = loss(packed_logits, packed['targets'], w_packed)
      b = loss(unpacked_logits, unpacked['targets'], w_alone)
      np.testing.assert_allclose(a[0], b[0], rtol=1e-5)
      assert float(a[1]) == float(b[1]) == len(row[k - 1][1])
      pair += 1
  # The whole batch: same loss sum and same gradients w.r.t. every parameter.
  loss_p, grad_p = jax.jit(jax.value_and_grad(lambda p: _loss_sum(cfg, p, packed)))(params)
  loss_u, grad_u = jax.jit(jax.value_and_grad(lambda p: _loss_sum(cfg, p, unpacked)))(params)
  np.testing.assert_allclose(loss_p, loss_u, rtol=1e-5)
  leaves = jax.tree_util.tree_leaves_with_path(grad_p)
  assert len(leaves) == len(jax.tree_util.tree_leaves(params))
  for (path, gp), gu in zip(leaves, jax.tree_util.tree_leaves(grad_u)):
    np.testing.assert_allclose(gp, gu, atol=1e-5, rtol=1e-5, err_msg=jax.tree_util.keystr(path))
  assert max(float(jnp.abs(g).max()) for g in jax.tree_util.tree_leaves(grad_p)) > 1e-2


def test_a_pair_cannot_see_the_other_pairs_of_its_row():
  params = model.init_params(CFG, jax.random.PRNGKey(1))
  packed = _packed(_pairs(seed=3))
  before = _logits(CFG, params, packed)
  # Change every token of pair 1 of row 0 on both sides (not its EOS).
  changed = {k: v.copy() for k, v in packed.items()}
  for key in ('inputs', 'targets'):
    first = changed[f'{key}_segmentation'][0] == 1
    first[np.flatnonzero(first)[-1]] = False
    changed[key][0, first] = (changed[key][0, first] + 7) % (CFG.vocab_size - 2) + 2
  after = _logits(CFG, params, changed)
  seg = packed['targets_segmentation'][0]
  others = seg >= 2  # the other pairs' positions (padding logits are never scored)
  assert others.sum() >= 6
  np.testing.assert_allclose(after[0, others], before[0, others], atol=1e-6)
  np.testing.assert_array_equal(after[1:], before[1:])
  assert not np.allclose(after[0, seg == 1], before[0, seg == 1])  # the test has teeth


def test_packing_arguments_come_together_and_never_in_decode_mode():
  params = model.init_params(CFG, jax.random.PRNGKey(0))
  packed = _packed(_pairs())
  with pytest.raises(ValueError, match='targets_segmentation'):
    model.Transformer(CFG).apply({'params': params}, packed['inputs'], packed['targets'],
                                 inputs_segmentation=packed['inputs_segmentation'])
  with pytest.raises(ValueError, match='both the segmentation and the positions'):
    model.Transformer(CFG).apply({'params': params}, packed['inputs'], packed['targets'],
                                 packed['inputs_segmentation'], packed['targets_segmentation'])


def test_sharded_step_passes_the_packing_keys():
  """8 devices: grad sums of a packed batch == those of the same pairs unpacked."""
  mesh = parallel.make_mesh()
  rows = _pairs(seed=5)
  grad_fn = jax.jit(parallel.make_grad_fn(CFG, mesh, label_smoothing=0.1))
  rng = jax.random.PRNGKey(0)
  params = model.init_params(CFG, jax.random.PRNGKey(2))
  g_p, m_p = grad_fn(params, parallel.shard_batch(_packed(rows, 8), mesh), rng)
  g_u, m_u = grad_fn(params, parallel.shard_batch(_unpacked(rows, 8), mesh), rng)
  for k in ('loss', 'nll', 'weight', 'correct'):
    np.testing.assert_allclose(m_p[k], m_u[k], rtol=1e-5)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5),
                         g_p, g_u)


# --- pipeline ---

def _decode(batch):
  """The pairs of a packed batch, row by row, checking the layout of every row."""
  pairs = []
  for r in range(batch['targets'].shape[0]):
    row = []
    for key in ('inputs', 'targets'):
      tokens, seg, pos = (batch[key][r], batch[f'{key}_segmentation'][r],
                          batch[f'{key}_position'][r])
      n = int(np.count_nonzero(seg))
      assert not seg[n:].any() and not tokens[n:].any() and not pos[n:].any()  # pad at the end
      assert np.all(np.diff(seg[:n]) >= 0) and np.all(np.diff(seg[:n]) <= 1)
      side = []
      for k in range(1, int(seg.max(initial=0)) + 1):
        at = np.flatnonzero(seg == k)
        np.testing.assert_array_equal(pos[at], np.arange(len(at)))
        assert tokens[at][-1] == 1 and 1 not in tokens[at][:-1]  # one EOS, at the end
        side.append(tuple(int(x) for x in tokens[at]))
      row.append(side)
    assert len(row[0]) == len(row[1])  # the same pairs on both sides
    pairs.extend(zip(*row))
  return pairs


def _packed_config(**kw):
  # L = 128 (the bucket covering max_length), 16 rows: about 3 verses a row.
  return _config(pack_examples=True, max_length=128, **kw)


def _epoch(config, source, tok, **kw):
  it = pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE,
                                    num_epochs=1, **kw)
  return list(it), it.info


def test_one_packed_epoch_covers_every_pair_once_with_one_shape(source, tok):
  config = _packed_config()
  batches, info = _epoch(config, source, tok)
  kept = _tokenized(source, tok, config.max_length)
  assert collections.Counter(p for b in batches for p in _decode(b)) == (
      collections.Counter(kept))
  assert len(batches) == info.batches_per_epoch and info.num_used == len(kept)
  assert {b['targets'].shape for b in batches} == {(16, 128)}  # 16 * 128 = 2048 tokens
  assert info.num_shapes == 1 and (info.bucket_lengths, info.bucket_rows) == ((128,), (16,))
  for b in batches:
    assert set(b) == {'inputs', 'targets', *PACKING_KEYS}
    assert all(v.dtype == np.int32 and v.shape == (16, 128) for v in b.values())
  # Several pairs per row: the rows actually pack.
  rows = sum(int(np.any(b['targets'] != 0, axis=1).sum()) for b in batches)
  assert rows == info.packed_rows and len(kept) / rows > 2.5
  assert 'packed' in pipeline.shapes_summary(info)
  # Padding efficiency, exact for the epoch, and better than length buckets on the same data.
  padded = sum(b['targets'].size for b in batches)
  real = (sum(int(np.count_nonzero(b['inputs'])) for b in batches),
          sum(int(np.count_nonzero(b['targets'])) for b in batches))
  assert (info.padded_tokens, info.real_tokens) == (padded, real)
  bucketed = pipeline.make_train_iterator(_config(max_length=128), source, tok,
                                          rows_multiple=ROWS_MULTIPLE, num_epochs=1).info
  assert bucketed.real_tokens == info.real_tokens
  assert info.padding_efficiency[0] > bucketed.padding_efficiency[0]
  assert info.padding_efficiency[1] > bucketed.padding_efficiency[1] + 0.15
  # Eval batches stay unpacked.
  eval_batches = pipeline.make_eval_batches(config, source, tok, rows_multiple=ROWS_MULTIPLE)
  assert all(set(b) == {'inputs', 'targets'} for b in eval_batches)


def test_packed_epochs_are_deterministic_and_reshuffled(source, tok):
  config = _packed_config()
  it = pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE,
                                    num_epochs=2)
  plan_sizes = [it._plan.epoch_batches(e) for e in range(2)]  # pylint: disable=protected-access
  epochs = [_take(it, n) for n in plan_sizes]
  with pytest.raises(StopIteration):
    next(it)
  again, _ = _epoch(config, source, tok)
  assert all(np.array_equal(a[k], b[k]) for a, b in zip(epochs[0], again) for k in a)
  assert len(again) == len(epochs[0])
  assert _decode(epochs[0][0]) != _decode(epochs[1][0])
  counts = [collections.Counter(p for b in e for p in _decode(b)) for e in epochs]
  assert counts[0] == counts[1]


@pytest.mark.parametrize('where', ['middle', 'epoch_boundary'])
def test_packed_state_restores_the_exact_continuation(source, tok, where):
  config = _packed_config()
  it = pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE)
  n = it.info.batches_per_epoch
  k = 5 if where == 'middle' else n - 2  # the next 4 batches cross into epoch 1
  _take(it, k)
  state = json.loads(json.dumps(it.get_state()))
  assert (state['epoch'], state['batch_in_epoch'], state['pack_examples']) == (0, k, True)
  expected = _take(it, 4)
  assert it.get_state()['epoch'] == (0 if where == 'middle' else 1)
  restored = pipeline.make_train_iterator(config, source, tok, rows_multiple=ROWS_MULTIPLE)
  restored.set_state(state)
  got = _take(restored, 4)
  assert all(np.array_equal(a[key], b[key]) for a, b in zip(got, expected) for key in a)
  # A bucketed state is refused by a packed pipeline (a checkpoint would refuse it first).
  bucketed = pipeline.make_train_iterator(_config(max_length=128), source, tok,
                                          rows_multiple=ROWS_MULTIPLE)
  with pytest.raises(pipeline.PipelineError, match='pack_examples'):
    restored.set_state(bucketed.get_state())


def test_two_packed_processes_split_the_one_process_epoch(source, tok):
  config = _packed_config()
  whole, info = _epoch(config, source, tok)
  shards = [_epoch(config, source, tok, process_index=p, process_count=2)[0] for p in range(2)]
  # 2048 tokens over 2 processes: 8 rows of 128 each, the same 16-row global batches.
  assert len(shards[0]) == len(shards[1]) == len(whole)
  for b, b0, b1 in zip(whole, *shards):
    assert b0['targets'].shape == b1['targets'].shape == (8, 128)
    for key in b:  # process p gets global rows p, p + 2, ...
      np.testing.assert_array_equal(b0[key], b[key][0::2])
      np.testing.assert_array_equal(b1[key], b[key][1::2])
  c0, c1 = (collections.Counter(p for b in s for p in _decode(b)) for s in shards)
  assert c0 and c1 and c0 + c1 == collections.Counter(_tokenized(source, tok, config.max_length))


@pytest.mark.slow
def test_training_with_packed_examples_from_the_command_line(corpus, tmp_path):
  # TINY, with rows of 128 tokens: its small vocabulary makes most verses 40-60 tokens long.
  longer = ('--config.max_length=', '--config.max_len=', '--config.bucket_lengths=')
  flags = [f for f in TINY_FLAGS if not f.startswith(longer)] + [
      '--config.max_length=128', '--config.max_len=128', '--config.bucket_lengths=(32,64,128)']
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}',
                    '--config.num_train_steps=40', *flags, '--config.pack_examples=True')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'compiled 1 train-step shapes' in result.stderr
  pairs_per_row = re.search(r'16x128 \(\d+ pairs\), packed, ([\d.]+) pairs per row',
                            result.stderr)
  assert pairs_per_row and float(pairs_per_row.group(1)) > 1.5, result.stderr[-3000:]
  records = read_metrics(workdir)
  loss = {r['step']: r['loss'] for r in records if 'loss' in r}
  assert sorted(loss) == [10, 20, 30, 40]
  assert loss[40] < loss[10] - 0.25, loss
  assert all(r['padding_efficiency'] > 0.65 for r in records if 'padding_efficiency' in r)
  dev = {r['step']: r['eval_dev/loss'] for r in records if 'eval_dev/loss' in r}
  assert dev[30] < dev[0] - 0.8, dev  # eval batches are unpacked
