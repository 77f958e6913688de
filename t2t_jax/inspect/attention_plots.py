"""Attention maps as matplotlib figures: a grid of per-head heatmaps, and the paper's line view.

Figures are built with the object-oriented API on an Agg canvas (no pyplot, no global
backend), so they render the same in a script, a training process or a notebook cell (a
notebook displays a returned `Figure` inline). `png_bytes` encodes one.

Weights are `[heads, q_len, k_len]` (one layer of one sentence, e.g. from
`AttentionWeights.sentence`); they are cropped to the given labels, so padded arrays can be
passed as they are. Labels are SentencePiece pieces; sizes grow with the number of pieces so
that a 60-piece sentence stays readable (7-point labels, 0.15 inch cells).
"""

import io
import math
from typing import Mapping, Optional, Sequence

import numpy as np

from t2t_jax.inspect.attention_maps import KINDS, TITLES

DPI = 100
_CELL = 0.15      # inches per piece in a heatmap
_ROW = 0.2        # inches per piece in the line view
_CHAR = 0.065     # inches per label character at 7 points
_READABLE = 60    # pieces per axis drawn at full label size; longer axes get smaller labels


def _font_size(n: int) -> float:
  return 7.0 if n <= _READABLE else max(3.0, 7.0 * _READABLE / n)


def _crop(weights, query_labels: Sequence[str], key_labels: Sequence[str]) -> np.ndarray:
  weights = np.asarray(weights, np.float32)
  if weights.ndim != 3:
    raise ValueError(f'expected weights [heads, q_len, k_len], got shape {weights.shape}')
  nq, nk = len(query_labels), len(key_labels)
  for name, n in (('query_labels', nq), ('key_labels', nk)):
    if not n:
      raise ValueError(f'{name} is empty; expected one label per position to show')
  if weights.shape[1] < nq or weights.shape[2] < nk:
    raise ValueError(f'{nq} query and {nk} key labels for weights of shape {weights.shape}')
  return weights[:, :nq, :nk]


def _figure(width: float, height: float):
  # An explicit Agg canvas, not pyplot: see the module docstring.
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  fig = Figure(figsize=(width, height), dpi=DPI, layout='constrained')
  FigureCanvasAgg(fig)
  return fig


def _head_colour(head: int, heads: int):
  from matplotlib import colormaps
  return colormaps['tab10' if heads <= 10 else 'tab20'](head % 20)


def attention_heatmaps(weights, query_labels: Sequence[str], key_labels: Sequence[str],
                       title: str = '', columns: int = 4):
  """One heatmap per head (rows: queries, columns: keys; colour 0..1), in a grid.

  Args:
    weights: `[heads, q_len, k_len]`, cropped to the labels.
    query_labels, key_labels: the pieces of the query and key positions.
    title: the figure's title.
    columns: heads per grid row.

  Returns:
    A matplotlib `Figure`; y labels on the first column, x labels under each column.
  """
  weights = _crop(weights, query_labels, key_labels)
  heads, nq, nk = weights.shape
  cols = min(heads, columns)
  rows = math.ceil(heads / cols)
  size = _font_size(max(nq, nk))
  scale = size / 7.0
  panel_w, panel_h = max(1.6, nk * _CELL * scale), max(1.6, nq * _CELL * scale)
  y_margin = max(map(len, query_labels), default=1) * _CHAR * scale + 0.4
  x_margin = max(map(len, key_labels), default=1) * _CHAR * scale + 0.4
  fig = _figure(cols * (panel_w + 0.25) + y_margin + 1.5,
                rows * (panel_h + 0.35) + x_margin + 0.6)
  axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
  image = None
  for h, ax in enumerate(axes):
    if h >= heads:
      ax.set_visible(False)
      continue
    image = ax.imshow(weights[h], vmin=0.0, vmax=1.0, cmap='Blues', interpolation='nearest',
                      aspect='equal')
    ax.set_title(f'head {h + 1}', fontsize=8)
    ax.set_xticks(range(nk))
    ax.set_yticks(range(nq))
    below = h + cols < heads  # another panel under this one carries the x labels
    ax.set_xticklabels([] if below else key_labels, rotation=90, fontsize=size)
    ax.set_yticklabels(query_labels if h % cols == 0 else [], fontsize=size)
    ax.tick_params(length=0)
  fig.colorbar(image, ax=axes[:heads].tolist(), shrink=0.7,
               label='attention weight')
  if title:
    fig.suptitle(title)
  return fig


