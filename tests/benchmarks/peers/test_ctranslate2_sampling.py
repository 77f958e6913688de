"""benchmarks/peers/ctranslate2_sampling.py's speed part: CTranslate2 is timed on the very
batches ours decodes (`portable.batches`' sentences, in its order), and a batch of rows that
the samples per sentence do not divide is refused when parsed, before anything loads."""

import pytest

from benchmarks.peers import ctranslate2_sampling
from t2t_jax.inference import portable


@pytest.mark.parametrize('rows', [1, 3, 4, 64])
def test_ctranslate2_batches_are_ours(rows):
  lengths = [5, 2, 9, 2, 7, 5, 1, 30, 2, 5]
  encoded = {i: [7] * (n - 1) + [portable.EOS_ID] for i, n in enumerate(lengths)}
  ours = [b.indices for b in portable.batches(encoded, rows=rows, buckets=(8, 16, 32),
                                              max_len=64, max_decode_extra=50)]
  assert ctranslate2_sampling.ct2_chunks(lengths, rows) == ours


def test_rows_that_samples_do_not_divide_are_refused(tmp_path, capsys):
  with pytest.raises(SystemExit):
    ctranslate2_sampling.main(['--workdir', str(tmp_path), '--scratch', str(tmp_path),
                               '--speed-rows', '8,6', '--speed-samples', '4'])
  assert 'each must be a multiple of --speed-samples 4' in capsys.readouterr().err
