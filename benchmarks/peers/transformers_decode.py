"""Decoding an imported MarianMT model: t2t_jax against transformers' own PyTorch `generate`,
same machine, same model, same sentences, in one run.

The model is made by transformers (`shared/transformers_models.marian_dir`: SentencePiece
models trained on the bundled corpus, random weights, `--train-steps` Adam steps EN->ES so
outputs vary and end), imported with `--mode=import`'s code, and both sides decode the first
`--sentences` lines of the bundled test split:
The SentencePiece models have 4000 pieces a side (trained on 8000 lines), positions 256.
- greedy: ours (`Translator`, strategy 'greedy') against `generate(num_beams=1)`; outputs must
  be identical (the count that agree is reported);
- beam 4: ours (the paper's GNMT length penalty, alpha 0.6) against `generate(num_beams=4)`
  (transformers' length_penalty 1.0: score / length); the rules differ, so the share of
  identical outputs is reported, not required;
- beam 4 by transformers' rule: ours with `length_rule='transformers'`, alpha 1.0 (its
  default length_penalty), against the same `generate(num_beams=4)`: the same search, so the
  outputs must agree.
Both sides batch `--batch` sentences sorted by length; transformers pads each batch to its
longest sentence and runs to the longest output; torch uses every core (`--torch-threads`).
Timing: one untimed call of each (ours compiles), then `--rounds` alternating rounds
(`harness.interleave`), medians.

  python -m benchmarks.peers.transformers_decode --size base --sentences 256 \\
      --out benchmarks/results/transformers_decode.jsonl
"""

import argparse
import gzip
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.shared import harness, transformers_models  # noqa: E402

SIZES = {'tiny': dict(d_model=64, layers=2, heads=4, d_ff=256),
         'small': dict(d_model=256, layers=3, heads=4, d_ff=1024),
         'base': dict(d_model=512, layers=6, heads=8, d_ff=2048)}


def _sentences(count, tok, longest=60):
  """The first `count` lines of the bundled test split of at most `longest` tokens (output
  limits, input + 50, then stay within the model's 256 positions)."""
  out = []
  with gzip.open(os.path.join(transformers_models.BUNDLED, 'test.en.gz'), 'rt',
                 encoding='utf-8') as f:
    for line in f:
      if len(out) == count:
        break
      if len(tok(line.strip())['input_ids']) <= longest:
        out.append(line.strip())
  return out


def _theirs(model, tok, sentences, batch, beams, extra):
  """transformers' outputs (ids, EOS and padding dropped), batched by length."""
  import torch
  order = sorted(range(len(sentences)), key=lambda i: len(tok(sentences[i])['input_ids']))
  out = [None] * len(sentences)
  for start in range(0, len(order), batch):
    rows = order[start:start + batch]
    data = tok([sentences[i] for i in rows], padding=True, return_tensors='pt')
    with torch.no_grad():
      generated = model.generate(**data, num_beams=beams, do_sample=False,
                                 max_new_tokens=data['input_ids'].shape[1] + extra,
                                 bad_words_ids=[[tok.pad_token_id]])
    for i, ids in zip(rows, generated.tolist()):
      ids = ids[1:]
      out[i] = ids[:ids.index(tok.eos_token_id)] if tok.eos_token_id in ids else [
          t for t in ids if t != tok.pad_token_id]
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--size', default='base', choices=sorted(SIZES))
  parser.add_argument('--sentences', type=int, default=256)
  parser.add_argument('--batch', type=int, default=64)
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--train-steps', type=int, default=200)
  parser.add_argument('--torch-threads', type=int, default=os.cpu_count())
  harness.add_out_argument(parser)
  args = parser.parse_args()
  harness.start_jax()
  import numpy as np
  import torch
  from t2t_jax.inference.translate import Translator
  from t2t_jax.pretrained import import_mode
  torch.set_num_threads(args.torch_threads)
  emit = harness.Emitter(args.out)
  with tempfile.TemporaryDirectory() as scratch:
    folder = transformers_models.marian_dir(
        os.path.join(scratch, 'hf'), train_steps=args.train_steps, spm_lines=8000,
        vocab_sizes=(4000, 4000), max_positions=256, **SIZES[args.size])
    workdir = os.path.join(scratch, 'w')
    import_mode.run(folder, workdir)
    model, tok = transformers_models.load(folder)
    special = [tok.pad_token_id, tok.eos_token_id, tok.unk_token_id]
    order = np.array(special + [i for i in range(model.config.vocab_size)
                                if i not in special])
    sentences = _sentences(args.sentences, tok)
    for name, beams, strategy, rule in (
        ('greedy', 1, 'greedy', {}), ('beam4', 4, 'beam', {}),
        ('beam4_transformers_rule', 4, 'beam', dict(length_rule='transformers', alpha=1.0))):
      ours = Translator.from_workdir(workdir, strategy=strategy, beam_size=beams,
                                     batch_sentences=args.batch, **rule)
      extra = ours.max_decode_extra
      outputs = {}

      def run_ours(ours=ours):
        outputs['ours'] = [[int(order[i]) for i in ids] for ids in ours.translate_ids(sentences)]

      def run_theirs(beams=beams, extra=extra):
        outputs['theirs'] = _theirs(model, tok, sentences, args.batch, beams, extra)

      times = harness.interleave({'t2t_jax': run_ours, 'transformers': run_theirs},
                                 args.rounds)
      # A translation that reaches its length limit (ours: input + max_decode_extra, EOS
      # forced; theirs: the batch's longest input + the same) is compared up to ours.
      limits = [len(tok(s)['input_ids']) + extra - 1 for s in sentences]
      ended = [len(o) < limit for o, limit in zip(outputs['ours'], limits)]
      same = sum(a == (b if end else b[:len(a)])
                 for a, b, end in zip(outputs['ours'], outputs['theirs'], ended))
      tokens = sum(len(o) + 1 for o in outputs['ours'])
      emit({'name': f'transformers_decode/{args.size}/{name}', 'size': args.size,
            'model': SIZES[args.size], 'sentences': len(sentences), 'batch': args.batch,
            'train_steps': args.train_steps, 'torch_threads': args.torch_threads,
            'identical_outputs': same, 'ended_before_the_limit': sum(ended),
            'output_tokens_ours': tokens,
            'output_tokens_theirs': sum(len(o) + 1 for o in outputs['theirs']),
            'seconds': harness.summaries(times),
            'speedup_vs_transformers': harness.speedups(times, 'transformers')['t2t_jax'],
            'versions': {'torch': torch.__version__,
                         'transformers': __import__('transformers').__version__}})


if __name__ == '__main__':
  main()
