"""What a finished training run tells its user: the averaged model's BLEU (a treebank's: F1),
examples, paths.

`finish(config, workdir)` runs after the last training step when `config.final_eval_split` is
set (the embedded default sets 'test'): it averages the last `config.average_last` training
checkpoints (§6.1), evaluates the average on that split (teacher-forced loss, then beam
search and sacreBLEU or EVALB, exactly as `--mode=eval` does) and prints a short report: BLEU
or F1, three translations (trees) beside their references, and where the checkpoints, metrics
and plots are.
A rerun on a finished workdir reuses the averaged checkpoint and the eval JSON already written.
"""

import json
from typing import Any, Dict, Optional

import ml_collections
from absl import logging
from etils import epath

from t2t_jax.inference import averaging, evaluate
from t2t_jax.runtime import interruptible, multihost
from t2t_jax.storage import layout, paths, textio
from t2t_jax.training import train


def _existing_result(workdir: str, split: str, step: int,
                     description: str) -> Optional[Dict[str, Any]]:
  """An eval JSON of this split and step made from the same checkpoint, if one exists."""
  workdir = layout.of(workdir)
  paths.forget(workdir.root)  # list what is there now, not what this process saw before
  for path in sorted(epath.Path(workdir).glob(workdir.eval_result_pattern(split, step)),
                     key=str):
    try:
      result = json.loads(path.read_text(encoding='utf-8'))
      reusable = result.get('checkpoint') == description and 'examples' in result
    except (OSError, ValueError, AttributeError) as e:  # garbled: not a JSON object
      logging.warning('%s does not read (%s); evaluating again (a new result file is written '
                      'beside it)', path, textio.one_line(e))
      continue
    if reusable:
      return result
  return None


def train_and_finish(config: ml_collections.ConfigDict, workdir: str,
                     resolved: bool = False) -> Optional[Dict[str, Any]]:
  """`--mode=train`: trains (`train.train`), then, unless a stop request ended the run early,
  averages, evaluates and prints the report (`finish`), whose result it returns (None: stopped
  early, or no final evaluation). `resolved`: `config` is the canonical form already (main.py's
  `resolution.resolve`), handed down as it is."""
  workdir = layout.of(workdir)  # absolute once, for every module below
  if not resolved:  # canonical, paths absolute: what the run records
    config = train.resolve_run(config, workdir)
  if 'stopped_at' not in train.train(config, workdir, resolved=True):
    # Past training's own stop handling: a signal now interrupts the final evaluation in one
    # line that says what is kept (cli.exit_interrupted), not a silent exit status 143.
    interruptible.raise_on_signals()
    try:
      return finish(config, workdir)
    except KeyboardInterrupt as e:
      e.kept = ('training is finished and its checkpoints are kept; the final evaluation was '
                'not done: the same command runs it')
      raise
  return None


def finish(config: ml_collections.ConfigDict, workdir: str) -> Optional[Dict[str, Any]]:
  """Averages, evaluates on `config.final_eval_split` and prints the report (see module doc).

  Returns the eval result (as written to `<workdir>/eval_<split>_<step>.json`), or None when
  `final_eval_split` is ''. On several processes every process takes part (the averaged
  checkpoint is one collective save, decoding is shared) and process 0 prints the report.
  """
  split = config.final_eval_split
  if not split:
    return None
  workdir = layout.of(workdir)
  available = averaging.training_steps(workdir)
  num = min(config.average_last, len(available))
  if num < config.average_last:
    logging.warning('averaging the last %d checkpoints: only %d exist', num, len(available))
  averaged = averaging.average_checkpoints(workdir, num)
  description = f'averaged steps {",".join(map(str, averaged.steps))}'
  result = _existing_result(workdir, split, averaged.steps[-1], description)
  if result is None:
    result = evaluate.evaluate(config, workdir, split, checkpoint=averaged.path,
                               show_progress=False)
  if multihost.is_writer():
    print(report(result, workdir, averaged.path), flush=True)
  return result


def _rule(result: Dict[str, Any]) -> str:
  """', transformers' length rule' where the search was not the paper's (`length_rules`)."""
  rule = result.get('length_penalty_rule', 'gnmt')
  return '' if rule == 'gnmt' else f", {rule}' length rule"


def report(result: Dict[str, Any], workdir: str, averaged_path: str) -> str:
  """The end-of-run text: score, three examples beside their references, where things are."""
  lines = [
      '',
      f'Training finished. {result["checkpoint"]} -> {result["split"]} split '
      f'({result["sentences"]} sentences, beam {result["beam_size"]}, alpha '
      f'{result["length_penalty_alpha"]}{_rule(result)}):',
      f'  {evaluate.score_line(result)}, perplexity {result["perplexity"]:.2f}',
      '',
  ]
  for i, example in enumerate(result.get('examples', []), 1):
    lines += [f'  [{i}] source:    {example["source"]}',
              f'      reference: {example["reference"]}',
              f'      model:     {example["hypothesis"]}']
  workdir = layout.of(workdir)
  lines += [
      '',
      f'  checkpoints: {workdir.checkpoints} '
      f'(averaged: {averaged_path})',
      f'  metrics:     {workdir.metrics} and {workdir.tensorboard}',
      f'  plots:       {workdir.plots}',
      f'  eval result: {result.get("path", "")}',
      # A treebank run (scored by F1) decodes sentences into trees: it parses.
      f'  {"parse:    " if "f1" in result else "translate:"}   python main.py --mode=decode '
      f'--workdir={workdir} --input=FILE --output=FILE',
  ]
  return '\n'.join(lines)
