"""`--config.corpora` through main.py (issue 62): a tagged mixture trains, logs its realised
shares, shows them in `info`, resumes exactly as an uninterrupted run, lends its vocabulary
(`vocab_from`), refuses an edited entry by name, and its model decodes untagged input; two
directions in one model, each chosen by `target_lang`."""

import gzip
import itertools
import os
import re

import pytest
from conftest import BUNDLED, TINY, read_metrics, run_main, short_corpus


def _synthetic(folder, skip=1200, count=300):
  """A train-only corpus: the bundled training pairs after the test corpus's (a stand-in for
  back-translated data)."""
  os.makedirs(folder)
  for lang in ('en', 'es'):
    with gzip.open(os.path.join(BUNDLED, f'train.{lang}.gz'), 'rt', encoding='utf-8') as f:
      lines = list(itertools.islice(f, skip, skip + count))
    (folder / f'train.{lang}').write_text(''.join(lines), encoding='utf-8')
  return str(folder)


def _ok(result):
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@pytest.mark.slow
def test_a_tagged_mixture_trains_logs_its_shares_and_resumes_exactly(corpus, tmp_path):
  bible = short_corpus(corpus, tmp_path / 'bible')
  synthetic = _synthetic(tmp_path / 'bt')
  mix = f'--config.corpora={bible}:1,{synthetic}:1:<bt>'
  args = [*TINY, mix, '--config.eval_every_steps=0', '--config.checkpoint_every_steps=10']
  whole, halves = str(tmp_path / 'whole'), str(tmp_path / 'halves')
  _ok(run_main(f'--workdir={whole}', *args, '--config.num_train_steps=20'))
  _ok(run_main(f'--workdir={halves}', *args, '--config.num_train_steps=10'))
  _ok(run_main(f'--workdir={halves}', *args, '--config.num_train_steps=20'))

  logged = [m for m in read_metrics(whole) if 'loss' in m]
  assert [m['step'] for m in logged] == [10, 20]
  for m in logged:  # this process's pairs of the window: about half each, summing to 1
    assert m['data/share/bt'] + m['data/share/bible'] == pytest.approx(1.0)
    assert 0.3 < m['data/share/bt'] < 0.7
  resumed = {m['step']: m for m in read_metrics(halves) if 'loss' in m}
  assert resumed[20]['loss'] == logged[1]['loss']  # the resumed steps are the same steps
  assert resumed[20]['data/share/bt'] == logged[1]['data/share/bt']

  info = _ok(run_main('--mode=info', f'--workdir={whole}')).stdout
  assert "corpora (training mixture, each epoch's share of the pairs; dev and test from bible)" in info
  # Half each of the pairs the length filter keeps (an odd count: one pair more for bible).
  shares = [float(s) for s in
            re.findall(r'\n  (?:bible|bt) +en-es  weight 1 +(\d+\.\d\d)%', info)]
  assert len(shares) == 2 and sum(shares) == pytest.approx(100) and 49 < shares[1] <= 50, info
  assert re.search(r'\n  bt +en-es  weight 1 +\d+\.\d\d%  tag <bt>  ', info), info
  decoded = _ok(run_main('--mode=decode', f'--workdir={whole}', input='In the beginning\n'))
  assert len(decoded.stdout.splitlines()) == 1

  # Another run on the same mixture takes this run's vocabulary as it is (its tag included).
  again = str(tmp_path / 'again')
  _ok(run_main(f'--workdir={again}', *args, '--config.num_train_steps=10',
               f'--config.vocab_from={whole}'))
  with open(os.path.join(whole, 'vocab', 'spm.model'), 'rb') as a, \
       open(os.path.join(again, 'vocab', 'spm.model'), 'rb') as b:
    assert a.read() == b.read()

  # The folders moved byte-identical: accepted by their content.
  os.rename(bible, tmp_path / 'bible2')
  os.rename(synthetic, tmp_path / 'bt2')
  bible, synthetic = str(tmp_path / 'bible2'), str(tmp_path / 'bt2')
  args[len(TINY)] = f'--config.corpora={bible}:1,{synthetic}:1:<bt>'
  _ok(run_main(f'--workdir={whole}', *args, '--config.num_train_steps=30'))
  assert 'data/share/bt2' in [r for r in read_metrics(whole) if 'loss' in r][-1]

  # An entry edited since: refused by its name and file, nothing trained.
  with open(os.path.join(synthetic, 'train.es'), 'a', encoding='utf-8') as f:
    f.write('una línea más\n')
  with open(os.path.join(synthetic, 'train.en'), 'a', encoding='utf-8') as f:
    f.write('one more line\n')
  refused = run_main(f'--workdir={whole}', *args, '--config.num_train_steps=40')
  assert refused.returncode == 1 and 'Traceback' not in refused.stderr
  last = refused.stderr.strip().splitlines()[-1]
  assert 'bt2: the train split changed' in last and 'train.es' in last, last


@pytest.mark.slow
def test_both_directions_in_one_model_each_chosen_by_target_lang(corpus, tmp_path):
  bible = short_corpus(corpus, tmp_path / 'bible')
  run = str(tmp_path / 'run')
  _ok(run_main(f'--workdir={run}', *TINY, f'--config.corpora={bible},es-en={bible}',
               '--config.num_train_steps=20', '--config.eval_every_steps=20',
               '--config.eval_bleu_sentences=4'))
  evals = [m for m in read_metrics(run) if m['step'] == 20]
  keys = set().union(*evals)
  # Each direction's dev split, each with its own token: the run's pair under eval_dev/.
  assert {'eval_dev/loss', 'eval_dev/bleu', 'eval_dev_es-en/loss', 'eval_dev_es-en/bleu'} <= keys
  losses = {k: v for m in evals for k, v in m.items() if k.endswith('/loss')}
  assert losses['eval_dev/loss'] != losses['eval_dev_es-en/loss']

  line = 'En el principio\n'
  into_en = _ok(run_main('--mode=decode', f'--workdir={run}', '--config.source_lang=es',
                         '--config.target_lang=en', input=line)).stdout
  into_es = _ok(run_main('--mode=decode', f'--workdir={run}', input=line)).stdout
  assert len(into_en.splitlines()) == len(into_es.splitlines()) == 1
  refused = run_main('--mode=decode', f'--workdir={run}', '--config.target_lang=fr', input=line)
  assert refused.returncode == 1 and 'Traceback' not in refused.stderr
  assert refused.stderr.strip().splitlines()[-1] == (
      'error: --config.target_lang=fr: the model translates into en, es (its --config.corpora)')
  # --mode=eval of the other direction scores the es-en entry's test split (its reversed files).
  result = _ok(run_main('--mode=eval', f'--workdir={run}', '--split=test',
                        '--config.source_lang=es', '--config.target_lang=en'))
  assert '"sentences": 8' in result.stdout
  exported = run_main('--mode=export', '--format=ctranslate2', f'--workdir={run}',
                      f'--output={tmp_path / "ct2"}')
  assert exported.returncode == 1 and 'exports do not add it' in exported.stderr
