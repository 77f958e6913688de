"""The fourth damage tour's library calls (tours/variants_and_tools_tries.py runs them): public
`t2t_jax` calls with bad arguments, all in one child process (one jax start-up), each judged
as a one-line documented error, a misleading one, a traceback or a wrong value."""

import json
import os
import subprocess
import sys

from benchmarks.shared import harness
from tours.common import ROOT


LIBRARY_SETUP = '''
import json, os, sys, traceback
import numpy as np
import jax, jax.numpy as jnp
import t2t_jax
from t2t_jax.export.common import ExportError
from t2t_jax.data.tokenizer import TokenizerError
cfg = t2t_jax.TransformerConfig(vocab_size=400, d_model=32, d_ff=64, num_heads=4,
                                num_layers=1, max_len=64)
model = t2t_jax.Transformer(cfg)
params = t2t_jax.init_params(model, jax.random.PRNGKey(0))
ids = jnp.array([[23, 57, 9, 1, 0, 0], [5, 6, 7, 8, 9, 1]], jnp.int32)
SPM = sys.argv[1]
SCRATCH = sys.argv[2]
DOCUMENTED = (ValueError, TypeError, FileExistsError, ExportError, TokenizerError)
'''

LIBRARY_RUN = '''
for name, code, says in TRIES:
  try:
    value = eval(code) if '\\n' not in code and not code.startswith(('from ', 'import ')) else exec(code)
    out = {'name': name, 'raised': None, 'value': repr(value)[:300]}
  except Exception as e:  # what the user would see
    kind = ('documented' if isinstance(e, DOCUMENTED) and type(e).__module__.startswith(
        ('builtins', 't2t_jax')) else 'other')
    out = {'name': name, 'raised': f'{type(e).__name__}: {e}'.splitlines()[0][:300],
           'kind': kind, 'names': any(s in str(e) for s in says)}
  print('TRY ' + json.dumps(out), flush=True)
'''

# (name, code, says: words the message must hold, expected 'error' or a check of the value)
LIBRARY_TRIES = [
    ('export_stablehlo_model platforms=("metal",)',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x1", platforms=("metal",))',
     ['metal'], 'error'),
    ('export_stablehlo_model platforms="cpu" (a string)',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x2", platforms="cpu")',
     ['platforms'], 'error'),
    ('export_stablehlo_model params wrapped as {"params": params}',
     't2t_jax.export_stablehlo_model(model, {"params": params}, SPM, SCRATCH + "/x3")',
     ['params'], 'error'),
    ('export_stablehlo_model tokenizer path does not exist',
     't2t_jax.export_stablehlo_model(model, params, SCRATCH + "/nope.model", SCRATCH + "/x4")',
     ['nope.model', 'tokenizer'], 'error'),
    ('export_stablehlo_model tokenizer of another vocab size (cfg vocab 300)',
     't2t_jax.export_stablehlo_model(t2t_jax.Transformer(cfg.replace(vocab_size=300)), '
     't2t_jax.init_params(t2t_jax.Transformer(cfg.replace(vocab_size=300)), '
     'jax.random.PRNGKey(0)), SPM, SCRATCH + "/x5")', ['vocab', '300', '400'], 'error'),
    ('export_stablehlo_model beam_size=0',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x6", beam_size=0)',
     ['beam_size'], 'error'),
    ('export_stablehlo_model bucket_lengths=()',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x7", bucket_lengths=())',
     ['bucket_lengths'], 'error'),
    ('export_stablehlo_model bucket_lengths=(16, 128) beyond max_len=64',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x8", '
     'bucket_lengths=(16, 128))', ['bucket_lengths', 'max_len'], 'error'),
    ('export_stablehlo_model alpha=nan',
     't2t_jax.export_stablehlo_model(model, params, SPM, SCRATCH + "/x9", alpha=float("nan"))',
     ['alpha'], 'error'),
    ('export_stablehlo_model output is an existing file',
     't2t_jax.export_stablehlo_model(model, params, SPM, SPM)', ['spm.model', 'output'], 'error'),
    ('export_stablehlo_model params of bfloat16 (a cast tree)',
     't2t_jax.export_stablehlo_model(model, jax.tree.map(lambda x: x.astype(jnp.bfloat16), '
     'params), SPM, SCRATCH + "/x10")', [], 'ok'),
    ('check_incremental targets of floats',
     't2t_jax.check_incremental(model, params, ids, ids.astype(jnp.float32))', ['targets'],
     'error'),
    ('check_incremental 1-D inputs',
     't2t_jax.check_incremental(model, params, ids[0], ids)', ['inputs'], 'error'),
    ('check_incremental ids beyond the vocabulary',
     't2t_jax.check_incremental(model, params, ids, ids + 400)', ['targets', 'vocab'], 'error'),
    ('check_incremental max_decode_len=100 beyond max_len=64',
     't2t_jax.check_incremental(model, params, ids, ids, max_decode_len=100)',
     ['max_decode_len'], 'error'),
    ('check_incremental max_decode_len=0',
     't2t_jax.check_incremental(model, params, ids, ids, max_decode_len=0)',
     ['max_decode_len'], 'error'),
    ('check_incremental targets longer than max_len',
     't2t_jax.check_incremental(model, params, ids, jnp.ones((2, 80), jnp.int32))',
     ['targets', 'max_len'], 'error'),
    ('check_incremental params of another model (d_model 64)',
     't2t_jax.check_incremental(model, t2t_jax.init_params(t2t_jax.Transformer('
     'cfg.replace(d_model=64)), jax.random.PRNGKey(0)), ids, ids)', ['params'], 'error'),
    ('check_incremental atol=-1',
     't2t_jax.check_incremental(model, params, ids, ids, atol=-1.0)', ['atol'], 'error'),
    ('check_incremental on the gqa variant (ok)',
     't2t_jax.check_incremental(t2t_jax.Transformer(cfg.replace(num_kv_heads=2)), '
     't2t_jax.init_params(t2t_jax.Transformer(cfg.replace(num_kv_heads=2)), '
     'jax.random.PRNGKey(0)), ids, ids)', [], 'ok'),
    ('TransformerConfig num_kv_heads=3 with num_heads=4',
     't2t_jax.TransformerConfig(vocab_size=400, d_model=32, d_ff=64, num_heads=4, '
     'num_kv_heads=3)', ['num_kv_heads'], 'error'),
    ('NNX generate inputs of floats',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids.astype(jnp.float32))', ['inputs'],
     'error'),
    ('NNX generate 1-D inputs',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids[0])', ['inputs'], 'error'),
    ('NNX generate beam_size=True',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids, beam_size=True)', ['beam_size'],
     'error'),
    ('NNX generate alpha=nan',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids, alpha=float("nan"))', ['alpha'],
     'error'),
    ('NNX generate alpha="0.6" (a string)',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(ids, alpha="0.6")', ['alpha'], 'error'),
    ('NNX generate inputs longer than max_len',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'm = to_nnx(cfg, nnx.Rngs(params=0))\nm.generate(jnp.ones((1, 80), jnp.int32))',
     ['max_len'], 'error'),
    ('to_nnx with a bad model argument (a string)',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'to_nnx("base", nnx.Rngs(params=0))', ['model'], 'error'),
    ('to_nnx with rngs=None',
     'from flax import nnx\nfrom t2t_jax.model.nnx_bridge import to_nnx\n'
     'to_nnx(cfg, None)', ['rngs'], 'error'),
]


