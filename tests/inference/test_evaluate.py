"""The scores a run reports are the scores of what decoding writes, with the same checkpoint:
eval's BLEU (`--mode=eval`), the dev BLEU in metrics.jsonl and the final report's BLEU equal
sacreBLEU of `--mode=decode --output` against the reference file; a treebank's F1 equals EVALB
(`t2t_jax.parsing.evalb`) of the decoded trees against the gold trees file.

A model scored here must translate for real (distinct outputs, BLEU well above 0): a tiny model
on the Bible corpus decodes every sentence to the same few tokens at BLEU 0, which a misaligned
hypothesis or reference leaves unchanged. So the translation run learns a word-for-word
lexicon (16 words, 100 steps: dev BLEU 2.8 at step 50, 45.2 at step 100, test 17.5 for the
average), and each check also shows that hypotheses shifted by one line would score otherwise.
"""

import json
import os
import random
import subprocess
import sys

import pytest
import sacrebleu

from conftest import TINY, read_metrics, run_main

_LEXICON = {'sun': 'sol', 'sea': 'mar', 'bread': 'pan', 'light': 'luz', 'voice': 'voz',
            'net': 'red', 'salt': 'sal', 'peace': 'paz', 'king': 'rey', 'law': 'ley',
            'cabbage': 'col', 'wind': 'viento', 'fish': 'pez', 'cough': 'tos', 'end': 'fin',
            'month': 'mes'}
LEXICON_RUN = [*TINY, '--config.vocab_size=80', '--config.vocab_sample_sentences=4000',
               '--config.learning_rate_scale=1.0', '--config.warmup_steps=100',
               '--config.num_train_steps=100', '--config.checkpoint_every_steps=50',
               '--config.eval_every_steps=50', '--config.eval_bleu_sentences=40',
               '--config.final_eval_split=test', '--config.average_last=2',
               '--config.beam_size=2']


