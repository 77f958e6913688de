"""Target prefixes (`--config.target_prefix_file`; CTranslate2's `target_prefix`, fairseq's
`--prefix-size`): a translation that must start with given words, for interactive MT and
terminology. Each prefix is encoded with the target vocabulary (no EOS) and forced, token by
token, at the start of every hypothesis of its sentence (`search.allowed_logits`); the search
goes on from there, and the prefix's tokens count in the hypothesis's score.

Also the other per-row arrays a search takes beside its inputs (`extras`): the PRNG key of
each sampled row.
"""

from typing import Dict, List, Optional, Sequence

import jax
import numpy as np

from t2t_jax.data import vocab_pair

# Prefix arrays are padded to one of these widths (one compilation per width used).
WIDTHS = (8, 16, 32, 64, 128, 256)


class PrefixError(ValueError):
  """A prefix that cannot be used; the message names its line."""


def encode(prefixes: Optional[Sequence[str]], encoded_sources: Dict[int, List[int]], tokenizer,
           max_decode_extra: int, line_numbers: Optional[Sequence[int]] = None
           ) -> Optional[Dict[int, List[int]]]:
  """{sentence index: prefix ids} of the non-empty `prefixes` (one per sentence), or None when
  there are none. A prefix that leaves no room for EOS within its sentence's longest output
  (its source tokens with EOS + `max_decode_extra`) is refused, naming its line."""
  if prefixes is None:
    return None
  out = {}
  target = vocab_pair.side(tokenizer, 'target')
  forced = getattr(tokenizer, 'forced', [])  # a language token: every sentence starts with it
  for i, text in enumerate(prefixes):
    if (not text.strip() and not forced) or i not in encoded_sources:
      continue
    ids = list(target.encode(text)) if text.strip() else list(forced)  # target text
    room = len(encoded_sources[i]) + max_decode_extra - 1
    if len(ids) > room:
      line = line_numbers[i] if line_numbers is not None else i + 1
      raise PrefixError(f'target prefix line {line} has {len(ids)} tokens; at most {room} fit '
                        'in its translation (its source length + max_decode_extra, less EOS)')
    out[i] = ids
  return out or None


@jax.jit
def _row_keys(seed, lines, samples):
  """`fold_in(fold_in(PRNGKey(seed), line), sample)` of every row at once: one dispatch per
  batch, not two per row."""
  base = jax.random.PRNGKey(seed)
  return jax.vmap(lambda l, s: jax.random.fold_in(jax.random.fold_in(base, l), s))(
      lines, samples)


def width(length: int) -> int:
  return next((w for w in WIDTHS if length <= w), -(-length // 256) * 256)


def extras(rows: Sequence[int], count: int, copies: int,
           prefix_ids: Optional[Dict[int, List[int]]], seed: int,
           line_numbers: Sequence[int]) -> Dict[str, np.ndarray]:
  """The per-row arrays of one batch whose first rows are `rows` (row = sentence * copies +
  sample) and `count` rows in all: 'prefix' `[count, width]` int32 0-padded (when any prefix),
  'row_keys' `[count, 2]` uint32, `fold_in(fold_in(PRNGKey(seed), line), sample)` with `line`
  the sentence's 1-based line number in the whole input."""
  out: Dict[str, np.ndarray] = {}
  lines = np.zeros((count,), np.uint32)
  samples = np.zeros((count,), np.uint32)
  for r, row in enumerate(rows):
    lines[r], samples[r] = line_numbers[row // copies], row % copies
  out['row_keys'] = np.asarray(_row_keys(seed, lines, samples))
  if prefix_ids:
    longest = max((len(prefix_ids.get(row // copies, ())) for row in rows), default=0)
    prefix = np.zeros((count, width(max(longest, 1))), np.int32)
    for r, row in enumerate(rows):
      ids = prefix_ids.get(row // copies, [])
      prefix[r, :len(ids)] = ids
    out['prefix'] = prefix
  return out
