"""A side of `benchmarks/peers/decode_ab.py`: one commit's decoding, run as a child process
whose `t2t_jax` is that commit's (`DECODE_AB_TREE`, first on `sys.path`), answering the
parent's requests as JSON lines on a pipe (`harness.child_protocol`).

  python benchmarks/peers/decode_ab_side.py   # started by decode_ab.py, not by hand
"""

import json
import os
import re
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, 'benchmarks', 'shared')  # harness.py, imported alone by a side


def main():
  """A side: `sys.path[0]` is its commit's tree (set by the parent); JSON lines on a pipe.
  A Ctrl-C reaches the whole process group: the parent stops its sides itself (and a side
  whose parent is gone ends at the end of its input), so a side ignores it."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
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


if __name__ == '__main__':
  main()
