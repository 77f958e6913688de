"""Decoding speed of two commits, A/B on the same machine in the same run (issue 44).

Every change to decoding runs this before it merges:

  python -m benchmarks.peers.decode_ab --base main --head WORKTREE [--workdir RUN] --out FILE

Each side is a child process whose `t2t_jax` is that commit's (a `git worktree` checked out
under a temporary folder and removed afterwards; `--head WORKTREE`, the default, is this
checkout with its uncommitted changes). Both children get the same parameters (written once by
this process; the parameter trees must match) and run the same shapes; the parent times them
round by round, the order rotating (`harness.interleave`), and prints base/head ratios.

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
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, 'benchmarks', 'shared')  # harness.py, imported alone by a side
CHILD_FLAG = '--child'


# ----------------------------------------------------------------------------------- child


def _child_main():
  """A side: `sys.path[0]` is its commit's tree (set by the parent); JSON lines on a pipe."""
  tree = os.environ['DECODE_AB_TREE']
  sys.path.insert(0, tree)
  sys.path.insert(1, SHARED)  # this checkout's harness (the commit may not have one like it)
  import harness  # noqa: E402  (benchmarks/shared/harness.py of the parent's checkout)
  spec, reply = harness.child_protocol()
  side = _Side(spec, tree)
  reply({'t2t_jax': side.t2t_file, 'hlo': side.hlo})
  for request in harness.requests():
    with harness.timed() as t:
      out = side.run(request['what'], request.get('length'))
    reply({'seconds': t.seconds, 'digest': out})


class _Side:
  """The commit's decoding on the shared parameters."""

  def __init__(self, spec, tree):
    import jax
    import numpy as np
    try:  # the commit's own start-up (quiet libtpu on CPU) where it has one
      from t2t_jax import cli
      cli.start_backends()
    except (ImportError, AttributeError):
      pass
    import t2t_jax
    from t2t_jax.inference import translate
    from t2t_jax.model import transformer as model
    self.t2t_file = t2t_jax.__file__
    if not self.t2t_file.startswith(tree):
      raise RuntimeError(f'the child imported {self.t2t_file}, not the tree {tree}')
    self.np, self.jax, self.spec = np, jax, spec
    size = spec['size']
    cfg = model.TransformerConfig(
        vocab_size=size['vocab_size'], d_model=size['d_model'], d_ff=size['d_ff'],
        num_heads=size['num_heads'], d_k=size['d_model'] // size['num_heads'],
        d_v=size['d_model'] // size['num_heads'], num_layers=size['num_layers'],
        max_len=size['max_len'], dropout_rate=0.0, deterministic=True)
    self.cfg = cfg
    shapes = jax.eval_shape(lambda r: model.init_params(cfg, r), jax.random.PRNGKey(0))
    self.params = {name: _filled(shapes, dict(np.load(spec[name])))
                   for name in ('trained', 'random') if spec.get(name)}
    self.translator = None
    if spec.get('vocab'):
      from t2t_jax.data import tokenizer
      self.translator = translate.Translator(
          cfg, self.params['trained'], tokenizer.load(spec['vocab']), beam_size=spec['beam'],
          alpha=spec['alpha'], max_decode_extra=spec['max_decode_extra'],
          batch_sentences=spec['rows'], bucket_lengths=tuple(spec['buckets']))
      self.sentences = spec['sentences']
    from t2t_jax.runtime import multihost
    mesh = multihost.local_mesh(jax.local_devices()[:1])
    self.decode = translate.sharded_decoder(cfg, spec['beam'], spec['alpha'], mesh)
    rng = np.random.default_rng(0)
    self.src = rng.integers(2, size['vocab_size'], (spec['rows'], spec['src_len'])).astype(
        np.int32)
    self.src[:, -1] = 1  # EOS-terminated
    self.hlo = self._hlo(max(spec['lengths']))

  def _step_args(self, length):
    lengths = self.np.full((self.spec['rows'],), length, self.np.int32)
    return self.params['random'], self.src, lengths, length

  def _hlo(self, length):
    text = self.decode.lower(*self._step_args(length)).compile().as_text()
    count = lambda pattern: len(re.findall(pattern, text))  # noqa: E731
    return {'instructions': count(r'\n\s+(?:ROOT )?%?[\w.\-]+ = '), 'fusions': count(r' fusion\('),
            'copies': count(r' copy\('), 'transposes': count(r' transpose\('),
            'while_loops': count(r' while\('), 'gathers': count(r' gather\('),
            'chars': len(text)}

  def run(self, what, length):
    if what == 'serve':
      ids = self.translator.translate_ids(self.sentences)
      return _digest(json.dumps(ids))
    out = self.np.asarray(self.decode(*self._step_args(length)))
    assert out.shape[1] == length
    return _digest(out.tobytes()) + f' full={float((out[:, -1] != 0).mean()):.2f}'


