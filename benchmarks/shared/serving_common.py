"""What the serving benchmarks share: a trained run, its bundled test set, and its exports.

A run's workdir is only read; the exports go to a scratch directory (made once per output
path: an existing export is reused, so several benchmarks measure the same files).
"""

import dataclasses
import gzip
import os
from typing import Any, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_SET = os.path.join(ROOT, 't2t_jax', 'data', 'bible_en_es', 'test.{}.gz')


@dataclasses.dataclass
class Run:
  """A trained run as the serving benchmarks use it."""
  workdir: str
  config: Any        # the checkpoint's run config
  params: Any
  tokenizer: Any
  description: str

  @property
  def cfg(self):
    from t2t_jax.model import transformer as model
    return model.TransformerConfig.from_config(self.config)

  def translator(self, beam_size: int, alpha: float):
    """Our `translate.Translator` with the run's buckets, rows and max_decode_extra."""
    from t2t_jax.inference import translate
    c = self.config
    return translate.Translator(self.cfg, self.params, self.tokenizer, beam_size=beam_size,
                                alpha=alpha, max_decode_extra=c.max_decode_extra,
                                batch_sentences=c.decode_batch_sentences,
                                bucket_lengths=c.bucket_lengths)

  def pieces(self, sentences: List[str]) -> List[List[str]]:
    return [self.tokenizer.pieces(self.tokenizer.encode(s)) for s in sentences]


def add_args(parser):
  """The arguments every serving benchmark takes (and `--out`)."""
  from benchmarks.shared import common
  parser.add_argument('--workdir', required=True, help='a trained run (only read)')
  parser.add_argument('--scratch', required=True, help='where the exports are written')
  parser.add_argument('--limit', type=int, default=None, help='first N test sentences')
  parser.add_argument('--threads', type=int, default=2, help='CTranslate2 intra_threads')
  common.add_common_args(parser)
  return parser


def load(args) -> Tuple[Run, List[str], List[str]]:
  """The run of `--workdir` and the (first `--limit`) test sources and references; makes the
  `--scratch` directory if it is missing."""
  os.makedirs(args.scratch, exist_ok=True)
  return load_run(args.workdir), test_set('en', args.limit), test_set('es', args.limit)


def load_run(workdir: str) -> Run:
  from t2t_jax import config as config_lib
  from t2t_jax.inference import checkpoint_choice
  from t2t_jax.data import tokenizer
  inference = checkpoint_choice.load_inference_params(workdir)
  return Run(workdir, config_lib.from_json(inference.config_json), inference.params,
             tokenizer.load(tokenizer.vocab_path(workdir)), inference.description)


def test_set(lang: str, limit: Optional[int] = None) -> List[str]:
  """The bundled EN-ES test split (1010 sentences), one language."""
  with gzip.open(TEST_SET.format(lang), 'rt', encoding='utf-8') as f:
    lines = [line.rstrip('\n') for line in f]
  return lines[:limit] if limit else lines


def ctranslate2_model(run: Run, scratch: str, quantization: Optional[str] = None) -> str:
  """The run's CTranslate2 export (`quantization` None: float32) under `scratch`."""
  from t2t_jax.export import ctranslate2_export
  path = os.path.join(scratch, f'ct2_{quantization or "float32"}')
  if not os.path.isdir(path):
    ctranslate2_export.export_ctranslate2(run.workdir, path, quantization=quantization)
  return path


def ctranslate2_translator(path: str, threads: int, inter_threads: int = 1):
  """A CPU `ctranslate2.Translator`: `inter_threads` batches at once, `threads` threads each."""
  import ctranslate2
  return ctranslate2.Translator(path, device='cpu', inter_threads=inter_threads,
                                intra_threads=threads)


def start_against_ctranslate2(args):
  """What a benchmark against the CTranslate2 export does first, after parsing `add_args`'
  arguments: jax started, the `--out` emitter, the run and its test set (`load`), and a
  CTranslate2 translator of its float32 export. Returns (emit, run, sources, references, ct2)."""
  from benchmarks.shared import harness  # pylint: disable=import-outside-toplevel
  harness.start_jax()
  emit = harness.Emitter(args.out)
  run, sources, references = load(args)
  ct2 = ctranslate2_translator(ctranslate2_model(run, args.scratch), args.threads)
  return emit, run, sources, references, ct2
