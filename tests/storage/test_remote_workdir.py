"""A gs:// workdir, offline on the GCS emulator: the library's files there (metrics, plots,
eval JSON, length cache), then end to end: train, resume, average and decode with `main.py`,
the workdir, the corpus and the decode files all in the emulator (orbax's arrays through
tensorstore's gcs driver, everything else through etils.epath and gcsfs)."""

import json
import os

import pytest
from etils import epath

from conftest import TINY, run_main
from gcs_emulator import client_env

from t2t_jax.inference import averaging, evaluate
from t2t_jax.storage import workdir as workdir_lib
from t2t_jax.training import metrics, plots, summary
from t2t_jax.data import token_store


def _upload(local_dir: str, remote_dir: str) -> None:
  for name in sorted(os.listdir(local_dir)):
    with open(os.path.join(local_dir, name), 'rb') as f:
      epath.Path(remote_dir, name).write_bytes(f.read())


def _metrics(workdir: str) -> list:
  return [json.loads(line) for line in
          epath.Path(workdir, 'metrics.jsonl').read_text().splitlines()]


def test_metrics_plots_and_eval_files_on_gcs(gcs_dir, tmp_path, monkeypatch):
  workdir = gcs_dir
  epath.Path(workdir, 'metrics.jsonl').write_text('{"step": 10, "loss": 5.0}\n')
  writer = metrics.MetricsWriter(workdir)  # a resumed run: appends to what is there
  writer.write(20, {'loss': 4.0, 'elapsed_s': 20.0})
  writer.write(20, {'loss': 4.5, 'bleu': 1.0}, prefix='eval_dev')
  writer.close()
  assert _metrics(workdir) == [{'step': 10, 'loss': 5.0},
                               {'step': 20, 'loss': 4.0, 'elapsed_s': 20.0},
                               {'step': 20, 'eval_dev/loss': 4.5, 'eval_dev/bleu': 1.0}]
  events = list(epath.Path(workdir, 'tensorboard').glob('events.out.tfevents.*'))
  assert len(events) == 1 and b'eval_dev/bleu' in events[0].read_bytes()  # all flushed
  written = plots.write_learning_curves(workdir)
  assert written == [f'{workdir}/plots/learning_curves_{x}.png' for x in ('step', 'time')]
  assert all(epath.Path(p).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' for p in written)

  result = {'checkpoint': 'averaged steps 10,20', 'examples': [], 'bleu': 1.0}
  first = evaluate.write_result(workdir, 'dev', 20, result)
  second = evaluate.write_result(workdir, 'dev', 20, dict(result, checkpoint='step 20'))
  assert (first, second) == (f'{workdir}/eval_dev_20.json', f'{workdir}/eval_dev_20.1.json')
  assert summary._existing_result(workdir, 'dev', 20, 'averaged steps 10,20')['bleu'] == 1.0

  class Source:
    name = 'corpus:train'

    def __len__(self):
      return 2

    def __getitem__(self, i):
      return {'source': 'a b c'[:2 * i + 1], 'target': 'x'}

  class Tok:
    fingerprint = 'f'

    def encode_batch(self, texts):
      return [[len(w) + 2 for w in t.split()] for t in texts]

  class Cached(Tok):  # fails if the ids are encoded again instead of read
    encode_batch = None

  # Memory maps need local files: a remote cache_dir means this host's cache folder.
  monkeypatch.setenv('T2T_DATA_CACHE_DIR', str(tmp_path / 'host'))
  store = token_store.load_or_build(Source(), Tok(), f'{workdir}/data_cache')
  cached = token_store.load_or_build(Source(), Cached(), f'{workdir}/data_cache')
  assert store.path == cached.path and store.path.startswith(str(tmp_path / 'host' / 'tokens'))
  assert cached.lengths('source').tolist() == [2, 3]


@pytest.mark.slow
def test_train_resume_average_decode_on_gcs(gcs, gcs_dir, corpus, tmp_path):
  env = dict(os.environ, **client_env(gcs), T2T_DATA_CACHE_DIR=str(tmp_path / 'tfds'))
  corpus_dir, workdir = f'{gcs_dir}/corpus', f'{gcs_dir}/run'
  _upload(corpus, corpus_dir)
  args = [*TINY, f'--config.local_corpus_dir={corpus_dir}', f'--workdir={workdir}',
          '--config.eval_every_steps=0']

  first = run_main(*args, '--config.num_train_steps=10', env=env)
  assert first.returncode == 0, first.stderr[-3000:]
  assert averaging.training_steps(workdir) == [10]
  assert [r['step'] for r in _metrics(workdir) if 'loss' in r] == [10]
  assert epath.Path(workdir, 'vocab', 'spm.model').is_file()
  assert list(epath.Path(workdir, 'tensorboard').glob('events.out.tfevents.*'))
  assert not epath.Path(workdir, workdir_lib.LEASE_NAME).exists()  # released
  # TFDS writes array_record files locally only: prepared in the host cache, not on gs://.
  assert os.listdir(tmp_path / 'tfds' / 'local_parallel_corpus')
  assert not epath.Path(workdir, 'tfds').exists()

  second = run_main(*args, '--config.num_train_steps=20', env=env)
  assert second.returncode == 0, second.stderr[-3000:]
  assert 'resumed from step 10' in second.stderr
  assert averaging.training_steps(workdir) == [10, 20]
  assert [r['step'] for r in _metrics(workdir) if 'loss' in r] == [10, 20]  # appended

  average = run_main(*args, '--mode=average', '--config.average_last=2', env=env)
  assert average.returncode == 0, average.stderr[-3000:]
  target = f'{workdir}/averaged/step_20_last_2'
  assert f'averaged steps 10, 20 into {target}' in average.stdout
  assert averaging.averaged_checkpoints(workdir) == [(20, 2, target)]

  sources = ['In the beginning God created the heaven and the earth.', '', 'And God said.']
  epath.Path(gcs_dir, 'in.txt').write_text(''.join(s + '\n' for s in sources))
  decode = [*args, '--mode=decode', f'--input={gcs_dir}/in.txt',
            f'--output={gcs_dir}/out.txt']
  result = run_main(*decode, env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'averaged steps 10,20' in result.stderr
  assert len(epath.Path(gcs_dir, 'out.txt').read_text().split('\n')) == len(sources) + 1
