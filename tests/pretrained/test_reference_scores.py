"""The imported families (NLLB: M2M100 under its own tokenizer) score as transformers' own model: the teacher-forced log
p(target | source) of each sentence to 1e-4, with the same token counts."""

import numpy as np
import pytest

from benchmarks.shared import transformers_models as hf_models

pytest.importorskip('torch')
pytest.importorskip('transformers')


@pytest.mark.parametrize('family', ['marian', 'm2m', 'nllb'])
def test_log_probabilities_equal_transformers_to_1e_4(family, request):
  _, workdir, model, tok = request.getfixturevalue(family)
  inference, config, ours = hf_models.imported(workdir)
  mine, counts = hf_models.our_log_probs(ours, config, inference.params, hf_models.SOURCES,
                                         hf_models.TARGETS)
  theirs, their_counts = hf_models.log_probs(model, tok, hf_models.SOURCES, hf_models.TARGETS)
  assert counts == their_counts
  np.testing.assert_allclose(mine, theirs, atol=1e-4, rtol=0)
  assert np.ptp(theirs) > 10  # sentences of other lengths and probabilities