def attention_lines(weights, query_labels: Sequence[str], key_labels: Sequence[str],
                    title: str = '', min_weight: float = 0.1,
                    heads: Optional[Sequence[int]] = None):
  """The line view of the paper's Figures 3-5: queries on the left, keys on the right, a line
  from query i to key j for every head whose weight is at least `min_weight`, one colour per
  head, opacity and width growing with the weight.

  Args:
    weights: `[heads, q_len, k_len]`, cropped to the labels.
    query_labels, key_labels: the pieces of the query and key positions.
    title: the figure's title.
    min_weight: lighter connections are left out.
    heads: 0-based heads to draw (default: all).

  Returns:
    A matplotlib `Figure`.
  """
  from matplotlib.collections import LineCollection
  from matplotlib.lines import Line2D
  weights = _crop(weights, query_labels, key_labels)
  num_heads, nq, nk = weights.shape
  chosen = range(num_heads) if heads is None else heads
  size = _font_size(max(nq, nk)) + 1.0
  label_w = max(map(len, [*query_labels, *key_labels]), default=1) * _CHAR * size / 7.0
  legend_rows = math.ceil(len(chosen) / 4)
  fig = _figure(max(5.5, 2 * label_w + 3.5), max(3.0, max(nq, nk) * _ROW + 1.2 + 0.2 * legend_rows))
  ax = fig.subplots()
  for i, piece in enumerate(query_labels):
    ax.text(0.0, -i, piece, ha='right', va='center', fontsize=size)
  for j, piece in enumerate(key_labels):
    ax.text(1.0, -j, piece, ha='left', va='center', fontsize=size)
  qi, kj = np.meshgrid(np.arange(nq), np.arange(nk), indexing='ij')
  legend = []
  for h in chosen:
    w = weights[h]
    keep = w >= min_weight
    segments = np.stack([np.stack([np.full(keep.sum(), 0.03), -qi[keep]], -1),
                         np.stack([np.full(keep.sum(), 0.97), -kj[keep]], -1)], 1)
    colours = np.tile(np.asarray(_head_colour(h, num_heads)), (len(segments), 1))
    colours[:, 3] = 0.05 + 0.95 * w[keep]
    ax.add_collection(LineCollection(segments, colors=colours, linewidths=0.5 + 2.0 * w[keep]))
    legend.append(Line2D([], [], color=_head_colour(h, num_heads), label=f'head {h + 1}'))
  ax.set_xlim(-0.05, 1.05)
  ax.set_ylim(-max(nq, nk) + 0.5, 0.5)
  ax.axis('off')
  ax.legend(handles=legend, loc='lower center', bbox_to_anchor=(0.5, 1.0), fontsize=7,
            ncol=min(len(legend), 4), frameon=False)
  if title:
    fig.suptitle(title)
  return fig


def labels(kind: str, source_pieces: Sequence[str], target_pieces: Sequence[str]):
  """(query labels, key labels) of an attention kind: the encoder's are source pieces, the
  decoder's the target pieces each position outputs (see `attention_maps`)."""
  return {'encoder': (source_pieces, source_pieces),
          'decoder': (target_pieces, target_pieces),
          'encoder_decoder': (target_pieces, source_pieces)}[kind]


def attention_figure(maps: Mapping[str, np.ndarray], kind: str, layer: int,
                     source_pieces: Sequence[str], target_pieces: Sequence[str],
                     view: str = 'heatmaps', **kwargs):
  """One layer of one kind of attention of a sentence, labelled and titled.

  Args:
    maps: {kind: `[layers, heads, q_len, k_len]`}, e.g. `AttentionWeights.sentence(...)`.
    kind: one of `KINDS` ('encoder', 'decoder', 'encoder_decoder').
    layer: 0-based layer index (the title counts from 1, as the paper does).
    source_pieces, target_pieces: the sentence's pieces (EOS included).
    view: 'heatmaps' (`attention_heatmaps`) or 'lines' (`attention_lines`).
    **kwargs: passed to the view's function.

  Returns:
    A matplotlib `Figure`.
  """
  if kind not in KINDS:
    raise ValueError(f'unknown attention kind {kind!r}; expected one of {", ".join(KINDS)}')
  layers = len(maps[kind])
  if not 0 <= layer < layers:
    raise ValueError(f'layer {layer} out of range: the model has {layers} layers (0-based)')
  draw = {'heatmaps': attention_heatmaps, 'lines': attention_lines}.get(view)
  if draw is None:
    raise ValueError(f"unknown view {view!r}; expected 'heatmaps' or 'lines'")
  title = f'{TITLES[kind]}, layer {layer + 1} of {layers}'
  return draw(maps[kind][layer], *labels(kind, source_pieces, target_pieces), title=title,
              **kwargs)


def png_bytes(fig) -> bytes:
  """The figure as PNG bytes at `DPI`."""
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png', dpi=DPI)
  return buffer.getvalue()
