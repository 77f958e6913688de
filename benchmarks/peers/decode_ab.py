"""Decoding speed of two commits, A/B on the same machine in the same run (issue 44).

Every change to decoding runs this before it merges:

  python -m benchmarks.peers.decode_ab --base main --head WORKTREE [--workdir RUN] --out FILE

Each side is a child process (`decode_ab_side.py`) whose `t2t_jax` is that commit's (a `git
worktree` checked out under a temporary folder and removed afterwards, Ctrl-C and SIGTERM
included; `--head WORKTREE`, the default, is this checkout with its uncommitted changes).
Both children get the same parameters (written once by this process; the parameter trees must
match) and run the same shapes; the parent times them round by round, the order rotating
(`harness.interleave`), and prints base/head ratios. A bad argument stops it in one line
before anything starts; Ctrl-C or SIGTERM ends it with 130 / 143, nothing left behind.

Two measures per side, both through the commit's own public decoding path:
  serve  `translate.Translator(...).translate_ids` of the bundled test sentences (the first
         `--sentences`) at `--rows` sentences a batch, beam `--beam`, alpha 0.6, buckets and
         threads as the embedded default decodes (`python -m benchmarks.peers.serve`'s "ours");
         needs `--workdir`, a trained run (realistic lengths: sentences end at EOS).
  step   the jitted beam search (`translate.sharded_decoder`, what Translator calls) of one
         batch of `--rows` random sources of `--src-len` ids, on random parameters of the
         run's size (quickstart's without --workdir) with the EOS embedding zeroed, so every
         hypothesis runs to max_decode_len. Timed at two output lengths, the difference
         divided by the steps between them is the time of one decode step (the encoder and
         the once-per-batch work cancel).
With `--ct2 FOLDER` (the run's CTranslate2 float32 export) a third system, `ct2:serve`,
translates the same sentences in `serve.py`'s child process at `--ct2-rows` a batch and the
`--ct2-split` IxJ (inter x intra threads; 2x1, its fastest on the 2-core EPYC), interleaved
with the sides: each side's speed over CTranslate2's comes from one run, before and after.
Also reported per side: the compiled step program's size (instructions, fusions, copies,
transposes, while loops in the XLA text), and whether both sides' outputs are identical.
Ratios are head speed / base speed (> 1: head faster) of the medians, of the calls paired as
they ran, and of each side's fastest call: on 2 shared cores the medians alone swung 0.7x-2x
between identical programs (docs/performance.md, "Decoding A/B between commits").
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'decode_ab_side.py')  # a side


def _git(*args) -> str:
  return subprocess.run(['git', *args], cwd=ROOT, check=True, capture_output=True,
                        text=True).stdout.strip()


@contextlib.contextmanager
def _tree(rev: str, scratch: str):
  """(commit, a folder holding `rev`'s files): a temporary worktree, removed afterwards
  however the block ends; WORKTREE: this checkout as it is."""
  if rev == 'WORKTREE':
    dirty = bool(_git('status', '--porcelain', '--untracked-files=no'))
    yield _git('rev-parse', '--short', 'HEAD') + ('+changes' if dirty else ''), ROOT
    return
  from benchmarks.shared import scripts
  commit = _git('rev-parse', '--short', rev)
  with scripts.git_worktree(ROOT, os.path.join(scratch, f'tree_{commit}'), commit) as path:
    yield commit, path


class SideError(RuntimeError):
  """A side's child process ended or refused the shared parameters (its stderr says why)."""


class _Child:
  def __init__(self, tree: str, spec):
    env = dict(os.environ, DECODE_AB_TREE=tree, PYTHONPATH=tree)
    self.tree = tree
    self.proc = subprocess.Popen([sys.executable, SIDE],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 cwd=tree, env=env)
    try:
      self.hello = self.call(spec)
    except BaseException:  # a stop while it starts: it goes too
      self.close(kill=True)
      raise

  def call(self, message):
    self.proc.stdin.write(json.dumps(message) + '\n')
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line:
      raise SideError(f'the side of {self.tree} exited with {self.proc.wait()}: its '
                      f'messages are above')
    return json.loads(line)

  def close(self, kill: bool = False):
    """Ends the child: its input closed (it exits when done), or `kill`ed at once."""
    if kill:
      self.proc.kill()
    try:
      self.proc.stdin.close()
    except OSError:  # a killed child's pipe
      pass
    self.proc.wait(timeout=60)


def _size(args):
  """The model size (the run's, or quickstart's) and the run's decoding settings."""
  if args.workdir:
    from benchmarks.shared import serving_common
    run = serving_common.load_run(args.workdir)
    c = run.config
  else:
    run = None
    from configs import quickstart
    c = quickstart.get_config()
  # A resolved run records num_kv_heads = num_heads for the paper's heads.
  if (c.num_kv_heads and c.num_kv_heads != c.num_heads) or (
      c.d_k and c.d_k != c.d_model // c.num_heads):
    raise SystemExit('decode_ab: the run must have the paper\'s heads (d_k = d_model / h, no '
                     'grouped heads), which every compared commit can build')
  size = {k: c[k] for k in ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'num_layers',
                            'max_len')}
  return run, size, c


def _write_params(run, size, scratch):
  """npz files of flat parameters: the run's (if any) and random ones (EOS row zeroed)."""
  import jax
  import numpy as np
  from t2t_jax.model import transformer as model
  cfg = model.TransformerConfig(**{k: size[k] for k in size}, dropout_rate=0.0,
                                deterministic=True)
  flat = lambda tree: {jax.tree_util.keystr(k): np.asarray(v)  # noqa: E731
                       for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}
  paths = {}
  random = flat(jax.jit(lambda r: model.init_params(cfg, r))(jax.random.PRNGKey(0)))
  key = "['shared_embedding']['embedding']"
  random[key] = random[key].copy()
  random[key][model.EOS_ID] = 0.0  # EOS scores like an average token: every beam runs to L
  paths['random'] = os.path.join(scratch, 'random.npz')
  np.savez(paths['random'], **random)
  if run is not None:
    paths['trained'] = os.path.join(scratch, 'trained.npz')
    np.savez(paths['trained'], **flat(run.params))
  return paths


def _lengths(text: str):
  """--lengths: two different output lengths >= 1, in increasing order."""
  try:
    lengths = sorted(int(x) for x in text.split(','))
  except ValueError:
    lengths = []
  if len(lengths) != 2 or lengths[0] < 1 or lengths[0] == lengths[1]:
    raise argparse.ArgumentTypeError(f'expected two different whole numbers >= 1 such as '
                                     f'16,128, not {text!r}')
  return lengths


def _parse(argv):
  """The arguments, every one checked before anything starts (a bad one: one line naming
  it, exit status 2); what needs the model's size (`_check_size`) is checked once it is
  known."""
  from benchmarks.shared import harness, scripts, serving_common
  count = scripts.positive_int
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--base', required=True, help='a commit (A)')
  parser.add_argument('--head', default='WORKTREE',
                      help='a commit (B); WORKTREE: this checkout, uncommitted changes included')
  parser.add_argument('--workdir', default=None,
                      help='a trained run (read only) for the serve measure and the model size')
  parser.add_argument('--sentences', type=count, default=1010, help='first N test sentences')
  parser.add_argument('--rows', type=count, default=4, help='sentences a batch (quickstart: 4)')
  parser.add_argument('--beam', type=count, default=4)
  parser.add_argument('--src-len', type=count, default=32)
  parser.add_argument('--lengths', type=_lengths, default=[16, 128],
                      help='two output lengths of the step measure (default 16,128)')
  parser.add_argument('--rounds', type=count, default=6,
                      help='interleaved rounds; the order rotates by one a round, so a multiple '
                      'of the systems (4 step + 2 serve) lets each lead equally often')
  parser.add_argument('--step-repeats', type=count, default=3,
                      help='step-measure calls of a side in its turn, each timed')
  parser.add_argument('--ct2', default=None,
                      help="the run's CTranslate2 float32 export: time it beside the sides")
  parser.add_argument('--ct2-rows', type=count, default=64, help="CTranslate2's max_batch_size")
  parser.add_argument('--ct2-split', default='2x1',
                      help='CTranslate2 inter_threads x intra_threads (default 2x1)')
  args = harness.add_out_argument(parser).parse_args(argv)
  if args.ct2 is not None:
    from benchmarks.peers import serve
    try:
      (args.ct2_split,) = serve._splits(args.ct2_split)
    except (SystemExit, ValueError):
      parser.error(f'--ct2-split={args.ct2_split}: expected one IxJ, e.g. 2x1')
    if args.workdir is None:
      parser.error('--ct2 needs --workdir (the run it was exported from)')
    if not os.path.isfile(os.path.join(args.ct2, 'model.bin')):
      parser.error(f'--ct2={args.ct2}: no CTranslate2 model.bin there')
  for flag, rev in (('--base', args.base), ('--head', args.head)):
    if rev != 'WORKTREE' and subprocess.run(
        ['git', 'rev-parse', '--verify', '--quiet', f'{rev}^{{commit}}'], cwd=ROOT,
        capture_output=True, check=False).returncode:
      parser.error(f'{flag}={rev}: not a commit of {ROOT}')
  if args.workdir is not None and not os.path.isdir(args.workdir):
    parser.error(f'--workdir={args.workdir}: ' + ('is a file; expected a trained run\'s folder'
                                                  if os.path.exists(args.workdir) else
                                                  'no such folder'))
  available = len(serving_common.test_set('en'))
  if args.workdir is not None and args.sentences > available:
    parser.error(f'--sentences={args.sentences}: the test set has {available}')
  return parser, args


def _check_size(parser, args, size):
  """The source and output lengths within the model's positions."""
  for flag, value in (('--src-len', args.src_len), ('--lengths', max(args.lengths))):
    if value > size['max_len']:
      parser.error(f'{flag}={value}: longer than the model\'s {size["max_len"]} positions '
                   f'(max_len)')


def main(argv=None):
  """The A/B; 0 when measured, 2 for a refused argument, 130 / 143 when stopped by Ctrl-C /
  SIGTERM (its worktrees, children and temporary files gone first)."""
  sys.path.insert(0, ROOT)
  from benchmarks.shared import harness, scripts
  parser, args = _parse(argv)
  try:
    with scripts.stops_raise():
      _run(parser, args, harness, scripts)
  except scripts.Stopped as stop:
    print(f'decode_ab: stopped by {stop}; nothing was recorded', file=sys.stderr)
    return stop.exit_code
  except (SideError, scripts.WorktreeError) as e:
    print(f'decode_ab: error: {e}', file=sys.stderr)
    return 1
  return 0


def _run(parser, args, harness, scripts):
  harness.start_jax()
  from t2t_jax import errors
  emit = harness.Emitter(args.out)
  try:
    run, size, c = _size(args)
  except errors.user_errors() as e:
    parser.error(f'--workdir={args.workdir}: {e}')
  _check_size(parser, args, size)
  lengths = args.lengths
  scratch = ''
  try:
    with scripts.deferred_stops():
      scratch = tempfile.mkdtemp(prefix='decode_ab_')
    spec = {'size': size, 'beam': args.beam, 'alpha': 0.6, 'rows': args.rows,
            'src_len': args.src_len, 'lengths': lengths,
            'max_decode_extra': c.max_decode_extra, 'buckets': list(c.bucket_lengths),
            **_write_params(run, size, scratch)}
    if run is not None:
      from benchmarks.shared import serving_common
      from t2t_jax.data import tokenizer
      spec.update(vocab=tokenizer.vocab_path(args.workdir),
                  sentences=serving_common.test_set('en', args.sentences))
    with _tree(args.base, scratch) as (base, base_tree), \
        _tree(args.head, scratch) as (head, head_tree):
      record = _measure(harness, spec, {'base': base_tree, 'head': head_tree}, args, run)
    record.update(base=base, head=head)
  finally:
    with scripts.deferred_stops():
      if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
  record.update(name='decode_ab', size=size, rows=args.rows, beam=args.beam,
                src_len=args.src_len, lengths=lengths, rounds=args.rounds,
                workdir=args.workdir, checkpoint=run.description if run else 'random')
  _print_summary(emit(record))


@contextlib.contextmanager
def _sides(trees, spec):
  """{side: its started `_Child`} for the block; afterwards each is closed (it exits when
  done), or killed at once when the block failed or was stopped."""
  children = {}
  try:
    for side, tree in trees.items():
      children[side] = _Child(tree, spec)
    yield children
  except BaseException:
    for child in children.values():
      child.close(kill=True)
    raise
  for child in children.values():
    child.close()


@contextlib.contextmanager
def _ct2_system(args, run, spec):
  """`serve.py`'s CTranslate2 child for the spec's sentences (None without `--ct2`), closed
  after the block."""
  if args.ct2 is None:
    yield None
    return
  from benchmarks.peers import serve
  child = serve.ct2_process(run, args.ct2, run.pieces(spec['sentences']), args.ct2_rows,
                            *args.ct2_split, args.beam)
  try:
    yield child
  finally:
    child.close()


def _measure(harness, spec, trees, args, run):
  """Both children started, warmed up, timed interleaved: the record's numbers."""
  load_before = harness.load_average()
  with _sides(trees, spec) as children, _ct2_system(args, run, spec) as ct2:
    measures = (['serve'] if run is not None else []) + ['step']
    systems, digests = {}, {}
    for side, child in children.items():
      for what in measures:
        for length in (spec['lengths'] if what == 'step' else [None]):
          name = f'{side}:{what}' + (f'@{length}' if length else '')

          def call(child=child, what=what, length=length, name=name):
            reply = child.call({'what': what, 'length': length})
            digests.setdefault(name, set()).add(reply['digest'])
            return harness.Measured(reply['seconds'])
          systems[name] = call
    if ct2 is not None:
      systems['ct2:serve'] = ct2.translate
    for call in systems.values():  # compile, first allocations
      call()
    repeats = {n: args.step_repeats for n in systems if ':step' in n}
    times = harness.interleave(systems, args.rounds, warmup=0, repeats=repeats)
  med = {n: statistics.median(ts) for n, ts in times.items()}
  short, long_ = spec['lengths']
  out = {'load_average_before': load_before, 'times_s': times, 'median_s': med,
         'hlo': {s: c.hello['hlo'] for s, c in children.items()},
         'identical_outputs': {
             n.split(':', 1)[1]: digests[n] == digests['head:' + n.split(':', 1)[1]]
             for n in digests if n.startswith('base:')},
         'digests': {n: sorted(d) for n, d in digests.items()}}
  per_side = {}
  for side in children:
    fastest = {n: min(ts) for n, ts in times.items()}
    entry = {f'step_ms{suffix}': 1e3 * (t[f'{side}:step@{long_}'] - t[f'{side}:step@{short}']) /
             (long_ - short) for suffix, t in (('', med), ('_fastest', fastest))}
    if run is not None:
      entry['serve_s'] = med[f'{side}:serve']
      entry['sentences_per_s'] = len(spec['sentences']) / med[f'{side}:serve']
    per_side[side] = entry
  if ct2 is not None:
    out['ct2'] = {'rows': args.ct2_rows, 'split': '%dx%d' % args.ct2_split,
                  'sentences_per_s': len(spec['sentences']) / med['ct2:serve'],
                  'fastest_sentences_per_s': len(spec['sentences']) / min(times['ct2:serve'])}
    for side, entry in per_side.items():
      entry['over_ct2'] = med['ct2:serve'] / med[f'{side}:serve']
      entry['over_ct2_fastest'] = min(times['ct2:serve']) / min(times[f'{side}:serve'])
  out['sides'] = per_side
  # Per round ratios too (base / head seconds: > 1 means head is faster).
  out['speedup_head_over_base'] = {
      m: harness.ratio(med[f'base:{m}'], med[f'head:{m}'])
      for m in [n.split(':', 1)[1] for n in times if n.startswith('base:')]}
  out['speedup_head_over_base']['step'] = harness.ratio(per_side['base']['step_ms'],
                                                        per_side['head']['step_ms'])
  # Under a changing load (other processes on the cores) two robuster views: the calls paired
  # as they ran (base's i-th call against head's i-th, neighbours in time), the median of
  # their ratios; and the fastest call of each side (the least disturbed).
  out['paired_speedup_head_over_base'] = {
      m: statistics.median(b / h for b, h in zip(times[f'base:{m}'], times[f'head:{m}']))
      for m in out['speedup_head_over_base'] if m != 'step'}
  out['min_speedup_head_over_base'] = {
      m: harness.ratio(min(times[f'base:{m}']), min(times[f'head:{m}']))
      for m in out['speedup_head_over_base'] if m != 'step'}
  return out


def _print_summary(record):
  print(f"decode_ab {record['base']} (base) vs {record['head']} (head), load "
        f"{record['load_average_before']} -> {record['load_average']}", file=sys.stderr)
  for side in ('base', 'head'):
    s = record['sides'][side]
    line = f"  {side}: step {s['step_ms']:.2f} ms (fastest calls {s['step_ms_fastest']:.2f})"
    if 'sentences_per_s' in s:
      line += f", serve {s['sentences_per_s']:.1f} sent/s"
    if 'over_ct2' in s:
      line += f" = {s['over_ct2']:.3f}x CTranslate2's (fastest {s['over_ct2_fastest']:.3f}x)"
    line += f", hlo {record['hlo'][side]}"
    print(line, file=sys.stderr)
  if 'ct2' in record:
    c = record['ct2']
    print(f"  CTranslate2 float32 @{c['rows']} {c['split']}: {c['sentences_per_s']:.1f} sent/s "
          f"(fastest pass {c['fastest_sentences_per_s']:.1f})", file=sys.stderr)
  fmt = lambda d: ', '.join(f'{k} {v:.3f}x' for k, v in d.items())  # noqa: E731
  print(f"  head/base speed (medians): {fmt(record['speedup_head_over_base'])}", file=sys.stderr)
  print(f"  paired calls: {fmt(record['paired_speedup_head_over_base'])}; fastest calls: "
        f"{fmt(record['min_speedup_head_over_base'])}", file=sys.stderr)
  print(f"  identical outputs: {record['identical_outputs']}", file=sys.stderr)


if __name__ == '__main__':
  sys.exit(main())
