"""The command line: `--mode=info`, `--help` and bad-input handling, as a user runs it."""

import os
import shutil
import signal
import subprocess
import time

import pytest
import write_faults
from checkpoint_helpers import snapshot
from conftest import main_command, run_main_argv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository


def run_main(*args, timeout=300, env=None):
  env = dict(os.environ, JAX_PLATFORMS='cpu') if env is None else env
  return run_main_argv(args, env=env, timeout=timeout)


def test_info_prints_base_parameter_count():
  # JAX_PLATFORMS unset, as users run it: jax tries the TPU backend first and logs its
  # failure at INFO, which stays off the console.
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  result = run_main('--mode=info', '--config=configs/wmt_base.py', env=env)
  assert result.returncode == 0, result.stderr
  assert 'Unable to initialize backend' not in result.stderr
  assert 'total                63,045,632' in result.stdout
  assert 'shared_embedding/embedding' in result.stdout and '(37000, 512)' in result.stdout


def test_info_for_a_table3_row_with_override():
  result = run_main('--mode=info', '--config=configs/table3.py:A1', '--config.vocab_size=1000')
  assert result.returncode == 0, result.stderr
  assert 'num_heads=1 d_k=512 d_v=512' in result.stdout
  assert '(1000, 512)' in result.stdout


def test_info_counts_grouped_key_value_heads():
  """Multi-query base: W^K and W^V of all 18 attention layers (6 encoder self, 6 decoder self,
  6 cross) project to one head of 64, not 8: 18 x 2 x 512 x 64 x 7 parameters fewer."""
  from configs import wmt_base  # pylint: disable=import-outside-toplevel
  from t2t_jax.model import info  # pylint: disable=import-outside-toplevel
  config = wmt_base.get_config()
  config.num_kv_heads = 1
  described = info.describe(config)
  assert described.splitlines()[0].endswith(' num_kv_heads=1')
  assert f'total                {63_045_632 - 18 * 2 * 512 * 64 * 7:,d}' in described
  assert 'encoder/layer_0/self_attention/key/kernel' in described
  assert '(512, 1, 64)' in described


def test_unknown_key_and_bad_value_fail_before_computation():
  result = run_main('--mode=info', '--config.d_modle=3')
  assert result.returncode != 0
  assert "unknown config key 'd_modle'; did you mean d_model" in result.stderr
  result = run_main('--mode=info', '--config=configs/wmt_base.py', '--config.num_heads=7')
  assert result.returncode != 0
  assert "config key 'd_model': expected a multiple of num_heads=7" in result.stderr


_ROWS = 'base, A1, A2, A3, A4, B1, B2, C1, C2, C3, C4, C5, C6, C7, D1, D2, D3, D4, E, big'


@pytest.mark.parametrize('args,message', [
    (['--config=missing.py'], "--config=missing.py: no such file 'missing.py'; expected a "
     'Python config file such as configs/wmt_base.py or configs/table3.py:B1'),
    (['--config=configs/table3.py:b1'], "--config=configs/table3.py:b1: unknown Table 3 row "
     f"'b1' (rows are case-sensitive: did you mean 'B1'?); valid rows: {_ROWS}"),
    (['--config=configs/table3.py:C9'],
     f"--config=configs/table3.py:C9: unknown Table 3 row 'C9'; valid rows: {_ROWS}"),
    (['--config.num_layers.x=3'], "config key 'num_layers.x': 'num_layers' holds a single "
     'int and has no sub-keys; write --config.num_layers=VALUE'),
    (['--mode=decode', '--input={tmp}'],
     '--input={tmp} is a directory; expected a UTF-8 text file with one sentence per line'),
    (['--workdir={tmp}/file'],
     '--workdir={tmp}/file is a file; expected a directory (one that does not exist yet is '
     'created)'),
    (['--mode=eval', '--split=bogus'], 'flag --split=bogus: value should be one of '
     '<train|dev|test>'),
    (['--config.num_train_steps=0'],  # refused before any data is prepared
     "config key 'num_train_steps': expected a value > 0, got 0"),
    (['--config.share_vocab=False'], '--config.share_vocab=False needs '
     '--config.share_embeddings=False: one matrix cannot embed two vocabularies (§3.4 ties '
     'source, target and pre-softmax weights of one shared vocabulary)'),
    (['--config.source_vocab_size=8000'], "config key 'source_vocab_size'=8000 has no effect: "
     'share_vocab=True: one vocabulary of vocab_size serves both sides; drop it'),
], ids=['missing-config', 'lower-case-row', 'unknown-row', 'nested-key', 'input-folder',
        'workdir-file', 'bad-split', 'zero-steps', 'shared-embeddings-of-two-vocabularies',
        'source-size-of-one-vocabulary'])