def library_tries(t):
  wanted = [x for x in LIBRARY_TRIES if t.wanted('fourth: ' + x[0])]
  if not wanted:
    return
  script = os.path.join(t.scratch, 'library_tries.py')
  with open(script, 'w', encoding='utf-8') as f:
    f.write(LIBRARY_SETUP + '\nTRIES = ' + repr([(n, c, s) for n, c, s, _ in wanted]) + '\n' +
            LIBRARY_RUN)
  spm = os.path.join(t.trained, 'vocab', 'spm.model')
  lib_scratch = os.path.join(t.scratch, 'lib')
  os.makedirs(lib_scratch)
  result, seconds = harness.time_call(
      subprocess.run, [sys.executable, script, spm, lib_scratch], capture_output=True,
      text=True, cwd=ROOT, timeout=1500, env=dict(os.environ, PYTHONPATH=ROOT))
  outs = {}
  for line in result.stdout.splitlines():
    if line.startswith('TRY '):
      o = json.loads(line[4:])
      outs[o['name']] = o
  for name, _, _, expected in wanted:
    o = outs.get(name)
    if o is None:
      fake = subprocess.CompletedProcess([], result.returncode, '', result.stderr[-2000:])
      t.record(f'fourth: {name}', 'traceback', fake, None,
               'one-line error' if expected == 'error' else 'ok')
      continue
    if o['raised'] is None:
      outcome = 'ok' if expected == 'ok' else 'wrong'
    elif o['kind'] != 'documented':
      outcome = 'traceback'
    else:
      outcome = 'one-line error' if o['names'] or expected == 'ok' else 'misleading'
    shown = subprocess.CompletedProcess([], 1 if o['raised'] else 0, o.get('value', ''),
                                        o['raised'] or '')
    t.record(f'fourth: {name}', outcome, shown, None,
             'one-line error' if expected == 'error' else 'ok')
  print(json.dumps({'library_seconds': round(seconds, 1)}), flush=True)
