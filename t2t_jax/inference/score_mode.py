"""`--mode=score` (and `t2t_jax.score`): the log probability of each target line given its
source line under a trained run (`score.py` computes it), one line each.
"""

import sys
from typing import List, Optional, Sequence, Tuple

from etils import epath

from t2t_jax.data import vocab_pair, vocabularies
from t2t_jax.inference import score as score_lib
from t2t_jax.inference.modes import Overrides, claimed, load, taken
from t2t_jax.model import variant
from t2t_jax.runtime import interruptible, multihost
from t2t_jax.storage import outputs, textio
from t2t_jax.storage import workdir as workdir_lib


def score(workdir: str, overrides: Overrides, checkpoint: Optional[str],
          input_path: Optional[str], targets_path: Optional[str], output: Optional[str]) -> None:
  """`--mode=score`: the log probability of each line of `targets_path` given the same line of
  `input_path` (`score.py`), one line each into `output` (stdout), claimed as decode's."""
  if not input_path or not targets_path:
    raise score_lib.ScoreInputError('--mode=score needs --input=SOURCES and --targets=TARGETS '
                                    '(aligned, one sentence per line)')
  if output and epath.Path(output).exists():
    raise taken(output)
  if output:
    outputs.check_writable(output)
  if input_path == targets_path == '-':
    raise score_lib.ScoreInputError('--input=- and --targets=-: standard input holds one of '
                                    'the two; give the other as a file')
  sources, targets = textio.read_input(input_path), textio.read_input(targets_path)
  multihost.barrier('score_output_checked')
  with claimed(output):
    results = scored(workdir, overrides, checkpoint, sources, targets,
                     (f'--input={input_path}', f'--targets={targets_path}'))
    if not multihost.is_writer():
      return
    interruptible.raise_if_signalled()
    lines = [score_lib.format_line(*r) for r in results]
    with workdir_lib.writing(output or '<stdout>'):
      if output:
        textio.write_lines_atomic(output, lines, overwrite=True)
      else:
        sys.stdout.write(''.join(line + '\n' for line in lines))
        sys.stdout.flush()


def scored(workdir: str, overrides: Overrides, checkpoint: Optional[str], sources: Sequence[str],
           targets: Sequence[str], names: Tuple[str, str]) -> List[Tuple[float, int]]:
  """[(log P(target | source), target tokens with EOS)] of each pair, as `--mode=score`
  writes them (`names`: how errors call the two inputs)."""
  config, inference = load(workdir, checkpoint, overrides)
  tok = vocabularies.load(workdir, config)
  net = variant.from_config(config)
  pairs = score_lib.encode_pairs(sources, targets, vocab_pair.side(tok, 'source').encode,
                                 vocab_pair.side(tok, 'target').encode, net.cfg.max_len, names)
  return score_lib.score_pairs(net, inference.params, pairs, rows=config.decode_batch_sentences)
