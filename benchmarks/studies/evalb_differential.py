"""Differential check of t2t_jax.parsing.evalb against the C EVALB on random trees.

Compiles the given `evalb.c`, writes random gold trees and perturbed test trees (relabelled,
retagged, reworded, flattened, regrouped, shortened, reshaped, blank), runs both scorers under
several parameter files and compares: when `evalb` finishes, its standard output and its error
lines must equal `EvalbResult.report()` and `.errors` character for character; when it gives
up (MAX_ERROR), `score_lines` must raise EvalbError at the same tree. Fetches nothing.

  python -m benchmarks.studies.evalb_differential PATH/evalb.c [--runs 400] [--trees 20] [--seed 0]
      [--out FILE]

One JSON line (benchmarks/shared/harness.py's Emitter): runs, sentence pairs, runs where EVALB gave
up, and the mismatches (0 means every figure equal; the exit status is then 0, else 1).
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from benchmarks.shared import harness  # noqa: E402
from t2t_jax.parsing import evalb  # noqa: E402

_LABELS = ['S', 'S', 'NP', 'NP', 'NP', 'VP', 'VP', 'PP', 'SBAR', 'ADJP', 'ADVP', 'PRT', 'QP',
           'NX', 'WHNP', 'NP-SBJ', 'NP-SBJ-1', 'NP=2', 'S-TPC-2', 'PP-LOC', 'TOP', 'S1', '-NONE-',
           '-LRB-', 'ADVP-TMP']
_TAGS = ['DT', 'NN', 'NN', 'NNS', 'VBZ', 'VBD', 'IN', 'JJ', 'RB', 'PRP', 'CC', 'CD', 'POS',
         'TO', 'MD', 'RP', ',', '.', ':', '``', "''", '-NONE-', '-NONE-', '?', '!', 'PRT', 'NP']
_WORDS = ['the', 'dog', 'cat', 'saw', 'a', 'man', 'with', 'telescope', 'and', 'ran', 'up',
          'quickly', 'it', 'two', 'house', 'dogs', 'NP', 'S']
_SPECIAL = {',': [','], '.': ['.', '?', '!'], ':': [':', ';', '--'], '``': ['``', "'", '"'],
            "''": ["''", "'", '"'], '-NONE-': ['*', '*T*-1', '0', '*U*'],
            'POS': ["'s", "'"], '?': ['?'], '!': ['!']}
_QUOTE_WORDS = ["'", '"', '/']
_QUOTE_TAGS = ['``', "''", 'POS', 'NN', 'CD', 'VBZ', ':']  # new.prm's QUOTE_LABELs

# Parameter files: EVALB's two standard ones, plus settings that reach the other rules
# (unlabelled, EQ_LABEL pairs that are not an equivalence, deleted bracket labels with an
# EQ_LABEL partner, EQ_WORD, a small cutoff, DELETE_LABEL_FOR_LENGTH of punctuation).
_EXTRA_PRMS = {
    'unlabeled.prm': 'LABELED 0\nMAX_ERROR 1000\nCUTOFF_LEN 6\nDELETE_LABEL TOP\n'
                     'DELETE_LABEL -NONE-\nDELETE_LABEL ,\nDELETE_LABEL .\n'
                     'DELETE_LABEL_FOR_LENGTH -NONE-\nDELETE_LABEL_FOR_LENGTH ,\n',
    'chain.prm': '# not an equivalence: NP = QP, QP = NX, NP != NX\nMAX_ERROR 30\n'
                 'CUTOFF_LEN 8\nLABELED 1\nDELETE_LABEL -NONE-\nDELETE_LABEL :\n'
                 'DELETE_LABEL WHNP\nDELETE_LABEL ``\nEQ_LABEL NP QP\nEQ_LABEL QP NX\n'
                 'EQ_LABEL WHNP PP\nEQ_LABEL NN NNS\nEQ_WORD dog dogs\nEQ_WORD a the\n'
                 'QUOTE_LABEL ``\nQUOTE_LABEL NN\nQUOTE_LABEL POS\nQUOTE_LABEL :\n',
}


# Partners under the EQ_LABEL / EQ_WORD lines of the parameter files, for edits that keep
# a label, tag or word equal in EVALB's eyes.
_EQ = {'ADVP': 'PRT', 'PRT': 'ADVP', 'NN': 'NNS', 'NNS': 'NN', 'dog': 'dogs', 'dogs': 'dog',
       'a': 'the', 'the': 'a', 'NP': 'QP', 'QP': 'NX', 'NX': 'QP'}


def _unary_label(rng: random.Random, label: str) -> str:
  """The label itself, or one of chain.prm's NP = QP = NX chain (the greedy order matters)."""
  return label if rng.random() < 0.5 else rng.choice(['NP', 'QP', 'NX'])


