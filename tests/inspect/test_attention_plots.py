"""Attention figures: head grids and the line view, labelled, sized for 60 pieces, cropped."""

import numpy as np
import pytest

from t2t_jax.inspect import attention_plots


def _weights(heads, q, k, seed=0):
  w = np.random.default_rng(seed).random((heads, q, k)) ** 4
  return (w / w.sum(-1, keepdims=True)).astype(np.float32)


def test_heatmaps_label_every_piece_and_grow_with_the_sentence():
  pieces = [f'▁p{i}' for i in range(60)]
  fig = attention_plots.attention_heatmaps(_weights(8, 64, 64), pieces, pieces, title='t')
  axes = [ax for ax in fig.axes if ax.get_label() != '<colorbar>']
  assert len(axes) == 8 and [ax.get_title() for ax in axes] == [f'head {h}' for h in
                                                                 range(1, 9)]
  assert axes[0].images[0].get_array().shape == (60, 60)  # padding rows/columns cropped
  # y labels on the first column, x labels under each column, at the readable size.
  assert [t.get_text() for t in axes[4].get_yticklabels()] == pieces
  assert [t.get_text() for t in axes[5].get_yticklabels()] == [''] * 60
  assert [t.get_text() for t in axes[6].get_xticklabels()] == pieces
  assert [t.get_text() for t in axes[2].get_xticklabels()] == [''] * 60  # head 7 is below
  assert axes[4].get_yticklabels()[0].get_fontsize() == 7.0
  width, height = fig.get_size_inches()
  assert width >= 4 * 60 * 0.15 and height >= 2 * 60 * 0.15  # 0.15 inch a piece
  small = attention_plots.attention_heatmaps(_weights(8, 5, 5), pieces[:5], pieces[:5])
  assert small.get_size_inches()[0] < width / 3
  png = attention_plots.png_bytes(small)
  assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000


def test_line_view_draws_the_weights_above_the_threshold_one_colour_per_head():
  w = _weights(3, 6, 7)
  q, k = list('abcdef'), list('ABCDEFG')
  fig = attention_plots.attention_lines(w, q, k, min_weight=0.2)
  ax = fig.axes[0]
  collections = ax.collections
  assert [len(c.get_segments()) for c in collections] == [int((w[h] >= 0.2).sum())
                                                          for h in range(3)]
  colours = {tuple(np.round(c.get_colors()[0][:3], 3)) for c in collections}
  assert len(colours) == 3
  texts = [t.get_text() for t in ax.texts]
  assert texts == q + k
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ['head 1', 'head 2', 'head 3']
  one = attention_plots.attention_lines(w, q, k, min_weight=0.2, heads=[1])
  assert len(one.axes[0].collections) == 1


def test_attention_figure_picks_labels_by_kind_and_names_bad_arguments():
  maps = {'encoder': np.stack([_weights(2, 4, 4)] * 3),
          'encoder_decoder': np.stack([_weights(2, 3, 4)] * 3)}
  src, tgt = ['a', 'b', 'c', '</s>'], ['x', 'y', '</s>']
  fig = attention_plots.attention_figure(maps, 'encoder_decoder', 1, src, tgt)
  assert fig.get_suptitle() == 'encoder-decoder attention, layer 2 of 3'
  ax = fig.axes[0]
  assert [t.get_text() for t in ax.get_yticklabels()] == tgt
  assert [t.get_text() for t in ax.get_xticklabels()] == src
  with pytest.raises(ValueError, match=r"unknown attention kind 'cross'"):
    attention_plots.attention_figure(maps, 'cross', 0, src, tgt)
  with pytest.raises(ValueError, match=r'layer 3 out of range: the model has 3 layers'):
    attention_plots.attention_figure(maps, 'encoder', 3, src, tgt)
  with pytest.raises(ValueError, match=r"unknown view 'bars'"):
    attention_plots.attention_figure(maps, 'encoder', 0, src, tgt, view='bars')
  with pytest.raises(ValueError, match=r'5 query and 4 key labels for weights of shape'):
    attention_plots.attention_heatmaps(maps['encoder'][0], src + ['z'], src)
