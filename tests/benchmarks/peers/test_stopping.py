"""benchmarks/peers/stopping.py: rows x steps of batched decoding against a count by hand, and
the CTranslate2 rule patched in only for its block."""

from benchmarks.peers import stopping

from t2t_jax.model import search


def test_rows_times_steps_follow_the_longest_sentence_of_each_batch():
  lengths = [5, 1, 3, 2, 4]             # sorted by source length: sentences 1, 3, 2, 4, 0
  steps = [10, 4, 7, 6, 9]
  # batches of 2: (1, 3) runs 6 steps, (2, 4) 9, (0) 10 -> 2 * (6 + 9 + 10) / 5 sentences
  assert stopping.row_steps(lengths, steps, 2) == 2 * (6 + 9 + 10) / 5
  assert stopping.row_steps(lengths, steps, 1) == sum(steps) / 5   # alone: its own steps
  assert stopping.row_steps(lengths, steps, 5) == 10.0


def test_the_ctranslate2_rule_is_patched_in_only_for_its_block():
  original = search._finished_sentences  # pylint: disable=protected-access
  with stopping._rule('k_finished') as best_only:  # pylint: disable=protected-access
    assert not best_only and search._finished_sentences is not original
  assert search._finished_sentences is original
  with stopping._rule('best_only') as best_only:  # pylint: disable=protected-access
    assert best_only and search._finished_sentences is original
