"""What the benchmarks share about the models: sizes, FLOP formulas, known accelerator peaks,
compilation counts, the peer's thread count and the common arguments.

Timing, interleaving, the machine description and the JSON-lines records are
`benchmarks/shared/harness.py`'s.
"""

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks.shared import harness

# Model sizes. tiny: a small model that trains in minutes on a laptop CPU; base and big: the
# paper's Table 3 models with the EN-DE vocabulary (37000).
SIZES: Dict[str, Dict[str, Any]] = {
    'tiny': dict(vocab_size=8000, d_model=256, d_ff=1024, num_heads=4, num_layers=2,
                 dropout_rate=0.1),
    # The embedded default's model (configs/quickstart.py).
    'quickstart': dict(vocab_size=4000, d_model=128, d_ff=512, num_heads=4, num_layers=3,
                       dropout_rate=0.1),
    'base': dict(vocab_size=37000, d_model=512, d_ff=2048, num_heads=8, num_layers=6,
                 dropout_rate=0.1),
    'big': dict(vocab_size=37000, d_model=1024, d_ff=4096, num_heads=16, num_layers=6,
                dropout_rate=0.3),
}

# Dense bf16 peak of the accelerators we know (FLOP/s); MFU is reported against these (the
# table is training's too: t2t_jax/runtime/peaks.py).
from t2t_jax.runtime.peaks import KNOWN_PEAKS, known_peak  # noqa: E402,F401


def forward_flops(size: Dict[str, Any], batch: int, src_len: int, tgt_len: int) -> Dict[str, int]:
  """Matmul FLOPs of one teacher-forced forward pass, counted as 2*m*n*k per matmul, by part
  (`t2t_jax.plan.analytic.forward_flops_by_part`, which --mode=plan checks against XLA's own
  count): projections, attention over the full score matrices, FFNs, the pre-softmax
  projection. Not counted: embedding lookups, layer norms, softmaxes, biases, dropout, the
  loss, the optimizer (all O(tokens * d_model) or O(params), small next to the matmuls).
  """
  from t2t_jax.model import transformer as model  # pylint: disable=import-outside-toplevel
  from t2t_jax.plan import analytic  # pylint: disable=import-outside-toplevel
  heads = size['num_heads']
  cfg = model.TransformerConfig(vocab_size=size['vocab_size'], d_model=size['d_model'],
                                d_ff=size['d_ff'], num_heads=heads,
                                d_k=size['d_model'] // heads, d_v=size['d_model'] // heads,
                                num_layers=size['num_layers'])
  return analytic.forward_flops_by_part(cfg, batch, src_len, tgt_len)


def train_flops(size, batch, src_len, tgt_len) -> int:
  """Model FLOPs of one training step: 3 x the forward matmul FLOPs (backward = 2 x forward)."""
  return 3 * forward_flops(size, batch, src_len, tgt_len)['total']


def add_common_args(parser):
  """--out (the harness's Emitter) and --no-peer, which the benchmarks with a peer take
  (`require_peer` after parsing)."""
  harness.add_out_argument(parser)
  parser.add_argument('--no-peer', action='store_true', help='skip the PyTorch peer')
  return parser


def require_peer(parser, args) -> None:
  """Unless --no-peer: torch imports, else the script stops in one line naming the package
  and how to install it (requirements-bench.txt), before anything is measured."""
  if getattr(args, 'no_peer', False):
    return
  try:
    import torch  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError as e:
    parser.error(f'the PyTorch peer needs torch, which does not import here '
                 f'({str(e).splitlines()[0] if str(e) else type(e).__name__}): '
                 f'pip install -r requirements-bench.txt, or pass --no-peer to measure ours alone')


class CompileCounter:
  """Counts XLA backend compilations (and their seconds) through jax.monitoring.

  Use `with counter.window() as w:` ... `w['count']`, `w['seconds']`, `w['functions']`.
  """
  EVENT = '/jax/core/compile/backend_compile_duration'

  def __init__(self):
    import jax
    self._windows = []
    jax.monitoring.register_event_duration_secs_listener(self._listen)

  def _listen(self, event, duration, **kwargs):
    if event != self.EVENT:
      return
    for w in self._windows:
      w['count'] += 1
      w['seconds'] += duration
      w['functions'].append(str(kwargs.get('fun_name', '?')))

  class _Window:
    def __init__(self, owner):
      self.owner, self.data = owner, {'count': 0, 'seconds': 0.0, 'functions': []}

    def __enter__(self):
      self.owner._windows.append(self.data)
      return self.data

    def __exit__(self, *exc):
      self.owner._windows.remove(self.data)

  def window(self):
    return self._Window(self)


def pick_torch_threads(run: Callable[[], Any], setting: str) -> Dict[str, Any]:
  """Chooses torch's intra-op thread count: `setting` is 'auto' or a number.

  'auto' times `run` once with the core count and once with 1 thread and keeps the faster:
  on a machine shared with other busy processes, every multi-threaded op waits for a time
  slice of its second thread, and one thread can be several times faster.
  """
  import torch
  cores = os.cpu_count() or 1
  if setting != 'auto':
    torch.set_num_threads(int(setting) or cores)
    return {'threads': torch.get_num_threads(), 'choice': 'fixed'}
  timings = {}
  for n in sorted({cores, 1}, reverse=True):
    torch.set_num_threads(n)
    _, timings[n] = harness.time_call(run)
  best = min(timings, key=timings.get)
  torch.set_num_threads(best)
  return {'threads': best, 'choice': 'auto', 'calibration_s': {str(k): v for k, v in timings.items()}}


def run_pinned(jobs: Sequence[Tuple[List[str], str]], cores: Sequence[str], cwd: str,
               poll_s: float = 5.0) -> Dict[str, int]:
  """Runs the commands of `jobs` ((argv, log path) pairs, in order), at most one per entry of
  `cores` at a time: an entry such as '0' or '2-3' pins its command there (`taskset -c`), ''
  leaves it unpinned (['', ''] runs two at a time anywhere). Returns each log path's exit code.
  Two one-core training runs side by side on a 2-core machine finish about 1.5x sooner than the
  same two runs one after the other with both cores each (docs/table3_small.md)."""
  pending, running, codes = list(jobs), {}, {}
  while pending or running:
    for slot, core in enumerate(cores):
      if slot not in running and pending:
        argv, log_path = pending.pop(0)
        argv = ['taskset', '-c', core, *argv] if core else list(argv)
        with open(log_path, 'w', encoding='utf-8') as log:
          running[slot] = (subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT),
                           log_path)
    time.sleep(poll_s)
    for slot, (proc, log_path) in list(running.items()):
      if proc.poll() is not None:
        codes[log_path] = proc.returncode
        del running[slot]
  return codes


def run_stage(module: str, stage: str, options: Dict[str, Any], cwd: str,
              env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
  """Runs `python -m <module> --stage <stage> --<key> <value> ...` in a child process of its
  own (its own peak RSS and start-up) and returns the JSON object of its last stdout line;
  a failure raises RuntimeError with the end of its stderr."""
  command = [sys.executable, '-m', module, '--stage', stage]
  for key, value in options.items():
    command += [f'--{key}', str(value)]
  done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, env=env)
  if done.returncode:
    raise RuntimeError(f'{module} {stage} failed (exit code {done.returncode}; -9: killed, '
                       f'e.g. out of memory):\n{done.stderr[-4000:]}')
  return json.loads(done.stdout.strip().splitlines()[-1])
