"""The miniature Table 3's statistics (benchmarks/studies/table3_report.py) against hand
computations."""

import json
import math

import pytest

from benchmarks.studies import table3_report


def _record(row, seed, ppl, bleu):
  return {'name': 'table3_small', 'row': row, 'seed': seed, 'params': 1_895_936,
          'overrides': {'num_heads': 1} if row == 'A1' else {}, 'dev_perplexity': ppl,
          'dev_bleu': bleu}


RECORDS = [_record('base', 0, 99.0, 0.0),  # replaced by the later record of (base, 0)
           _record('base', 0, 10.0, 5.0), _record('base', 1, 12.0, 7.0),
           _record('A1', 0, 14.0, 3.0), _record('A1', 1, 14.0, 3.0)]


def test_rows_means_ranges_and_pooled_noise():
  rows = table3_report.by_row(RECORDS)
  assert rows['base']['seeds'] == [0, 1]
  assert rows['base']['dev_perplexity'] == {'values': [10.0, 12.0], 'mean': 11.0, 'min': 10.0,
                                            'max': 12.0}
  # Sample variances 2 (base) and 0 (A1), pooled: sqrt(1).
  assert table3_report.seed_noise(rows, 'dev_bleu') == pytest.approx(1.0)
  d = table3_report.difference(rows, 'A1', 'base', 'dev_bleu')
  # Two seeds each: threshold 2 * 1 * sqrt(2 / 2) = 2 against a difference of 3 - 6.
  assert d == {'diff': -3.0, 'threshold': pytest.approx(2.0), 'beyond_noise': True}
  rows['A1']['dev_perplexity']['mean'] = 12.5
  assert not table3_report.difference(rows, 'A1', 'base', 'dev_perplexity')['beyond_noise']


def test_table_lines_and_findings_carry_the_papers_numbers(tmp_path):
  rows = table3_report.by_row(RECORDS)
  table = table3_report.markdown_table(rows).splitlines()
  assert table[2] == ('| base | (the small model) | 1.90M | 11.00 (10.00-12.00) '
                      '| 6.00 (5.00-7.00) | 4.92 | 25.8 | 65M |')
  assert table[3].startswith('| A1 | num_heads=1 |') and table[3].endswith('| 5.29 | 24.9 |  |')
  line = table3_report.compare(rows, 'A1', 'base')
  assert line == ('A1 - base: PPL +3.00 (beyond the noise 2.00; paper +0.37); '
                  'BLEU -3.00 (beyond the noise 2.00; paper -0.90)')
  path = tmp_path / 'records.jsonl'
  path.write_text('\n'.join(json.dumps(r) for r in RECORDS + [{'name': 'other'}]) + '\n')
  assert len(table3_report.load(str(path))) == len(RECORDS)
  figure = tmp_path / 'table3.png'
  table3_report.draw(rows, str(figure))
  assert figure.stat().st_size > 1000
  assert math.isclose(rows['A1']['dev_bleu']['mean'], 3.0)


def test_one_seed_per_row_reports_no_noise_yet(capsys, tmp_path):
  path = tmp_path / 'records.jsonl'
  path.write_text(''.join(json.dumps(r) + '\n' for r in RECORDS[1:2] + RECORDS[3:4]))
  rows = table3_report.by_row(table3_report.load(str(path)))
  assert table3_report.seed_noise(rows, 'dev_bleu') is None
  assert 'no seed noise yet' in table3_report.compare(rows, 'A1', 'base')
  table3_report.main(str(path))
  assert 'n/a (no row has two seeds yet)' in capsys.readouterr().out
