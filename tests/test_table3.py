"""Table 3's configs end to end: every row builds, has the paper's parameter count at WMT scale,
traces its training step on the 8-device CPU mesh; the miniature rows (configs/table3_small.py)
follow the written scaling rule and each takes a real training step on that mesh."""

import jax
import numpy as np
import pytest

from configs import quickstart, table3, table3_small
from t2t_jax import config as config_lib
from t2t_jax.model import transformer as model
from t2t_jax.runtime import parallel
from t2t_jax.training import optim

WMT_ROWS = list(table3.ROWS) + ['big']


def _cfg(config) -> model.TransformerConfig:
  return model.TransformerConfig.from_config(config_lib.validate(config))


def _step(config, mesh):
  return parallel.make_train_step(_cfg(config), optim.make_optimizer(config), mesh,
                                  label_smoothing=config.label_smoothing, seed=config.seed)


def _batch(rows: int, length: int, vocab: int, seed: int = 0):
  rng = np.random.RandomState(seed)
  batch = {k: rng.randint(3, vocab, (rows, length)).astype(np.int32) for k in ('inputs', 'targets')}
  batch['targets'][::2, length // 2:] = 0  # padded rows: the masks are in the traced step
  return batch


@pytest.mark.slow
@pytest.mark.parametrize('row', WMT_ROWS)
def test_every_wmt_row_traces_its_train_step_on_the_mesh(row):
  config = table3.get_config(row)
  cfg = _cfg(config)
  count = model.count_params(model.param_shapes(cfg))
  if row in table3.PAPER_PARAMS:
    assert abs(count / (table3.PAPER_PARAMS[row] * 1e6) - 1) < 0.075
  mesh = parallel.make_mesh()
  assert mesh.size == 8
  state = parallel._abstract_state(cfg, optim.make_optimizer(config))
  shardings = parallel.train_state_shardings(state, mesh, shard_optimizer_state=False)
  state = jax.tree_util.tree_map(
      lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), state, shardings)
  batch = {k: jax.ShapeDtypeStruct((16, 32), np.int32, sharding=parallel.data_sharded(mesh))
           for k in ('inputs', 'targets')}
  new_state, metrics = jax.eval_shape(_step(config, mesh), state, batch)
  assert jax.tree_util.tree_structure(new_state) == jax.tree_util.tree_structure(state)
  assert model.count_params(new_state.params) == count
  assert metrics['loss'].shape == ()


# The scaling rule of configs/table3_small.py, written out for every row.
SMALL_ROWS = {
    'base': {}, 'A1': dict(num_heads=1, d_k=128, d_v=128), 'A2': dict(num_heads=2, d_k=64, d_v=64),
    'A3': dict(num_heads=8, d_k=16, d_v=16), 'A4': dict(num_heads=16, d_k=8, d_v=8),
    'B1': dict(d_k=8), 'B2': dict(d_k=16), 'C1': dict(num_layers=1), 'C2': dict(num_layers=2),
    'C3': dict(num_layers=4), 'C4': dict(d_model=64, d_k=16, d_v=16),
    'C5': dict(d_model=256, d_k=64, d_v=64), 'C6': dict(d_ff=256), 'C7': dict(d_ff=1024),
    'D1': dict(dropout_rate=0.0), 'D2': dict(dropout_rate=0.2), 'D3': dict(label_smoothing=0.0),
    'D4': dict(label_smoothing=0.2), 'E': dict(positional='learned'),
}


def test_small_rows_follow_the_scaling_rule():
  assert set(SMALL_ROWS) == {'base', *table3.ROWS}
  for row, expected in SMALL_ROWS.items():
    assert table3_small.scaled_row(row) == expected, row
    c = table3_small.get_config(row)
    for key, value in expected.items():
      assert c[key] == value, (row, key)
  # Rows A, C4, C5 keep attention at fixed compute (h * d_k = d_model), as the paper's do.
  for row in ('A1', 'A2', 'A3', 'A4', 'C4', 'C5'):
    cfg = _cfg(table3_small.get_config(row))
    assert cfg.num_heads * cfg.d_k == cfg.num_heads * cfg.d_v == cfg.d_model, row
  with pytest.raises(ValueError, match="'F1'.*A1"):
    table3_small.scaled_row('F1')


def test_small_rows_keep_the_first_tunings_recipe():
  def peak(c):
    schedule = optim.learning_rate_schedule(c.d_model, c.warmup_steps, c.learning_rate_scale)
    return float(schedule(c.warmup_steps - 1))  # optax counts from 0
  small = table3_small.get_config('base')
  assert small.num_train_steps == table3_small.STEPS and small.warmup_steps < small.num_train_steps
  np.testing.assert_allclose(peak(small), 2.2e-3, rtol=0.02)
  np.testing.assert_allclose(peak(small), 0.5 * (128 * 400) ** -0.5, rtol=1e-6)
  # C5 (d_model 256) moves it by d_model^-0.5, as the paper's formula does.
  np.testing.assert_allclose(peak(table3_small.get_config('C5')), peak(small) / 2 ** 0.5,
                             rtol=1e-6)
  # The paper's P_drop in the small base row whatever the embedded default uses, so that row D
  # still varies it; the sizes are the embedded default's.
  assert small.dropout_rate == 0.1 and not small.pack_examples
  assert table3_small.get_config('D1').dropout_rate == 0.0
  assert table3_small.get_config('D2').dropout_rate == 0.2
  default = quickstart.get_config()
  assert (small.d_model, small.d_ff, small.num_layers) == (default.d_model, default.d_ff,
                                                             default.num_layers)


@pytest.mark.slow
@pytest.mark.parametrize('row', list(SMALL_ROWS))
def test_every_small_row_takes_a_training_step_on_the_mesh(row):
  config = table3_small.get_config(row)
  cfg = _cfg(config)
  mesh = parallel.make_mesh()
  state = parallel.create_train_state(cfg, optim.make_optimizer(config), seed=0, mesh=mesh)
  before = jax.device_get(state.params)
  state, metrics = _step(config, mesh)(
      state, parallel.shard_batch(_batch(16, 16, cfg.vocab_size), mesh))
  metrics = jax.device_get(metrics)
  # An untrained model's label-smoothed loss per token sits near ln(vocab).
  per_token = metrics['loss'] / metrics['weight']
  assert abs(per_token - np.log(cfg.vocab_size)) < 1.0, per_token
  assert metrics['nonfinite'] == 0 and int(state.step) == 1
  changed = jax.tree_util.tree_map(lambda a, b: bool(np.any(a != b)), before,
                                   jax.device_get(state.params))
  assert all(jax.tree_util.tree_leaves(changed))
