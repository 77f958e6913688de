"""End to end: main.py trains a tiny model on CPU, checkpoints, resumes, and learns."""

import json
import os
import shutil
import stat

import numpy as np
import pytest

from conftest import TINY, read_metrics as _metrics, run_main


@pytest.mark.slow
def test_train_checkpoint_resume_and_learn(corpus, tmp_path):
  workdir = str(tmp_path / 'run')
  # Bucketed rows, for which the learning bound below was set; the embedded default's packed
  # rows go through test_resume.py's bitwise resume and the notebook.
  tiny = [*TINY, '--config.pack_examples=False']
  first = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}',
                   '--config.num_train_steps=30', *tiny)
  assert first.returncode == 0, first.stderr[-3000:]
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['10', '20', '30']
  assert os.path.isfile(os.path.join(workdir, 'vocab', 'spm.model'))
  assert any(n.startswith('events') for n in os.listdir(os.path.join(workdir, 'tensorboard')))
  assert 'tok/s ETA' in first.stderr

  second = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}',
                    '--config.num_train_steps=60', *tiny)
  assert second.returncode == 0, second.stderr[-3000:]
  assert 'resumed from step 30' in second.stderr
  assert 'Reusing the vocabulary' in second.stderr
  assert sorted(int(s) for s in os.listdir(os.path.join(workdir, 'checkpoints'))) == \
      [10, 20, 30, 40, 50, 60]
  records = _metrics(workdir)
  train_steps = [r['step'] for r in records if 'loss' in r]
  assert train_steps == [10, 20, 30, 40, 50, 60]  # the resumed run continues, no repeats
  loss = {r['step']: r['loss'] for r in records if 'loss' in r}
  # The window of steps 1-10 averages the warmup's descent from the untrained loss; from step
  # 20 on the windows sit on a plateau (measured 5.80 -> 5.39, 5.32, 5.32, 5.29, 5.30). A
  # bound of 0.5 held by 0.002 nats, which another CPU's rounding over 60 steps may take:
  # half the measured drop.
  assert loss[60] < loss[10] - 0.25, loss
  dev = {r['step']: r['eval_dev/loss'] for r in records if 'eval_dev/loss' in r}
  assert sorted(dev) == [0, 30, 60]
  assert dev[60] < dev[0] - 0.5, dev

  # A different model on the same workdir is refused, naming the key; nothing is touched.
  before = {n: os.path.getmtime(os.path.join(workdir, 'checkpoints', n))
            for n in os.listdir(os.path.join(workdir, 'checkpoints'))}
  clash = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}',
                   '--config.num_train_steps=70', *TINY, '--config.d_model=64')
  assert clash.returncode != 0
  assert "d_model: checkpoint has 32, config has 64" in clash.stderr
  after = {n: os.path.getmtime(os.path.join(workdir, 'checkpoints', n))
           for n in os.listdir(os.path.join(workdir, 'checkpoints'))}
  assert before == after


def test_unwritable_workdir_and_missing_data_fail_before_training(corpus, tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  result = run_main(f'--workdir={blocker}/run', f'--config.local_corpus_dir={corpus}', *TINY)
  assert result.returncode != 0
  assert f'workdir {blocker}/run is not writable' in result.stderr
  empty = tmp_path / 'empty_corpus'
  empty.mkdir()
  result = run_main(f'--workdir={tmp_path}/run2', f'--config.local_corpus_dir={empty}', *TINY)
  assert result.returncode != 0
  assert 'error:' in result.stderr and str(empty) in result.stderr and 'train.en' in result.stderr


def test_a_missing_final_eval_split_fails_before_the_first_step(corpus, tmp_path):
  no_test = tmp_path / 'no_test'
  no_test.mkdir()
  for name in os.listdir(corpus):
    if not name.startswith('test.'):
      shutil.copy(os.path.join(corpus, name), no_test / name)
  workdir = tmp_path / 'run'
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={no_test}', *TINY,
                    '--config.final_eval_split=test', '--config.num_train_steps=10')
  assert result.returncode != 0
  assert result.stderr.strip().splitlines()[-1] == (
      f"error: config key 'final_eval_split' is 'test', but there is no 'test' split: "
      f'expected {no_test}/test.en[.gz] and {no_test}/test.es[.gz], or {no_test}/test.tsv[.gz].')
  assert not workdir.exists()  # no step, no vocabulary, no preparation