def _preterminal(rng: random.Random) -> list:
  tag = rng.choice(_TAGS)
  if tag in _SPECIAL and rng.random() < 0.8:
    word = rng.choice(_SPECIAL[tag])
  elif rng.random() < (0.4 if tag in _QUOTE_TAGS else 0.05):
    word = rng.choice(_QUOTE_WORDS)
  else:
    word = rng.choice(_WORDS) if rng.random() > 0.02 else ''  # `(NN )`: a word ''
  return [tag, word]


def random_tree(rng: random.Random, depth: int = 0) -> list:
  """A node: [label, child, ...] for a bracket, [tag, word] (a str) for a preterminal."""
  if depth >= 5 or (depth > 0 and rng.random() < 0.35 + 0.1 * depth):
    return _preterminal(rng)
  label = rng.choice(_LABELS)
  if rng.random() < 0.05:
    return [label]  # `(X)`: a bracket over nothing
  node = [label] + [random_tree(rng, depth + 1) for _ in range(rng.choice([1, 1, 2, 2, 3, 4]))]
  if rng.random() < 0.15:
    node = [_unary_label(rng, label), node]  # a unary chain: (NP (NP ...)), (NP (QP ...))
  return node


def _is_preterminal(node: list) -> bool:
  return len(node) == 2 and isinstance(node[1], str)


def _nodes(node: list, out: list) -> list:
  out.append(node)
  if not _is_preterminal(node):
    for child in node[1:]:
      _nodes(child, out)
  return out


def _leaves(node: list) -> list:
  return [n for n in _nodes(node, []) if _is_preterminal(n)]


def perturb(rng: random.Random, tree: list) -> list:
  """A copy of `tree` with 0 to 3 random edits, as a parser's mistakes would look."""
  tree = json.loads(json.dumps(tree))
  for _ in range(rng.choice([0, 1, 1, 2, 3])):
    brackets = [n for n in _nodes(tree, []) if not _is_preterminal(n)]
    leaves = _leaves(tree)
    edit = rng.randrange(9)
    if edit == 0 and brackets:
      node = rng.choice(brackets)
      node[0] = _unary_label(rng, node[0]) if node[0] in _EQ else rng.choice(_LABELS)
    elif edit == 1 and leaves:
      leaf = rng.choice(leaves)
      leaf[0] = _EQ.get(leaf[0]) if leaf[0] in _EQ and rng.random() < 0.5 else rng.choice(_TAGS)
    elif edit == 2 and leaves and rng.random() < 0.3:
      leaf = rng.choice(leaves)
      leaf[1] = _EQ.get(leaf[1]) if leaf[1] in _EQ and rng.random() < 0.7 else rng.choice(_WORDS)
    elif edit == 3 and len(brackets) > 1:  # flatten a bracket into its parent
      parent = rng.choice([b for b in brackets if any(
          not _is_preterminal(c) for c in b[1:])] or brackets)
      kids = [i for i, c in enumerate(parent) if i and not _is_preterminal(c) and len(c) > 1]
      if kids:
        i = rng.choice(kids)
        parent[i:i + 1] = parent[i][1:]
    elif edit == 4 and brackets:  # group some children under a new bracket
      node = rng.choice(brackets)
      if len(node) > 2:
        i = rng.randrange(1, len(node))
        j = rng.randrange(i + 1, len(node) + 1)
        node[i:j] = [[rng.choice(_LABELS)] + node[i:j]]
    elif edit == 5 and brackets and rng.random() < 0.3:  # drop a word
      node = rng.choice(brackets)
      if len(node) > 2:
        del node[rng.randrange(1, len(node))]
    elif edit == 6:  # another shape over the same preterminals
      tree = _reshape(rng, _leaves(tree), tree[0] if not _is_preterminal(tree) else 'S')
    elif edit == 7 and brackets:
      node = rng.choice(brackets)
      node[:] = [_unary_label(rng, node[0]), list(node)]  # a unary over an existing bracket
    elif edit == 8:  # a quote tagged as punctuation on one side only (new.prm's repair)
      quotes = [leaf for leaf in leaves if leaf[1] in _QUOTE_WORDS]
      if quotes:
        rng.choice(quotes)[0] = rng.choice(_QUOTE_TAGS)
  return tree


