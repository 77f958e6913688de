"""A user's tour of four surfaces of main.py, judged only against README.md and docs/.

Run from the repository root:

    python tours/workdir_keys_streams_tries.py --scratch=/tmp/tour_scratch --out=/tmp/tour.jsonl

(--surfaces=workdir,keys,... runs a subset, in this order; keys and files use the runs and
inputs the workdir surface leaves, so they go with it.)

It trains tiny runs (d_model 32, 1 layer, 400-piece vocabulary, 10 steps) on a small local
corpus cut from the bundled Bible corpus (t2t_jax/data/bible_en_es/*.gz) inside --scratch, then
tries real `python main.py ...` commands, one verdict per try, grouped by surface:

1. workdir  - a run needs nothing outside its workdir once it has a checkpoint: runs trained
              with --config.vocab_model, a --config.model factory file, an optimizer factory
              file and --config.init_from fine-tunes; then those inputs (vocab model, factory
              file, parent run, corpus, the workdir itself) are moved, renamed, deleted or
              edited, and every mode is run: decode, eval, score, info, export, average,
              attention, resume, fine-tune again (docs/modes.md "A run's config, resolved once").
2. keys     - every key is checked against the mode and decode strategy it is given to
              (docs/modes.md "Which key does what, where"): keys where they do nothing,
              strategy-inert keys, model keys at decode, training keys at eval, export with
              decoding options, bad values, resume with changed keys, keep_best without eval.
3. streams  - --input=- / FILE / named pipes for decode and score: non-UTF-8 bytes, BOM, empty
              lines, CRLF, short/long target_prefix_file, SIGINT/SIGTERM during a streaming
              decode into --output and into stdout and rerunning; score with stdin.
4. files    - outputs that exist, read-only places (a read-only bind mount: the tour runs as
              root), SIGTERM/SIGINT during training and during its final evaluation
              (final_eval_split=test), then rerun.

Verdicts, one per try:
  OK        did what a careful product should: ran correctly, or refused in ONE line
            `error: ...` naming the right key/file/flag, no traceback
  WRONG     accepted but not what was asked, refused though valid, or a false message
  TRACEBACK a Python traceback (or a "Fatal Python error" dump with an abort) reached the user
  UNCLEAR   refused, but not in one `error:` line, or the line does not name the culprit
  HANG      no answer within its time limit
  LOST      a file that existed before is gone or silently changed

Each JSON line of --out: surface, name, command (as run), expected, observed (exit status and
the last stderr line, trimmed), verdict (and a note where the check needs one). The verdict is
computed by the check written beside each try; it encodes what the docs promise.

Uses only subprocess, os, shutil, signal and json (argv is read from /proc/self/cmdline,
pauses are waits on child processes), and sys to put the repository root on sys.path; it
imports nothing from t2t_jax, and of tours/ only its own modules: this runner over one module a
surface (workdir_surface_tries.py, keys_surface_tries.py, streams_surface_tries.py,
files_surface_tries.py), which import user_tour_fixtures.py (the corpus, inputs and factory
files) and user_tour_kit.py (running, judging and recording a try), never each other.
"""

import json
import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from tours.files_surface_tries import files_surface  # noqa: E402
from tours.keys_surface_tries import keys_surface  # noqa: E402
from tours.streams_surface_tries import streams_surface  # noqa: E402
from tours.user_tour_fixtures import make_corpus, make_inputs  # noqa: E402
from tours.user_tour_kit import Tour  # noqa: E402
from tours.workdir_surface_tries import workdir_surface  # noqa: E402

# In the order they run: keys and files use runs/base, inputs/ and in/tgt_two.txt, which the
# workdir surface makes.
SURFACES = {'workdir': workdir_surface, 'keys': keys_surface, 'streams': streams_surface,
            'files': files_surface}
NEEDS = {'keys': 'workdir', 'files': 'workdir'}


def _argv():
  with open('/proc/self/cmdline', 'rb') as f:
    parts = f.read().split(b'\0')
  parts = [p.decode() for p in parts if p]
  for i, p in enumerate(parts):
    if p.endswith('workdir_keys_streams_tries.py'):
      return parts[i + 1:]
  return parts[1:]


def parse_args():
  scratch, out = None, None
  for a in _argv():
    if a.startswith('--scratch='):
      scratch = a.split('=', 1)[1]
    elif a.startswith('--out='):
      out = a.split('=', 1)[1]
  if not scratch or not out:
    raise SystemExit('usage: python tours/workdir_keys_streams_tries.py --scratch=DIR --out=FILE.jsonl'
                     ' [--surfaces=workdir,keys,streams,files]')
  return os.path.abspath(scratch), os.path.abspath(out)


def chosen_surfaces():
  """--surfaces=workdir,keys,...: those surfaces, in the tour's order; all four without it."""
  names = list(SURFACES)
  for a in _argv():
    if a.startswith('--surfaces='):
      names = a.split('=', 1)[1].split(',')
  for name in names:
    if name not in SURFACES:
      raise SystemExit(f'--surfaces: no surface {name!r}; the surfaces: {",".join(SURFACES)}')
    if NEEDS.get(name, name) not in names:
      raise SystemExit(f'--surfaces: {name} uses the runs the {NEEDS[name]} surface trains; name both')
  return [name for name in SURFACES if name in names]


def main():
  # A tour started in the background (nohup ... &) inherits SIGINT ignored, and so would every
  # main.py it starts; give the children a normal Ctrl-C.
  signal.signal(signal.SIGINT, signal.default_int_handler)
  scratch, out = parse_args()
  surfaces = chosen_surfaces()
  os.makedirs(scratch, exist_ok=True)
  tour = Tour(scratch, out)
  os.makedirs(tour.p('out'), exist_ok=True)
  make_corpus(tour)
  make_inputs(tour)
  for name in surfaces:
    SURFACES[name](tour)
  counts = {}
  for r in tour.results:
    counts.setdefault(r['surface'], {}).setdefault(r['verdict'], 0)
    counts[r['surface']][r['verdict']] += 1
  print(json.dumps(counts, indent=1))


if __name__ == '__main__':
  main()
