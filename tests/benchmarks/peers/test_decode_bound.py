"""benchmarks/peers/decode_bound.py: the decoder step's products against a count by hand, the
in-loop timing, the row-steps read from stopping.py's records, and serve.py's thread splits."""

import json

import pytest

from benchmarks.peers import decode_bound, serve


def test_the_step_products_are_the_decoder_steps_flops_by_hand():
  gemms = decode_bound.step_gemms(d_model=128, d_ff=512, vocab=4000, layers=3)
  # Per hypothesis and step, quickstart: per layer the self-attention's Q, K, V, O and the
  # cross-attention's Q, O (128 x 128 each), the FFN (128 x 512, 512 x 128); then 128 x 4000.
  per_hypothesis = sum(2 * k * n * count for _, k, n, count in gemms)
  assert per_hypothesis == 2 * (3 * (6 * 128 * 128 + 2 * 128 * 512) + 128 * 4000) == 2_400_256
  assert [count for *_, count in gemms] == [18, 3, 3, 1]


def test_in_loop_seconds_times_one_product():
  seconds = decode_bound.in_loop_seconds(4, 8, 8, rounds=1, flops=1e5)
  assert 0 < seconds < 0.01


def test_row_steps_come_from_the_newest_record_of_the_run(tmp_path):
  path = tmp_path / 'stopping.jsonl'
  rule = lambda rows, floor: {'best_only': {  # noqa: E731
      'row_steps_per_sentence': {'4': rows, '64': 2 * rows}, 'steps_per_sentence': floor}}
  path.write_text('\n'.join(json.dumps(r) for r in [
      {'name': 'stopping', 'workdir': str(tmp_path / 'run'), 'rules': rule(60.0, 50.0)},
      {'name': 'other', 'workdir': str(tmp_path / 'run')},
      {'name': 'stopping', 'workdir': str(tmp_path / 'elsewhere'), 'rules': rule(1.0, 1.0)},
      {'name': 'stopping', 'workdir': str(tmp_path / 'run'), 'rules': rule(59.0, 51.0)}]))
  assert decode_bound.row_steps(str(path), str(tmp_path / 'run'), 4) == (59.0, 51.0)
  assert decode_bound.row_steps(str(path), str(tmp_path / 'run'), 64) == (118.0, 51.0)
  with pytest.raises(SystemExit, match='no stopping record of .*missing; run '
                     'benchmarks.peers.stopping on it first'):
    decode_bound.row_steps(str(path), str(tmp_path / 'missing'), 4)


def test_serve_reads_ctranslate2_thread_splits():
  assert serve._splits('1x2,2x1') == [(1, 2), (2, 1)]  # pylint: disable=protected-access
  for bad in ('2', '1x0', 'ax1', '1x2,', ''):
    with pytest.raises(SystemExit, match=f"--ct2-splits '{bad}': expected IxJ"):
      serve._splits(bad)  # pylint: disable=protected-access