def _reshape(rng: random.Random, leaves: list, label: str) -> list:
  items = list(leaves)
  while len(items) > 1 and rng.random() < 0.9:
    i = rng.randrange(len(items))
    j = rng.randrange(i + 1, min(len(items), i + 4) + 1)
    items[i:j] = [[rng.choice(_LABELS)] + items[i:j]]
  return [label] + items


def write_tree(rng: random.Random, node: list) -> str:
  """Brackets with random but legal spacing: a preterminal needs a space after its tag."""
  def space(required: bool) -> str:
    return rng.choice([' ', ' ', '  ', '\t'] + ([] if required else ['', '']))
  if _is_preterminal(node):
    return f'({node[0]}{space(True)}{node[1]})'
  if len(node) == 1:
    return f'({node[0]})'
  inner = ''.join(space(False) + write_tree(rng, c) for c in node[1:])
  return f'({node[0]}{inner}{space(False)})'


def random_pair(rng: random.Random) -> tuple[str, str]:
  """One gold line and one test line."""
  gold = random_tree(rng)
  if _is_preterminal(gold) or not _leaves(gold):
    gold = ['S', gold, ['NN', 'dog']]
  if rng.random() < 0.25:  # many quotes, some tagged as deleted punctuation on one side
    for leaf in _leaves(gold):
      if rng.random() < 0.3:
        leaf[:] = [rng.choice(_QUOTE_TAGS), rng.choice(_QUOTE_WORDS)]
  root = rng.choice(['TOP', 'TOP', '', 'S1', None])
  test = perturb(rng, gold) if rng.random() < 0.93 else None
  gold_line = write_tree(rng, [root, gold] if root is not None else gold)
  if test is None:
    test_line = rng.choice(['', '(TOP (. .))', '(S (-NONE- *))', '(X)'])
  else:
    test_root = root if rng.random() < 0.8 else rng.choice(['TOP', '', 'S1', None])
    test_line = write_tree(rng, [test_root, test] if test_root is not None else test)
  if rng.random() < 0.03:
    gold_line += ' (S (NN dog))'  # two trees on a line: one sentence for EVALB
    test_line += ' (S (NN dog))'
  return gold_line + rng.choice(['', ' ', '\r']), test_line


def compile_evalb(source: str, folder: str) -> str:
  """`cc -o evalb evalb.c` in `folder`; the path of the program."""
  binary = os.path.join(folder, 'evalb')
  subprocess.run(['cc', '-O1', '-w', '-o', binary, source], check=True)
  return binary