def test_a_batch_too_small_for_the_devices_fails_before_any_work(tmp_path):
  """Issue 43 item 3.15: a row of the largest bucket per device (8 here) is checked before
  the data is prepared and the vocabulary trained, not after."""
  from configs import quickstart
  from t2t_jax.data import pipeline
  from t2t_jax.training import train
  config = quickstart.get_config()
  config.max_length, config.bucket_lengths, config.tokens_per_batch = 32, (16, 32), 128
  with pytest.raises(pipeline.PipelineError, match=r'tokens_per_batch=128 is too small: the '
                     r'largest bucket \(32 tokens\) needs at least 256 \(8 rows per process'):
    train.train(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('was', ['missing', 'empty', 'used'])
def test_a_refusal_after_the_data_is_prepared_leaves_a_new_workdir_as_it_was(corpus, tmp_path,
                                                                             was):
  """No pair fits max_length: known only once the vocabulary is trained and the corpus
  prepared and encoded. A missing or empty workdir is left so; a used one keeps its files
  and what the run prepared (nothing of it was the run's to judge)."""
  from configs import quickstart
  from t2t_jax.data import pipeline
  from t2t_jax.training import train
  workdir = tmp_path / 'run'
  if was != 'missing':
    workdir.mkdir()
  if was == 'used':
    (workdir / 'notes.txt').write_text('mine')
  config = quickstart.get_config()
  config.update(dict(local_corpus_dir=corpus, vocab_size=400, vocab_sample_sentences=1200,
                     max_length=2, bucket_lengths=(2, 32), tokens_per_batch=2048))
  with pytest.raises(pipeline.PipelineError, match='are longer than 2 tokens'):
    train.train(config, str(workdir))
  if was == 'used':
    assert {'notes.txt', 'vocab', 'tfds'} <= set(os.listdir(workdir))
  else:
    assert workdir.exists() == (was == 'empty') and not (was == 'empty' and os.listdir(workdir))


@pytest.fixture
def umask_002():
  """main.py runs under the user's umask 002 (group-writable), inherited by subprocesses."""
  old = os.umask(0o002)
  yield
  os.umask(old)


@pytest.mark.slow
def test_average_decode_and_eval_from_the_command_line(corpus, tmp_path, umask_002):
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}',
                    '--config.num_train_steps=40', *TINY)
  assert result.returncode == 0, result.stderr[-3000:]
  # Averaging the last 5 of 4 checkpoints is refused, naming how many exist.
  refused = run_main('--mode=average', f'--workdir={workdir}', '--config.average_last=5')
  assert refused.returncode != 0 and 'only 4 exist' in refused.stderr
  averaged = run_main('--mode=average', f'--workdir={workdir}', '--config.average_last=3')
  assert averaged.returncode == 0, averaged.stderr[-3000:]
  assert 'averaged steps 20, 30, 40 into' in averaged.stdout
  checkpoints = sorted(os.listdir(os.path.join(workdir, 'checkpoints')))

  source = tmp_path / 'input.en'
  lines = ['In the beginning God created the heaven and the earth.', '',
           'And God said, Let there be light: and there was light.', '', '', 'Amen.']
  source.write_text('\n'.join(lines) + '\n', encoding='utf-8')
  output = tmp_path / 'output.es'
  decoded = run_main('--mode=decode', f'--workdir={workdir}', f'--input={source}',
                     f'--output={output}', '--config.beam_size=2')
  assert decoded.returncode == 0, decoded.stderr[-3000:]
  assert 'using averaged steps 20,30,40' in decoded.stderr
  assert 'sent/s' in decoded.stderr
  out = output.read_text(encoding='utf-8').split('\n')
  assert len(out) == len(lines) + 1 and out[-1] == ''  # one line per input line
  assert all(out[i] == '' for i, line in enumerate(lines) if not line)  # empty stays empty
  # stdin -> stdout gives the same translations; an existing output is never overwritten.
  piped = run_main('--mode=decode', f'--workdir={workdir}', '--config.beam_size=2',
                   input='\n'.join(lines) + '\n')
  assert piped.returncode == 0 and piped.stdout == output.read_text(encoding='utf-8')
  again = run_main('--mode=decode', f'--workdir={workdir}', f'--input={source}',
                   f'--output={output}')
  assert again.returncode != 0 and 'already exists' in again.stderr

  evaluated = run_main('--mode=eval', f'--workdir={workdir}', '--split=test',
                       '--config.beam_size=2')
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  report = os.path.join(workdir, 'eval_test_40.json')
  with open(report) as f:
    result = json.load(f)
  assert result['checkpoint'] == 'averaged steps 20,30,40' and result['sentences'] == 64
  assert 0 <= result['bleu'] <= 100 and 'nrefs:1' in result['bleu_signature']
  assert np.isfinite(result['loss']) and result['perplexity'] > 1
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == checkpoints  # untouched
  # Outputs get the umask's modes (664 files, 775 folders), not 600/700 from temp files.
  written = [str(output), report, os.path.join(workdir, 'averaged')] + [
      os.path.join(root, name) for root, dirs, files in os.walk(os.path.join(workdir, 'averaged'))
      for name in dirs + files]
  modes = {path: oct(stat.S_IMODE(os.stat(path).st_mode)) for path in written}
  assert len(modes) > 10 and all(
      mode == ('0o775' if os.path.isdir(path) else '0o664') for path, mode in modes.items()), modes

  bad = tmp_path / 'bad.en'
  bad.write_bytes(b'fine\n\xff\xfe broken\n')
  failed = run_main('--mode=decode', f'--workdir={workdir}', f'--input={bad}')
  assert failed.returncode != 0 and f'{bad} is not valid UTF-8' in failed.stderr
  assert 'line 2' in failed.stderr
  missing = run_main('--mode=decode', f'--workdir={tmp_path}/nothing', f'--input={source}')
  assert missing.returncode != 0 and 'error:' in missing.stderr and 'checkpoint' in missing.stderr


