"""One self-contained HTML page per sentence to flip through attention kinds, layers and heads.

The page embeds its data (a JSON block) and its script; it loads nothing at view time, so it
opens from a local file or an archive with no network. Weights are stored quantised to
uint8 (round(255 w), base64): enough for a colour scale and a hover value to 0.004, and a
60-piece sentence of a base model stays under a megabyte. The exact float32 values are in the
sentence's `.npz`.
"""

import base64
import html
import json
from typing import Mapping, Sequence

import numpy as np

from t2t_jax.inspect.attention_maps import KINDS, TITLES
from t2t_jax.inspect.attention_plots import labels


def quantise(weights: np.ndarray) -> str:
  """`[...]` weights in [0, 1] -> base64 of uint8 round(255 w), C order (`dequantise` inverts)."""
  levels = np.rint(np.clip(np.asarray(weights, np.float64), 0.0, 1.0) * 255.0).astype(np.uint8)
  return base64.b64encode(levels.tobytes()).decode('ascii')


def dequantise(data: str, shape: Sequence[int]) -> np.ndarray:
  """The float32 weights (to within 1/510) that `quantise` encoded."""
  levels = np.frombuffer(base64.b64decode(data), np.uint8)
  return (levels.astype(np.float32) / 255.0).reshape(shape)


def page_data(maps: Mapping[str, np.ndarray], source_pieces: Sequence[str],
              target_pieces: Sequence[str]) -> dict:
  """What the page embeds: per kind its title, shape, labels and quantised weights."""
  kinds = {}
  for kind in KINDS:
    weights = np.asarray(maps[kind])
    rows, cols = labels(kind, source_pieces, target_pieces)
    weights = weights[:, :, :len(rows), :len(cols)]
    kinds[kind] = {'title': TITLES[kind], 'shape': list(weights.shape), 'rows': list(rows),
                   'cols': list(cols), 'data': quantise(weights)}
  return {'kinds': kinds, 'order': list(KINDS)}


def _json_for_script(value) -> str:
  """JSON safe inside a <script> element: no '<', '>' or '&' that could close it."""
  return (json.dumps(value, ensure_ascii=False).replace('<', '\\u003c')
          .replace('>', '\\u003e').replace('&', '\\u0026'))


_STYLE = """
body { font-family: sans-serif; margin: 1em; }
.controls { margin: 0.5em 0; }
.controls label { margin-right: 1em; }
table.map { border-collapse: collapse; font-size: 11px; }
table.map td.cell { width: 14px; height: 14px; padding: 0; }
table.map th { font-weight: normal; padding: 0 3px; white-space: nowrap; }
table.map th.col { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; }
table.map th.row { text-align: right; }
#hover { height: 1.4em; font-family: monospace; }
.source, .target { max-width: 60em; }
"""

_SCRIPT = """
const DATA = JSON.parse(document.getElementById('attention-data').textContent);
const maps = {};
for (const kind of DATA.order) {
  const bytes = atob(DATA.kinds[kind].data);
  const values = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) values[i] = bytes.charCodeAt(i);
  maps[kind] = values;
}
const kindSelect = document.getElementById('kind');
const layerSelect = document.getElementById('layer');
const headSelect = document.getElementById('head');
for (const kind of DATA.order) kindSelect.add(new Option(DATA.kinds[kind].title, kind));

function fill(select, count, first) {
  const keep = select.selectedIndex;
  select.length = 0;
  if (first) select.add(new Option(first, -1));
  for (let i = 0; i < count; i++) select.add(new Option(String(i + 1), i));
  select.selectedIndex = Math.min(Math.max(keep, 0), select.length - 1);
}

function weight(kind, layer, head, q, k) {
  const [L, H, Q, K] = DATA.kinds[kind].shape;
  const values = maps[kind];
  if (head >= 0) return values[((layer * H + head) * Q + q) * K + k] / 255;
  let sum = 0;
  for (let h = 0; h < H; h++) sum += values[((layer * H + h) * Q + q) * K + k];
  return sum / (255 * H);
}

function draw() {
  const kind = kindSelect.value;
  const info = DATA.kinds[kind];
  fill(layerSelect, info.shape[0], null);
  fill(headSelect, info.shape[1], 'mean of heads');
  const layer = Number(layerSelect.value), head = Number(headSelect.value);
  const table = document.getElementById('map');
  table.textContent = '';
  const header = table.insertRow();
  header.appendChild(document.createElement('th'));
  for (const piece of info.cols) {
    const th = document.createElement('th');
    th.className = 'col';
    th.textContent = piece;
    header.appendChild(th);
  }
  info.rows.forEach((rowPiece, q) => {
    const row = table.insertRow();
    const th = document.createElement('th');
    th.className = 'row';
    th.textContent = rowPiece;
    row.appendChild(th);
    info.cols.forEach((colPiece, k) => {
      const w = weight(kind, layer, head, q, k);
      const cell = row.insertCell();
      cell.className = 'cell';
      const shade = Math.round(255 * (1 - w));
      cell.style.background = `rgb(${shade}, ${shade}, 255)`;
      cell.onmouseenter = () => {
        document.getElementById('hover').textContent =
            `${rowPiece} \\u2192 ${colPiece}: ${w.toFixed(3)}`;
      };
    });
  });
  document.getElementById('caption').textContent =
      `${info.title}, layer ${layer + 1} of ${info.shape[0]}, ` +
      (head < 0 ? `mean of ${info.shape[1]} heads` : `head ${head + 1} of ${info.shape[1]}`) +
      ' (rows: queries, columns: keys)';
}

function step(select, delta) {
  select.selectedIndex = (select.selectedIndex + delta + select.length) % select.length;
  draw();
}

kindSelect.onchange = layerSelect.onchange = headSelect.onchange = draw;
document.addEventListener('keydown', (event) => {
  if (event.target.tagName === 'SELECT') return;
  const keys = {ArrowLeft: [headSelect, -1], ArrowRight: [headSelect, 1],
                ArrowUp: [layerSelect, -1], ArrowDown: [layerSelect, 1],
                k: [kindSelect, 1]};
  if (keys[event.key]) { step(...keys[event.key]); event.preventDefault(); }
});
draw();
"""


def render_page(title: str, source: str, target: str, maps: Mapping[str, np.ndarray],
                source_pieces: Sequence[str], target_pieces: Sequence[str]) -> str:
  """The HTML page of one sentence.

  Args:
    title: the page title (e.g. 'sentence 3').
    source, target: the sentence and its (decoded or given) translation, shown as text.
    maps: {kind: `[layers, heads, q_len, k_len]`} (`AttentionWeights.sentence`).
    source_pieces, target_pieces: the pieces labelling the axes.

  Returns:
    The page's text: data, style and script inline, no external reference.
  """
  data = _json_for_script(page_data(maps, source_pieces, target_pieces))
  return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p class="source"><b>source:</b> {html.escape(source)}</p>
<p class="target"><b>target:</b> {html.escape(target)}</p>
<div class="controls">
<label>attention <select id="kind"></select></label>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
<span>keys: &larr;/&rarr; head, &uarr;/&darr; layer, k kind</span>
</div>
<p id="caption"></p>
<div id="hover"></div>
<table id="map" class="map"></table>
<script type="application/json" id="attention-data">{data}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""
