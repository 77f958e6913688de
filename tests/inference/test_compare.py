"""The paired comparison (inference/compare.py): sacreBLEU's paired bootstrap on two systems,
from files or eval JSONs, with one-line errors."""

import json

import pytest

from t2t_jax.inference import compare

REFS = [f'the {w} sat on the mat number {i}' for i, w in enumerate(['cat', 'dog', 'bird'] * 20)]
WORSE = [r.replace('the ', 'a ', 1) for r in REFS]


def test_a_clearly_better_system_is_significant_and_a_copy_is_not():
  better = compare.paired_bootstrap(WORSE, REFS, REFS, samples=200)
  assert better['bleu']['system']['score'] == 100.0
  assert better['bleu']['system']['p_value'] == pytest.approx(1 / 201, abs=1e-6)  # sacreBLEU's floor
  assert better["chrf"]["system"]["p_value"] == pytest.approx(1 / 201, abs=1e-6)
  assert better['signatures']['BLEU'].startswith('nrefs:1|bs:200|seed:12345')
  same = compare.paired_bootstrap(WORSE, WORSE, REFS, samples=200)
  assert same['bleu']['baseline']['score'] == same['bleu']['system']['score']
  # sacreBLEU counts only resamples strictly above the real difference (multeval's rule, "a
  # zero difference should not be attributed to chance"), so a system against itself gets
  # the floor too: the verdict says 'no difference' instead.
  assert 'no difference' in compare.describe(same).splitlines()[0]


def _write(path, lines):
  path.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
  return str(path)


def test_the_command_line_reads_files_and_eval_jsons(tmp_path, capsys):
  refs, a, b = (_write(tmp_path / n, x) for n, x in (('r', REFS), ('a', WORSE), ('b', REFS)))
  record = tmp_path / 'eval_test_10.json'
  record.write_text(json.dumps({'hypotheses_path': b, 'references_path': refs}))
  assert compare.main([f'--baseline={a}', f'--system={record}', '--samples=50']) == 0
  out = capsys.readouterr().out
  assert out.startswith('bleu: baseline ') and '(significant at 0.05, 50 paired' in out
  assert compare.main([f'--baseline={a}', f'--system={_write(tmp_path / "c", REFS[:-1])}',
                       f'--references={refs}']) == 1
  err = capsys.readouterr().err.strip()
  assert err == (f'error: --system={tmp_path / "c"} has 59 lines but {refs} has 60; expected '
                 'one hypothesis per reference')
  assert compare.main([f'--baseline={a}', f'--system={b}']) == 1
  assert capsys.readouterr().err.strip() == ('error: --references: needed when neither input '
                                             'is an eval JSON')