def test_user_mistakes_fail_in_one_line_and_touch_nothing(tmp_path, args, message):
  blocker = tmp_path / 'file'
  blocker.write_text('keep me\n')
  args = [arg.format(tmp=tmp_path) for arg in args]
  if not any(arg.startswith('--workdir=') for arg in args):
    args.append(f'--workdir={tmp_path}/run')
  result = run_main(*args)
  assert result.returncode == 1
  assert result.stderr == f'error: {message.format(tmp=tmp_path)}\n'
  assert os.listdir(tmp_path) == ['file'] and blocker.read_text() == 'keep me\n'


@pytest.mark.parametrize('flag', ['--help', '-h'])
def test_help_says_how_to_override_config_keys_and_exits_0(flag):
  result = run_main(flag)
  assert result.returncode == 0, result.stderr
  assert 'Override any config key after --config with\n--config.KEY=VALUE' in result.stdout
  assert 'in configs/default.py' in result.stdout
  assert '--split: <train|dev|test>: eval: the split to evaluate' in result.stdout


# train checked before this test existed; tours/files_tour.py tries it on a real
# read-only mount with the other three.
@pytest.mark.parametrize('mode', ['eval', 'average', 'plot'])
def test_modes_that_write_the_workdir_refuse_a_read_only_one_before_any_work(
    tiny_workdir, tmp_path, mode):
  # eval used to decode the whole split before failing to write its JSON; average and plot
  # failed with tracebacks. The tests run as root, which `chmod -R a-w` does not stop: the
  # file system is made read-only under the workdir by `write_faults`.
  workdir = str(tmp_path / 'run')
  shutil.copytree(tiny_workdir, workdir)
  before = snapshot(workdir)
  result = write_faults.run('EROFS', workdir, f'--mode={mode}', f'--workdir={workdir}',
                            '--config.average_last=1',  # the one checkpoint there is
                            timeout=300)
  assert result.returncode == 1
  assert result.stderr.splitlines()[-1] == (
      f'error: workdir {workdir} is not writable: Read-only file system'), result.stderr[-3000:]
  assert 'Traceback' not in result.stderr and result.stderr.count('error:') == 1
  # Before any work: no checkpoint read (its log line), nothing decoded (no progress bar).
  assert 'inference parameters' not in result.stderr and 'sentences' not in result.stderr
  assert result.stdout == '' and snapshot(workdir) == before


def test_decode_onto_a_full_disk_fails_in_one_line_and_leaves_no_output(tiny_workdir, tmp_path):
  # It used to decode everything and then end in an OSError traceback.
  sentences = tmp_path / 'in.txt'
  sentences.write_text('In the beginning\nAmen.\n')
  full = tmp_path / 'full'  # a full file system there (`write_faults`): files are created
  full.mkdir()              # empty, writing their bytes fails
  output = full / 'out.txt'
  # Full for the output's temporary file only: a disk full from the start is refused before
  # any work (`outputs.check_writable`'s probe, tests/cli/test_mode_targets.py).
  result = write_faults.run('ENOSPC', str(full / '.out.txt.tmp'), '--mode=decode',
                            f'--workdir={tiny_workdir}',
                            f'--input={sentences}', f'--output={output}', timeout=300)
  assert result.returncode == 1
  assert result.stderr.splitlines()[-1] == (
      f'error: cannot write {output}: No space left on device; free space'), result.stderr[-3000:]
  assert 'Traceback' not in result.stderr and result.stderr.count('error:') == 1
  assert '2/2 sentences' in result.stderr  # decoded: the write at the end failed
  assert os.listdir(full) == []  # neither the output nor a temporary file is left


