"""One row of Table 3 (model variations on EN-DE, on top of the base model).

Select a row with `--config=configs/table3.py:B1`. The rows are the paper's: A1-A4 (heads),
B1-B2 (key size), C1-C7 (size), D1-D4 (dropout, label smoothing), E (learned positions),
plus 'base' and 'big'. `PAPER_PARAMS` holds Table 3's parameter counts (millions) and
`PAPER_DEV` its dev perplexity (per wordpiece) and dev BLEU on newstest2013. Every row is
batched as `wmt_base` (packed training rows, two dev/decode buckets (64, 256)).
"""

from t2t_jax.configs import wmt_base, wmt_big

ROWS = {
    'base': {},
    'A1': dict(num_heads=1, d_k=512, d_v=512),
    'A2': dict(num_heads=4, d_k=128, d_v=128),
    'A3': dict(num_heads=16, d_k=32, d_v=32),
    'A4': dict(num_heads=32, d_k=16, d_v=16),
    'B1': dict(d_k=16),
    'B2': dict(d_k=32),
    'C1': dict(num_layers=2),
    'C2': dict(num_layers=4),
    'C3': dict(num_layers=8),
    'C4': dict(d_model=256, d_k=32, d_v=32),
    'C5': dict(d_model=1024, d_k=128, d_v=128),
    'C6': dict(d_ff=1024),
    'C7': dict(d_ff=4096),
    'D1': dict(dropout_rate=0.0),
    'D2': dict(dropout_rate=0.2),
    'D3': dict(label_smoothing=0.0),
    'D4': dict(label_smoothing=0.2),
    'E': dict(positional='learned'),
}
PAPER_PARAMS = {'base': 65, 'B1': 58, 'B2': 60, 'C1': 36, 'C2': 50, 'C3': 80, 'C4': 28,
                'C5': 168, 'C6': 53, 'C7': 90, 'big': 213}
PAPER_DEV = {  # row: (PPL, BLEU), newstest2013, beam search, no checkpoint averaging
    'base': (4.92, 25.8), 'A1': (5.29, 24.9), 'A2': (5.00, 25.5), 'A3': (4.91, 25.8),
    'A4': (5.01, 25.4), 'B1': (5.16, 25.1), 'B2': (5.01, 25.4), 'C1': (6.11, 23.7),
    'C2': (5.19, 25.3), 'C3': (4.88, 25.5), 'C4': (5.75, 24.5), 'C5': (4.66, 26.0),
    'C6': (5.12, 25.4), 'C7': (4.75, 26.2), 'D1': (5.77, 24.6), 'D2': (4.95, 25.5),
    'D3': (4.67, 25.3), 'D4': (5.47, 25.7), 'E': (4.92, 25.7), 'big': (4.33, 26.4)}


def get_config(row: str = 'base'):
  if row == 'big':
    return wmt_big.get_config()
  if row not in ROWS:
    valid = list(ROWS) + ['big']
    same = [r for r in valid if r.lower() == row.lower()]
    hint = f' (rows are case-sensitive: did you mean {same[0]!r}?)' if same else ''
    raise ValueError(f'unknown Table 3 row {row!r}{hint}; valid rows: {", ".join(valid)}')
  c = wmt_base.get_config()
  if row in ('B1', 'B2'):
    c.d_v = 64  # row B changes d_k only; d_v stays the base model's 64
  for key, value in ROWS[row].items():
    c[key] = value
  return c
