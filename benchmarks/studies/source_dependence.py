"""Does a trained model use its source? Dev NLL with the true sources vs with mismatched ones.

A translation model's per-token NLL must rise sharply when each target is paired with another
sentence's source; a model that has collapsed into a target-side language model (the symptom
of issue 11: the same output for every input) shows almost no gap. The mismatched source of
pair i is the source of pair i + 1 (a rotation, so lengths stay realistic).

  python -m benchmarks.studies.source_dependence --workdir /tmp/qs [--checkpoint 1200] [--split dev]

One JSON line: NLL per token with true and rotated sources, their gap (nats/token) and the
perplexity ratio.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import harness  # noqa: E402


class _Rotated:
  """A split whose pair i has the source of pair (i + 1) mod n and its own target."""

  def __init__(self, source):
    self._source, self.name = source, None  # no name: never cached as the real split

  def __len__(self):
    return len(self._source)

  def __getitem__(self, i):
    return {'source': self._source[(i + 1) % len(self)]['source'],
            'target': self._source[i]['target']}


def source_dependence(workdir: str, checkpoint=None, split: str = 'dev') -> dict:
  import jax
  from t2t_jax import config as config_lib
  from t2t_jax.inference import checkpoint_choice
  from t2t_jax.model import transformer as model
  from t2t_jax.runtime import parallel
  from t2t_jax.data import corpora, pipeline, tokenizer
  from t2t_jax.inference.evaluate import evaluate_batches
  inference = checkpoint_choice.load_inference_params(workdir, checkpoint)
  config = config_lib.from_json(inference.config_json)
  tok = tokenizer.load(tokenizer.vocab_path(workdir))
  source = corpora.load_split(config, split, corpora.default_data_dir(config, workdir))
  cfg = model.TransformerConfig.from_config(config)
  mesh = parallel.make_mesh()
  eval_step = parallel.make_eval_step(cfg, mesh, label_smoothing=config.label_smoothing)
  params = parallel.replicate(inference.params, mesh)
  nll = {}
  for name, data in (('true', source), ('rotated', _Rotated(source))):
    batches = pipeline.make_eval_batches(config, data, tok, rows_multiple=jax.local_device_count())
    nll[name] = evaluate_batches(eval_step, params, batches, mesh)['nll']
  gap = nll['rotated'] - nll['true']
  return {'workdir': workdir, 'checkpoint': inference.description, 'split': split,
          'nll_true_source': nll['true'], 'nll_rotated_source': nll['rotated'],
          'gap_nats_per_token': gap, 'perplexity_ratio': float(2.718281828459045 ** gap)}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--checkpoint', default=None)
  parser.add_argument('--split', default='dev')
  harness.add_out_argument(parser)
  args = parser.parse_args()
  harness.start_jax()
  harness.Emitter(args.out)({'name': 'source_dependence',
                             **source_dependence(args.workdir, args.checkpoint, args.split)})


if __name__ == '__main__':
  main()