def compare_run(binary: str, prm: str, gold: list[str], test: list[str],
                folder: str) -> tuple[Optional[str], bool]:
  """(None if both scorers agree on these trees under `prm`, else what differs; whether
  EVALB gave up)."""
  paths = [os.path.join(folder, name) for name in ('gold.txt', 'test.txt')]
  for path, lines in zip(paths, (gold, test)):
    with open(path, 'w') as f:
      f.write(''.join(line + '\n' for line in lines))
  c = subprocess.run([binary, '-p', prm, *paths], capture_output=True, text=True)
  try:
    ours = evalb.score_files(*paths, evalb.read_params(prm))
  except evalb.EvalbError as e:
    gave_up = re.search(r'tree (\d+): .*MAX_ERROR', str(e))
    c_last = c.stderr.splitlines()[-1].split(' : ')[0] if c.stderr else None
    if c.returncode == 1 and gave_up and gave_up.group(1) == c_last:
      return None, True
    return f'python raised {e}; C rc={c.returncode}, last error line {c_last}', False
  if c.returncode != 0:
    return f'C exited {c.returncode} but python scored: {c.stderr[-200:]}', True
  if ours.report() != c.stdout:
    return 'stdout differs:\n' + _first_difference(ours.report(), c.stdout), False
  if ''.join(e + '\n' for e in ours.errors) != c.stderr:
    return f'stderr differs: {ours.errors} vs {c.stderr!r}', False
  return None, False


def _first_difference(ours: str, theirs: str) -> str:
  for a, b in zip(ours.splitlines(), theirs.splitlines()):
    if a != b:
      return f'python: {a!r}\nC:      {b!r}'
  return 'one output is longer'


def prm_files(evalb_dir: str, folder: str) -> list[str]:
  """COLLINS.prm and new.prm where they lie beside evalb.c, plus the extra settings."""
  paths = [os.path.join(evalb_dir, name) for name in ('COLLINS.prm', 'new.prm')]
  paths = [p for p in paths if os.path.exists(p)]
  for name, text in _EXTRA_PRMS.items():
    paths.append(os.path.join(folder, name))
    with open(paths[-1], 'w') as f:
      f.write(text)
  return paths


def differential(source: str, runs: int, trees: int, seed: int) -> dict:
  """Runs `runs` random corpora of `trees` sentence pairs, cycling over the .prm files."""
  rng = random.Random(seed)
  with tempfile.TemporaryDirectory() as folder:
    binary = compile_evalb(source, folder)
    prms = prm_files(os.path.dirname(os.path.abspath(source)), folder)
    mismatches, gave_up = [], 0
    for run in range(runs):
      pairs = [random_pair(rng) for _ in range(trees)]
      gold, test = [g for g, _ in pairs], [t for _, t in pairs]
      if run % 10 == 9:
        test = test[1:] + test[:1]  # misaligned files: mostly errors, EVALB may give up
      prm = prms[run % len(prms)]
      problem, stopped = compare_run(binary, prm, gold, test, folder)
      gave_up += stopped
      if problem:
        mismatches.append(f'run {run} ({os.path.basename(prm)}): {problem}')
  return dict(name='evalb_differential', runs=runs, sentence_pairs=runs * trees,
              prm_files=[os.path.basename(p) for p in prms], evalb_gave_up=gave_up,
              mismatches=len(mismatches), first_mismatches=mismatches[:3])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('evalb_c', help='path of an evalb.c (COLLINS.prm and new.prm beside it '
                      'are used too)')
  parser.add_argument('--runs', type=int, default=400)
  parser.add_argument('--trees', type=int, default=20)
  parser.add_argument('--seed', type=int, default=0)
  harness.add_out_argument(parser)
  args = parser.parse_args()
  result = differential(args.evalb_c, args.runs, args.trees, args.seed)
  harness.Emitter(args.out)(result)
  sys.exit(1 if result['mismatches'] else 0)


if __name__ == '__main__':
  main()
