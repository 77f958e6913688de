"""The tests' compilation cache stays bounded without JAX's per-entry eviction (conftest)."""

import os

import conftest


def test_the_oldest_entries_go_once_the_cache_is_past_its_bound(tmp_path):
  for i in range(6):
    path = tmp_path / f'entry{i}'
    path.write_bytes(b'x' * 100)
    os.utime(path, (1000 + i, 1000 + i))  # entry0 is the oldest
  assert conftest._prune_xla_cache(str(tmp_path), (600, 300)) == 0  # at the bound: kept
  assert conftest._prune_xla_cache(str(tmp_path), (500, 300)) == 300
  assert sorted(p.name for p in tmp_path.iterdir()) == ['entry3', 'entry4', 'entry5']
  assert conftest._prune_xla_cache(str(tmp_path / 'missing'), (1, 0)) == 0