def _lexicon_corpus(folder):
  """{train,dev,test}.{en,es}: 3-8 random words and their word-for-word translations."""
  os.makedirs(folder)
  rng = random.Random(0)
  words = sorted(_LEXICON)
  for split, n in (('train', 2000), ('dev', 40), ('test', 40)):
    source = [[rng.choice(words) for _ in range(rng.randint(3, 8))] for _ in range(n)]
    for lang, lines in (('en', source), ('es', [[_LEXICON[w] for w in s] for s in source])):
      with open(os.path.join(folder, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.write(''.join(' '.join(line) + '\n' for line in lines))
  return str(folder)


def _lines(path):
  with open(path, encoding='utf-8') as f:
    return f.read().splitlines()


def _decode(workdir, source_lines, output, *checkpoint):
  """The lines `--mode=decode` writes for `source_lines` (checkpoint: `--checkpoint=N`)."""
  source = f'{output}.in'
  with open(source, 'w', encoding='utf-8') as f:
    f.write(''.join(line + '\n' for line in source_lines))
  result = run_main('--mode=decode', f'--workdir={workdir}', f'--input={source}',
                    f'--output={output}', *checkpoint)
  assert result.returncode == 0, result.stderr[-3000:]
  return _lines(output)


def _bleu(hypotheses, references):
  return sacrebleu.corpus_bleu(hypotheses, [references]).score


def _assert_scores(reported, hypotheses, references):
  """`reported` is sacreBLEU of the written `hypotheses`, and a one-line misalignment would
  have shown: the shifted hypotheses score at least 1 BLEU differently."""
  assert len(hypotheses) == len(references)
  score = _bleu(hypotheses, references)
  assert reported == pytest.approx(score, abs=1e-9)
  assert abs(_bleu(hypotheses[1:] + hypotheses[:1], references) - score) > 1.0, hypotheses


@pytest.mark.slow
def test_dev_eval_and_final_bleu_are_sacrebleu_of_the_decoded_files(tmp_path):
  corpus = _lexicon_corpus(tmp_path / 'corpus')
  workdir = str(tmp_path / 'run')
  trained = run_main(*LEXICON_RUN, f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}')
  assert trained.returncode == 0, trained.stderr[-3000:]
  source = {s: _lines(os.path.join(corpus, f'{s}.en')) for s in ('dev', 'test')}
  reference = {s: _lines(os.path.join(corpus, f'{s}.es')) for s in ('dev', 'test')}

  # Dev BLEU while training: the step's parameters (its checkpoint) on the 40 dev lines.
  dev = {r['step']: r['eval_dev/bleu'] for r in read_metrics(workdir) if 'eval_dev/bleu' in r}
  assert sorted(dev) == [50, 100]
  decoded_dev = {}
  for step, recorded in dev.items():
    decoded_dev[step] = _decode(workdir, source['dev'], tmp_path / f'dev_{step}.es',
                                f'--checkpoint={step}')
    _assert_scores(recorded, decoded_dev[step], reference['dev'])
  assert 0.5 < dev[50] < dev[100] < 100  # learning, not yet perfect (a perfect copy of the
  # references would hide a hypothesis scored against itself)

  # The final report: the average of steps 50 and 100 on the test split (the default
  # checkpoint of decode), printed and written to eval_test_100.json.
  decoded = _decode(workdir, source['test'], tmp_path / 'test_avg.es')
  with open(os.path.join(workdir, 'eval_test_100.json'), encoding='utf-8') as f:
    final = json.load(f)
  assert final['checkpoint'] == 'averaged steps 50,100' and final['sentences'] == 40
  _assert_scores(final['bleu'], decoded, reference['test'])
  assert f'BLEU {final["bleu"]:.2f}' in trained.stdout
  for example in final['examples']:  # sentence by sentence, as decode wrote them
    i = source['test'].index(example['source'])
    assert (example['hypothesis'], example['reference']) == (decoded[i], reference['test'][i])

  # --mode=eval with an explicit training checkpoint, on the whole dev split.
  evaluated = run_main('--mode=eval', f'--workdir={workdir}', '--split=dev', '--checkpoint=100',
                       '--config.eval_sentence_scores=True')
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  printed = json.loads(evaluated.stdout)
  assert printed['checkpoint'] == 'training checkpoint step 100' and printed['sentences'] == 40
  _assert_scores(printed['bleu'], decoded_dev[100], reference['dev'])
  # chrF and TER of the same lines, the texts beside the JSON, each sentence's scores.
  refs = [reference['dev']]
  assert printed['chrf'] == pytest.approx(sacrebleu.corpus_chrf(decoded_dev[100], refs).score)
  assert printed['ter'] == pytest.approx(sacrebleu.corpus_ter(decoded_dev[100], refs).score)
  assert _lines(printed['hypotheses_path']) == decoded_dev[100]
  assert _lines(printed['references_path']) == reference['dev']
  rows = [line.split('\t') for line in _lines(printed['sentences_path'])[1:]]
  assert [float(r[2]) for r in rows] == pytest.approx(
      [sacrebleu.sentence_chrf(h, [r]).score for h, r in zip(decoded_dev[100], reference['dev'])],
      abs=1e-4)
  # Step 100 against step 50 on the same dev lines: significant, as BLEU 2.8 -> 45.2 is.
  earlier = run_main('--mode=eval', f'--workdir={workdir}', '--split=dev', '--checkpoint=50')
  assert earlier.returncode == 0, earlier.stderr[-3000:]
  compared = subprocess.run(
      [sys.executable, '-m', 't2t_jax.inference.compare',
       f'--baseline={json.loads(earlier.stdout)["path"]}', f'--system={printed["path"]}',
       '--samples=100', '--json'], capture_output=True, text=True, check=True)
  paired = json.loads(compared.stdout)['bleu']
  assert paired['system']['score'] == pytest.approx(printed['bleu'], abs=1e-3)
  assert paired['system']['p_value'] < 0.05
