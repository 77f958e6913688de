"""The self-contained attention page: embedded data, escaping, and its script (under node)."""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from t2t_jax.inspect import attention_html

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'js', 'attention_page.js')
SOURCE = ['▁a', '▁b', '</script><b>', '</s>']  # a piece that would end a naive <script>
TARGET = ['▁x', '</s>']


def _maps():
  """Layers 2, heads 2; head h of layer l puts weight 0.75 on key (q + l + h) % k."""
  maps = {}
  for kind, (q, k) in {'encoder': (4, 4), 'decoder': (2, 2), 'encoder_decoder': (2, 4)}.items():
    w = np.full((2, 2, q, k), 0.25 / (k - 1), np.float32)
    for layer in range(2):
      for head in range(2):
        for row in range(q):
          w[layer, head, row, (row + layer + head) % k] = 0.75
    maps[kind] = w
  return maps


def test_quantised_weights_round_trip_within_half_a_level():
  w = np.random.default_rng(0).random((2, 3, 5, 7)).astype(np.float32)
  back = attention_html.dequantise(attention_html.quantise(w), w.shape)
  assert back.dtype == np.float32 and back.shape == w.shape
  assert np.abs(back - w).max() <= 1 / 510 + 1e-7


def test_page_embeds_escaped_data_and_loads_nothing():
  page = attention_html.render_page('sentence 1 <x>', 'a b & c', 'x', _maps(), SOURCE, TARGET)
  assert page.count('</script>') == 2  # the JSON block's and the script's own
  assert '<title>sentence 1 &lt;x&gt;</title>' in page and 'a b &amp; c' in page
  assert not re.search(r'https?://|\ssrc=|<link|@import', page)
  data = json.loads(re.search(r'id="attention-data">(.*?)</script>', page, re.S).group(1))
  assert data['order'] == ['encoder', 'decoder', 'encoder_decoder']
  assert data['kinds']['encoder']['rows'] == SOURCE
  assert data['kinds']['encoder_decoder']['rows'] == TARGET
  cross = data['kinds']['encoder_decoder']
  np.testing.assert_allclose(attention_html.dequantise(cross['data'], cross['shape']),
                             _maps()['encoder_decoder'], atol=1 / 510)


@pytest.mark.skipif(shutil.which('node') is None, reason='needs node to run the page script')
def test_page_script_flips_through_kinds_layers_and_heads(tmp_path):
  page = tmp_path / 'page.html'
  page.write_text(attention_html.render_page('s', 'a b', 'x', _maps(), SOURCE, TARGET),
                  encoding='utf-8')
  result = subprocess.run(['node', SCRIPT, str(page)], capture_output=True, text=True,
                          timeout=60)
  assert result.returncode == 0, result.stderr
  views = json.loads(result.stdout)
  assert [v['caption'].split(' (')[0] for v in views] == [
      'encoder self-attention, layer 1 of 2, mean of 2 heads',
      'encoder self-attention, layer 1 of 2, head 1 of 2',   # right: next head
      'encoder self-attention, layer 2 of 2, head 1 of 2',   # down: next layer
      'decoder self-attention, layer 2 of 2, head 1 of 2',   # k: next kind
      'encoder-decoder attention, layer 2 of 2, head 1 of 2']
  assert views[0]['columns'] == views[0]['rows'] == SOURCE
  assert views[4]['rows'] == TARGET and views[4]['columns'] == SOURCE
  # Query 0 -> key 0: heads 0 and 1 of layer 0 give 0.75 and 0.25/3; layer 1 head 0: 0.25/3.
  q = lambda w: round(w * 255) / 255  # noqa: E731 - the page shows quantised weights
  assert views[0]['hover'] == f'▁a → ▁a: {(q(0.75) + q(0.25 / 3)) / 2:.3f}'
  assert views[1]['hover'] == f'▁a → ▁a: {q(0.75):.3f}'
  assert views[2]['hover'] == f'▁a → ▁a: {q(0.25 / 3):.3f}'
  assert views[1]['shade'] == f'rgb({round(255 * (1 - q(0.75)))}, ' \
      f'{round(255 * (1 - q(0.75)))}, 255)'
