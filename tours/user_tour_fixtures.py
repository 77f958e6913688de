"""What the user's tour makes before its tries, and the files its tries write: a small local
corpus cut from the bundled one, the input files (LF, CRLF, BOM, empty lines, non-UTF-8, target
prefixes), and the model and optimizer factory files the workdir tries train with, then edit or
delete.
"""

import os

from tours.user_tour_kit import MAIN, sh, write

# --------------------------------------------------------------------------- setup

VERSES_EN = [
    'In the beginning God created the heaven and the earth.',
    'And God said, Let there be light: and there was light.',
    'And God saw the light, that it was good.',
    'And the evening and the morning were the first day.',
    'And God called the firmament Heaven.',
]
VERSES_ES = [
    'EN el principio crió Dios los cielos y la tierra.',
    'Y dijo Dios: Sea la luz: y fué la luz.',
    'Y vió Dios que la luz era buena.',
    'Y fué la tarde y la mañana un día.',
    'Y llamó Dios á la expansión Cielos.',
]


def make_corpus(tour):
  data = os.path.join(MAIN, 't2t_jax', 'data', 'bible_en_es')
  spec = {'corpus': (0, 1500, 40, 40), 'corpus_ft': (1500, 1500, 40, 40),
          'corpus_c': (0, 1500, 40, 40), 'corpus_fe': (0, 1500, 40, 400)}
  for name, (skip, ntrain, ndev, ntest) in spec.items():
    d = tour.p(name)
    os.makedirs(d, exist_ok=True)
    for split, n, off in (('train', ntrain, skip), ('dev', ndev, 0), ('test', ntest, 0)):
      for lang in ('en', 'es'):
        sh(f'gzip -dc {data}/{split}.{lang}.gz | tail -n +{off + 1} | head -n {n} > {d}/{split}.{lang}')


def make_inputs(tour):
  s = tour.p
  write(s('in', 'lf.txt'), ''.join(v + '\n' for v in VERSES_EN))
  write(s('in', 'two.txt'), ''.join(v + '\n' for v in VERSES_EN[:2]))
  write(s('in', 'crlf.txt'), ''.join(v + '\r\n' for v in VERSES_EN))
  write(s('in', 'bom.txt'), '\ufeff' + ''.join(v + '\n' for v in VERSES_EN))
  write(s('in', 'noeol.txt'), '\n'.join(VERSES_EN))
  write(s('in', 'empty_lines.txt'), VERSES_EN[0] + '\n\n' + VERSES_EN[1] + '\n\n')
  write(s('in', 'empty.txt'), '')
  write(s('in', 'bad_utf8.txt'), (VERSES_EN[0] + '\n').encode() + b'And God \xff\xfe said\n' +
        (VERSES_EN[2] + '\n').encode(), mode='wb')
  write(s('in', 'tgt_lf.txt'), ''.join(v + '\n' for v in VERSES_ES))
  write(s('in', 'tgt_crlf.txt'), ''.join(v + '\r\n' for v in VERSES_ES))
  write(s('in', 'tgt_bom.txt'), '\ufeff' + ''.join(v + '\n' for v in VERSES_ES))
  write(s('in', 'tgt_empty_hyp.txt'), ''.join((v if i != 2 else '') + '\n'
                                              for i, v in enumerate(VERSES_ES)))
  write(s('in', 'tgt_short.txt'), ''.join(v + '\n' for v in VERSES_ES[:3]))
  write(s('in', 'tgt_bad_utf8.txt'), (VERSES_ES[0] + '\n').encode() + b'Y dijo \xe9\xff Dios\n' +
        ''.join(v + '\n' for v in VERSES_ES[2:]).encode(), mode='wb')
  prefixes = ['Y', 'Y dijo', '', 'Y fué', 'Y llamó']
  write(s('in', 'prefix_lf.txt'), ''.join(p + '\n' for p in prefixes))
  write(s('in', 'prefix_crlf.txt'), ''.join(p + '\r\n' for p in prefixes))
  write(s('in', 'prefix_short.txt'), ''.join(p + '\n' for p in prefixes[:3]))
  write(s('in', 'prefix_long.txt'), ''.join(p + '\n' for p in prefixes + ['Y', 'Y']))
  write(s('in', 'prefix_bad_utf8.txt'), b'Y\nY \xff\n\nY\nY\n', mode='wb')
  many = []
  for i in range(3000):
    many.append(VERSES_EN[i % 5] + f' {i}')
  write(s('in', 'many.txt'), ''.join(v + '\n' for v in many))


FACTORY = '''import t2t_jax
import flax.linen as nn
import functools


class SwiGLU(nn.Module):
  cfg: t2t_jax.TransformerConfig

  @nn.compact
  def __call__(self, x):
    dense = functools.partial(nn.Dense, use_bias=False, dtype=self.cfg.dtype)
    gate, up = dense(self.cfg.d_ff, name='gate')(x), dense(self.cfg.d_ff, name='up')(x)
    return dense(self.cfg.d_model, name='down')(nn.silu(gate) * up)


def swiglu(cfg):
  return t2t_jax.Transformer(cfg, feed_forward=SwiGLU)
'''

FACTORY_EDITED = '''import t2t_jax


def swiglu(cfg):
  # edited: now the paper's feed-forward
  return t2t_jax.Transformer(cfg)
'''

FACTORY_SAME_SHAPES = FACTORY.replace('nn.silu(gate)', 'nn.relu(gate)')

OPTIMIZER = '''import optax


def lion(config, schedule):
  return optax.chain(optax.clip_by_global_norm(1.0), optax.lion(schedule, b1=0.9, b2=0.99))
'''