def _filled(shapes, flat):
  """The tree of `shapes` with each leaf from `flat` ({keystr: array})."""
  import jax
  leaves, treedef = jax.tree_util.tree_flatten_with_path(shapes)
  values = []
  for path, shape in leaves:
    value = flat.pop(jax.tree_util.keystr(path))
    if value.shape != shape.shape:
      raise ValueError(f'{jax.tree_util.keystr(path)}: {value.shape} vs {shape.shape}')
    values.append(value)
  if flat:
    raise ValueError(f'parameters this commit does not have: {sorted(flat)[:5]}')
  return jax.tree_util.tree_unflatten(treedef, values)


def _digest(data) -> str:
  import hashlib
  return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------- parent


def _git(*args) -> str:
  return subprocess.run(['git', *args], cwd=ROOT, check=True, capture_output=True,
                        text=True).stdout.strip()


@contextlib.contextmanager
def _tree(rev: str, scratch: str):
  """(commit, a folder holding `rev`'s files): a temporary worktree, removed afterwards;
  WORKTREE: this checkout as it is."""
  if rev == 'WORKTREE':
    dirty = bool(_git('status', '--porcelain', '--untracked-files=no'))
    yield _git('rev-parse', '--short', 'HEAD') + ('+changes' if dirty else ''), ROOT
    return
  commit = _git('rev-parse', '--short', rev)
  path = os.path.join(scratch, f'tree_{commit}')
  _git('worktree', 'add', '--detach', path, commit)
  try:
    yield commit, path
  finally:
    _git('worktree', 'remove', '--force', path)


class _Child:
  def __init__(self, tree: str, spec):
    env = dict(os.environ, DECODE_AB_TREE=tree, PYTHONPATH=tree)
    self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), CHILD_FLAG],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 cwd=tree, env=env)
    self.hello = self.call(spec)

  def call(self, message):
    self.proc.stdin.write(json.dumps(message) + '\n')
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line:
      raise RuntimeError(f'a decode_ab child exited with {self.proc.wait()} (see stderr)')
    return json.loads(line)

  def close(self):
    self.proc.stdin.close()
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
  if c.num_kv_heads or (c.d_k and c.d_k != c.d_model // c.num_heads):
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


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  if argv == [CHILD_FLAG]:
    return _child_main()
  sys.path.insert(0, ROOT)
  from benchmarks.shared import harness
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--base', required=True, help='a commit (A)')
  parser.add_argument('--head', default='WORKTREE',
                      help='a commit (B); WORKTREE: this checkout, uncommitted changes included')
  parser.add_argument('--workdir', default=None,
                      help='a trained run (read only) for the serve measure and the model size')
  parser.add_argument('--sentences', type=int, default=1010, help='first N test sentences')
  parser.add_argument('--rows', type=int, default=4, help='sentences a batch (quickstart: 4)')
  parser.add_argument('--beam', type=int, default=4)
  parser.add_argument('--src-len', type=int, default=32)
  parser.add_argument('--lengths', default='16,128',
                      help='two output lengths of the step measure')
  parser.add_argument('--rounds', type=int, default=6,
                      help='interleaved rounds; the order rotates by one a round, so a multiple '
                      'of the systems (4 step + 2 serve) lets each lead equally often')
  parser.add_argument('--step-repeats', type=int, default=3,
                      help='step-measure calls of a side in its turn, each timed')
  args = harness.add_out_argument(parser).parse_args(argv)
  harness.start_jax()
  emit = harness.Emitter(args.out)
  run, size, c = _size(args)
  lengths = sorted(int(x) for x in args.lengths.split(','))
  scratch = tempfile.mkdtemp(prefix='decode_ab_')
  try:
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
    shutil.rmtree(scratch, ignore_errors=True)
  record.update(name='decode_ab', size=size, rows=args.rows, beam=args.beam,
                src_len=args.src_len, lengths=lengths, rounds=args.rounds,
                workdir=args.workdir, checkpoint=run.description if run else 'random')
  _print_summary(emit(record))


def _measure(harness, spec, trees, args, run):
  """Both children started, warmed up, timed interleaved: the record's numbers."""
  load_before = harness.load_average()
  children = {}
  try:
    for side, tree in trees.items():
      children[side] = _Child(tree, spec)
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
    for call in systems.values():  # compile, first allocations
      call()
    repeats = {n: args.step_repeats for n in systems if ':step' in n}
    times = harness.interleave(systems, args.rounds, warmup=0, repeats=repeats)
  finally:
    for child in children.values():
      child.close()
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
    line += f", hlo {record['hlo'][side]}"
    print(line, file=sys.stderr)
  fmt = lambda d: ', '.join(f'{k} {v:.3f}x' for k, v in d.items())  # noqa: E731
  print(f"  head/base speed (medians): {fmt(record['speedup_head_over_base'])}", file=sys.stderr)
  print(f"  paired calls: {fmt(record['paired_speedup_head_over_base'])}; fastest calls: "
        f"{fmt(record['min_speedup_head_over_base'])}", file=sys.stderr)
  print(f"  identical outputs: {record['identical_outputs']}", file=sys.stderr)


if __name__ == '__main__':
  main()
