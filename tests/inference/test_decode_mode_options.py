"""--mode=decode's new outputs through main.py: the n-best list with scores (rank 1 is the
plain decode's line), samples by seed, prefixes, n-gram blocking, refusals."""

import os

import pytest
from conftest import run_main


def _short_lines(corpus, count=3):
  with open(os.path.join(corpus, 'dev.en'), encoding='utf-8') as f:
    return [line for line in f.read().splitlines() if len(line.split()) < 14][:count]


def _decode(workdir, source, output, *options):
  result = run_main('--mode=decode', f'--workdir={workdir}', f'--input={source}',
                    f'--output={output}', *options)
  assert result.returncode == 0, result.stderr[-3000:]
  return output.read_text(encoding='utf-8').splitlines()


def test_the_n_best_list_with_scores_ranks_the_plain_decode_first(tiny_workdir, corpus,
                                                                  tmp_path):
  source = tmp_path / 'in.txt'
  source.write_text('\n'.join(_short_lines(corpus)) + '\n', encoding='utf-8')
  plain = _decode(tiny_workdir, source, tmp_path / 'plain.txt')
  rows = [line.split('\t') for line in _decode(tiny_workdir, source, tmp_path / 'nbest.txt',
                                               '--config.nbest=3')]
  assert [(r[0], r[1]) for r in rows] == [(str(i), str(k)) for i in range(3) for k in (1, 2, 3)]
  assert [r[4] for r in rows if r[1] == '1'] == plain
  for i in range(3):
    scores = [float(r[2]) for r in rows if r[0] == str(i)]
    assert scores == sorted(scores, reverse=True)
  # (--mode=score of these lines re-tokenizes them: a 10-step model's pieces are not the
  # canonical segmentation, so the ids-level check is tests/inference/test_score.py's.)


@pytest.mark.slow
def test_samples_prefixes_and_blocking_through_main(tiny_workdir, corpus, tmp_path):
  source = tmp_path / 'in.txt'
  source.write_text('\n'.join(_short_lines(corpus)) + '\n', encoding='utf-8')
  sample = ['--config.decode_strategy=sample', '--config.nbest=2', '--config.top_k=20']
  first = _decode(tiny_workdir, source, tmp_path / 's1.txt', *sample)
  again = _decode(tiny_workdir, source, tmp_path / 's2.txt', *sample)
  other = _decode(tiny_workdir, source, tmp_path / 's3.txt', *sample, '--config.sample_seed=5')
  assert first == again != other and len(first) == 6
  prefixes = tmp_path / 'prefixes.txt'
  prefixes.write_text('Y\n\nHabló\n', encoding='utf-8')
  started = _decode(tiny_workdir, source, tmp_path / 'p.txt',
                    f'--config.target_prefix_file={prefixes}')
  assert started[0].startswith('Y') and started[2].startswith('Habló')
  blocked = _decode(tiny_workdir, source, tmp_path / 'b.txt', '--config.no_repeat_ngram_size=1')
  assert all(len(set(line.split())) == len(line.split()) for line in blocked)
  bad = run_main('--mode=decode', f'--workdir={tiny_workdir}', f'--input={source}',
                 '--config.nbest=5')
  assert bad.returncode == 1 and bad.stderr.splitlines()[-1] == (
      "error: config key 'nbest': expected at most beam_size=4 with beam search (a longer list "
      'needs a wider beam), got 5')