@pytest.mark.slow
def test_embedded_default_reports_dev_bleu_curves_and_final_test_score(corpus, tmp_path):
  """The quickstart path: dev BLEU at each eval, learning curves, and the end-of-run report
  (average of the last checkpoints, test BLEU, three examples, where things are)."""
  workdir = str(tmp_path / 'run')
  opts = [f'--workdir={workdir}', f'--config.local_corpus_dir={corpus}', *TINY,
          '--config.num_train_steps=30', '--config.eval_every_steps=15',
          '--config.eval_bleu_sentences=8', '--config.final_eval_split=test',
          '--config.average_last=2', '--config.beam_size=2']
  result = run_main(*opts)
  assert result.returncode == 0, result.stderr[-3000:]
  records = _metrics(workdir)
  bleu = {r['step']: r['eval_dev/bleu'] for r in records if 'eval_dev/bleu' in r}
  assert sorted(bleu) == [15, 30]  # not at step 0: an untrained model has nothing to score
  assert all(0.0 <= b <= 100.0 for b in bleu.values())
  assert 'BLEU' in result.stderr and 'on 8 dev sentences' in result.stderr
  assert {r['step'] for r in records if 'eval_dev/elapsed_s' in r} == {0, 15, 30}
  assert all(0.0 < r['padding_efficiency'] <= 1.0 for r in records if 'loss' in r)
  assert os.path.isfile(os.path.join(workdir, 'plots', 'learning_curves_step.png'))

  with open(os.path.join(workdir, 'eval_test_30.json')) as f:
    final = json.load(f)
  assert final['checkpoint'] == 'averaged steps 20,30' and final['sentences'] == 64
  assert len(final['examples']) == 3
  first = final['examples'][0]
  assert first['source'].startswith('And the LORD spake unto Moses')  # test line 1
  assert first['reference'].startswith('Y HABLÓ Jehová')
  out = result.stdout
  assert f'BLEU {final["bleu"]:.2f}' in out and 'averaged steps 20,30 -> test split' in out
  assert out.count('reference:') == 3 and first['hypothesis'] in out
  assert os.path.join(workdir, 'averaged', 'step_30_last_2') in out
  assert os.path.join(workdir, 'plots') in out

  # Rerunning the finished command trains nothing and reuses the averaged model and its score.
  again = run_main(*opts)
  assert again.returncode == 0, again.stderr[-3000:]
  assert f'BLEU {final["bleu"]:.2f}' in again.stdout
  assert not os.path.exists(os.path.join(workdir, 'eval_test_30.1.json'))