@pytest.mark.parametrize('mode', ['eval', 'average'])
def test_eval_and_average_onto_a_full_disk_fail_in_one_line(tiny_workdir, tmp_path, mode):
  # eval used to decode the whole split and end in an OSError traceback writing its JSON;
  # average in orbax's tracebacks.
  workdir = str(tmp_path / 'run')
  shutil.copytree(tiny_workdir, workdir)
  before = snapshot(os.path.join(workdir, 'checkpoints'))
  # Full where the result is written (its temporary file, `paths.write_atomic`): a disk full
  # from the start is refused before any work (`check_writable`'s probe).
  full = {'eval': os.path.join(workdir, '.eval_'),
          'average': os.path.join(workdir, 'averaged')}[mode]
  result = write_faults.run('ENOSPC', full, f'--mode={mode}', f'--workdir={workdir}',
                            '--config.average_last=1', timeout=300)
  assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-3000:]
  last = result.stderr.splitlines()[-1]
  target = (os.path.join(workdir, 'eval_dev_10.json') if mode == 'eval'
            else os.path.join(workdir, 'averaged', 'step_10_last_1'))
  assert last.startswith(f'error: cannot write {target}: No space left on device; free space')
  assert result.stderr.count('error:') == 1
  assert snapshot(os.path.join(workdir, 'checkpoints')) == before


@pytest.mark.slow
@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_a_signal_during_decode_ends_in_one_line_and_leaves_no_claim(tiny_workdir, tmp_path,
                                                                     sig):
  # Ctrl-C printed a KeyboardInterrupt traceback; SIGTERM killed the process before decode
  # removed its empty claim on --output, so the same command was then refused.
  source = tmp_path / 'in.en'
  source.write_text('And God said, Let there be light: and there was light.\n' * 20_000)
  out = tmp_path / 'out.es'
  child = subprocess.Popen(
      main_command('--mode=decode', f'--workdir={tiny_workdir}', f'--input={source}',
                   f'--output={out}'), cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS='cpu'),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      # As from a terminal: a shell without job control starts background jobs (a CI
      # runner's, say) with SIGINT ignored, and Python then installs no Ctrl-C handler.
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  for _ in range(1200):  # the claim exists once decoding is about to start
    if out.exists() or child.poll() is not None:
      break
    time.sleep(0.1)
  time.sleep(1.0)
  assert child.poll() is None, child.communicate()[1][-2000:]
  child.send_signal(sig)
  _, stderr = child.communicate(timeout=120)
  assert child.returncode == 130, stderr[-2000:]
  assert 'Traceback' not in stderr
  assert stderr.strip().splitlines()[-1] == (
      f'error: interrupted by {sig.name if sig == signal.SIGTERM else "SIGINT (Ctrl-C)"}; what '
      'this command had not finished is not kept: run the same command again')
  assert not out.exists()


@pytest.mark.slow
def test_ctrl_c_of_a_streaming_decode_says_that_what_it_wrote_is_kept(tiny_workdir, tmp_path):
  """A stream's translations are written as they come: interrupted, they stay, and the line
  says so (it said 'not kept: run the same command again', which the kept file then refused)."""
  fifo, out = str(tmp_path / 'in.fifo'), tmp_path / 'out.es'
  os.mkfifo(fifo)
  child = subprocess.Popen(
      main_command('--mode=decode', f'--workdir={tiny_workdir}', f'--input={fifo}',
                   f'--output={out}'), cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS='cpu'),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  with open(fifo, 'w', encoding='utf-8') as pipe:
    pipe.write('In the beginning God created the heaven and the earth.\n')
    pipe.flush()
    for _ in range(1200):
      if (out.exists() and out.read_text(encoding='utf-8').count('\n') == 1
          ) or child.poll() is not None:
        break
      time.sleep(0.1)
    assert child.poll() is None, child.communicate()[1][-2000:]
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=120)
  assert child.returncode == 130 and 'Traceback' not in stderr, stderr[-2000:]
  assert stderr.strip().splitlines()[-1] == (
      f'error: interrupted by SIGINT (Ctrl-C); the 1 translation written to {out} is kept; '
      'to go on, decode the lines after them into another --output')
  assert out.read_text(encoding='utf-8').count('\n') == 1