def _step_metrics(workdir):
  """{step: (loss, nll, accuracy, tokens)} of the per-step metrics lines."""
  return {r['step']: (r['loss'], r['nll'], r['accuracy'], r['tokens'])
          for r in _metrics(workdir) if 'loss' in r}


@pytest.mark.slow
def test_gradient_accumulation_in_the_loop_equals_the_big_batch_and_resumes_exactly(
    corpus, tmp_path):
  """grad_accum_steps=2 at tokens_per_batch=T: each update sums the gradients of 2 consecutive
  batches of T padded slots (configs/default.py). With one bucket length and no packing the
  pipeline's batch k holds the k-th run of R rows of the epoch's order (R = 32 rows of 64 at
  2048, 64 at 4096), so batches 2k and 2k+1 at T are exactly the pairs of batch k at 2T: the
  accumulated run must see the losses of grad_accum_steps=1 at 2T, update after update, and
  stopped after its checkpoint at step 2 and rerun, the same metrics bit for bit."""
  one_bucket = [f'--config.local_corpus_dir={corpus}', *TINY, '--config.pack_examples=False',
                '--config.max_length=64', '--config.bucket_lengths=(64,)',
                '--config.eval_every_steps=0', '--config.log_every_steps=1',
                '--config.checkpoint_every_steps=2']
  accumulating = [*one_bucket, '--config.grad_accum_steps=2', '--config.tokens_per_batch=2048']
  runs = {'accumulated': accumulating, 'resumed': accumulating,
          'big': [*one_bucket, '--config.grad_accum_steps=1', '--config.tokens_per_batch=4096']}
  for name, args in runs.items():
    if name == 'resumed':  # stopped after the checkpoint of step 2, then rerun to the end
      first = run_main(f'--workdir={tmp_path / name}', *args, '--config.num_train_steps=2')
      assert first.returncode == 0, first.stderr[-3000:]
    result = run_main(f'--workdir={tmp_path / name}', *args, '--config.num_train_steps=4')
    assert result.returncode == 0, result.stderr[-3000:]
    if name == 'resumed':
      assert 'resumed from step 2' in result.stderr
  accumulated, resumed, big = (_step_metrics(tmp_path / name) for name in runs)
  assert sorted(accumulated) == sorted(big) == [1, 2, 3, 4]
  assert resumed == accumulated  # bitwise
  # The same pairs in every update (real target tokens counted exactly), and the same losses
  # up to the order of float32 sums.
  assert [m[3] for m in accumulated.values()] == [m[3] for m in big.values()]
  np.testing.assert_allclose(np.array(list(accumulated.values())), np.array(list(big.values())),
                             rtol=2e-6)
  # The updates matter: the loss moves by far more than the tolerance between steps.
  losses = [m[0] for m in big.values()]
  assert min(abs(a - b) for a, b in zip(losses, losses[1:])) > 1e-3, losses
