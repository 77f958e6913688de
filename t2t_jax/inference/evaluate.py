"""Evaluation on a split: teacher-forced loss, perplexity, accuracy, then decoded BLEU (§6.1),
or for a treebank the EVALB F1 of the decoded trees (§6.3)."""

import json
import os
from typing import Any, Dict, Optional, Sequence, Union

import jax
import ml_collections
import numpy as np
from absl import logging
from etils import epath

from t2t_jax.data import tasks
from t2t_jax.inference import bleu, translate
from t2t_jax.inference.bleu import chrf_ter
from t2t_jax.model import losses, variant
from t2t_jax.runtime import meshes, multihost, parallel
from t2t_jax.storage import layout, textio
from t2t_jax.storage import workdir as workdir_lib


def summarize(sums: Dict[str, Any]) -> Dict[str, float]:
  """Per-token loss, nll, perplexity and accuracy from global metric sums, and `aux_<name>`
  for each auxiliary loss the model sows (`loss` is the cross entropy alone)."""
  sums = jax.device_get(sums)
  weight = max(float(sums['weight']), 1.0)
  nll = float(sums['nll']) / weight
  result = {'loss': float(sums['loss']) / weight, 'nll': nll,
            'perplexity': float(np.exp(min(nll, 50.0))),
            'accuracy': float(sums['correct']) / weight, 'tokens': float(sums['weight'])}
  # Auxiliary losses a model sows (`parallel.metric_sums`): token-weighted means, by name.
  result.update({k: float(v) / weight for k, v in sorted(sums.items())
                 if k.startswith(losses.AUX_PREFIX)})
  return result


def evaluate_batches(eval_step, params, batches, mesh) -> Dict[str, float]:
  """Teacher-forced metrics over `batches` (summed over all devices and batches).

  The batches' programs are independent; on a CPU mesh each is waited for before the next
  is dispatched (`parallel.programs_one_at_a_time`: 2 of 6 stress runs of 10 x 1000 batches
  on 8 CPU devices aborted in XLA's collective rendezvous without the wait, 0 of 12 with it)."""
  one_at_a_time = parallel.programs_one_at_a_time(mesh)
  total = None
  for batch in batches:
    metrics = eval_step(params, parallel.shard_batch(batch, mesh))
    if one_at_a_time:
      jax.block_until_ready(metrics)
    total = parallel.add_metrics(total, metrics)
  return summarize(total)


def decoded_bleu_of(hypotheses: Sequence[str], references: Sequence[str],
                    target_lang: str) -> Dict[str, Any]:
  """sacreBLEU (detokenized) and paper-style tokenized BLEU of decoded `hypotheses`."""
  detok = bleu.corpus_bleu(hypotheses, references)
  tokenized = bleu.tokenized_bleu(hypotheses, references, lang=target_lang)
  return {'bleu': detok.score, 'bleu_signature': detok.signature,
          'tokenized_bleu': tokenized.score, 'tokenized_bleu_signature': tokenized.signature,
          'hypotheses': list(hypotheses)}


def decoded_scores(config: ml_collections.ConfigDict, pairs: Sequence[Dict[str, str]],
                   hypotheses: Sequence[str], tokenizer: Any) -> Dict[str, Any]:
  """The scores of decoded `hypotheses` of `pairs`: the task's own (a treebank: the EVALB
  scores of their trees, `parsing.parse.parse_scores`, 'hypotheses' and 'references' then
  being trees), otherwise `decoded_bleu_of`."""
  task = tasks.get(config.dataset)  # a treebank: t2t_jax/parsing/task.py
  if task is not None:
    return task.decoded_scores(pairs, hypotheses, tokenizer)
  return decoded_bleu_of(hypotheses, [p['target'] for p in pairs], config.target_lang)


def score_line(result: Dict[str, Any]) -> str:
  """'F1 93.10 (EVALB ...)' or 'BLEU 24.90 (sacreBLEU ...)', with the secondary figures."""
  if 'f1' in result:
    return (f'F1 {result["f1"]:.2f} (EVALB COLLINS.prm: precision {result["precision"]:.2f}, '
            f'recall {result["recall"]:.2f}, complete match {result["complete_match"]:.2f}, '
            f'tagging accuracy {result["tagging_accuracy"]:.2f}, '
            f'{result["error_sentences"]} error sentences)')
  more = (f', chrF {result["chrf"]:.2f}, TER {result["ter"]:.2f}' if 'chrf' in result
          else '')
  return (f'BLEU {result["bleu"]:.2f} (sacreBLEU {result["bleu_signature"]}), tokenized BLEU '
          f'{result["tokenized_bleu"]:.2f}{more}')


def examples(pairs: Sequence[Dict[str, str]], hypotheses: Sequence[str],
             count: int = 3, references: Optional[Sequence[str]] = None) -> list:
  """The first `count` non-empty pairs as {'source', 'reference', 'hypothesis'} dicts; the
  reference is the pair's target unless `references` are given."""
  chosen = [i for i, p in enumerate(pairs) if p['source'].strip()][:count]
  return [{'source': pairs[i]['source'],
           'reference': references[i] if references is not None else pairs[i]['target'],
           'hypothesis': hypotheses[i]} for i in chosen]


def write_result(workdir: str, split: str, step: Union[int, str], result: Dict[str, Any],
                 texts: Optional[Dict[str, Sequence[str]]] = None) -> str:
  """Writes `eval_<split>_<step>.json` atomically; an existing file is kept (suffix .1, .2...).
  `step`: the checkpoint's label (`InferenceParams.label`: `best_400`, `ema_400` name the
  best kept checkpoint and the moving average apart from step 400's own).

  `texts`: {file name: lines} written first into the folder beside it
  (`layout.Workdir.eval_texts`: `hypotheses.txt`, `references.txt`, `sentences.tsv`), each
  file's path, relative to the JSON's folder, recorded in it as `<stem>_path`
  (`hypotheses_path`, ...), which `compare.py` reads."""
  workdir = layout.of(workdir)
  for n in range(1000):
    path = workdir.eval_result(split, step, n)
    if epath.Path(path).exists():
      continue
    record = dict(result)
    for name, lines in (texts or {}).items():
      file = os.path.join(workdir.eval_texts(path), name)
      with workdir_lib.writing(file):  # the folder belongs to this JSON, not yet written
        textio.write_lines_atomic(file, lines, overwrite=True)
      # Relative to the JSON's folder: a moved workdir keeps its evaluations readable.
      record[name.split('.')[0] + '_path'] = os.path.relpath(file, os.path.dirname(path))
    text = json.dumps(record, indent=2, sort_keys=True) + '\n'
    try:
      with workdir_lib.writing(path):  # a full disk: one line (a read-only one is refused first)
        textio.write_text_atomic(path, text)
      return path
    except FileExistsError:
      continue
  raise FileExistsError(f'{workdir.eval_result(split, step)} and 999 numbered variants exist')


def _texts(config: ml_collections.ConfigDict, result: Dict[str, Any],
           hypotheses: Sequence[str], references: Sequence[str]) -> Dict[str, Sequence[str]]:
  """The files beside the eval JSON (`write_result`); for translations, chrF and TER added to
  `result`, and with `eval_sentence_scores` each sentence's BLEU and chrF."""
  texts = {'hypotheses.txt': hypotheses, 'references.txt': references}
  if 'bleu' not in result:  # a treebank: its trees, scored by EVALB
    return texts
  result.update(chrf_ter.corpus_chrf_ter(hypotheses, references))
  if getattr(config, 'eval_sentence_scores', False):
    rows, signatures = chrf_ter.sentence_scores(hypotheses, references)
    result['sentence_signatures'] = signatures
    texts['sentences.tsv'] = ['line\tbleu\tchrf'] + [
        f'{i}\t{b:.4f}\t{c:.4f}' for i, (b, c) in enumerate(rows, 1)]
  return texts


def evaluate(config: ml_collections.ConfigDict, workdir: str, split: str = 'dev',
             checkpoint: Optional[str] = None, show_progress: bool = True,
             inference: Any = None) -> Dict[str, Any]:
  """Teacher-forced metrics and decoded BLEU (a treebank: F1) of the workdir's model on
  `split`.

  Uses `inference` (`checkpoint_choice.InferenceParams`) when given, else loads the averaged
  checkpoint when one exists (or `checkpoint`: a step or a path). Writes
  `<workdir>/eval_<split>_<step>.json` and returns the same dict. On several processes each
  evaluates its share of the batches and sentences, every process returns the same result,
  and process 0 alone writes the file.
  """
  from t2t_jax.inference import checkpoint_choice
  from t2t_jax.data import corpora, pipeline, vocabularies
  if inference is None:
    inference = checkpoint_choice.load_inference_params(workdir, checkpoint)
  tok = vocabularies.load(workdir, config)  # one shared, or a VocabPair
  source = corpora.load_split(config, split, corpora.default_data_dir(config, workdir),
                             process_index=jax.process_index())
  net = variant.from_config(config)
  mesh = meshes.make(config.mesh)
  batches = pipeline.make_eval_batches(config, source, tok,
                                       rows_multiple=jax.local_device_count(),
                                       process_index=jax.process_index(),
                                       process_count=jax.process_count())
  eval_step = parallel.make_eval_step(net, mesh, label_smoothing=config.label_smoothing)
  result: Dict[str, Any] = {'split': split, 'step': inference.step,
                            'checkpoint': inference.description}
  result.update(evaluate_batches(eval_step, meshes.place_params(inference.params, net, mesh),
                                 batches, mesh))
  logging.info('%s teacher-forced: loss %.4f perplexity %.2f accuracy %.3f', split,
               result['loss'], result['perplexity'], result['accuracy'])
  pairs = [source[i] for i in range(len(source))]
  hypotheses = multihost.translate_all(
      translate.from_config(config, inference.params, tok), [p['source'] for p in pairs],
      progress=translate.print_progress if show_progress else None)
  scores = decoded_scores(config, pairs, hypotheses, tok)
  hypotheses, references = scores.pop('hypotheses'), scores.pop('references', None)
  result.update(scores, sentences=len(pairs), beam_size=config.beam_size,
                length_penalty_alpha=config.length_penalty_alpha,
                length_penalty_rule=config.length_penalty_rule,
                examples=examples(pairs, hypotheses, references=references))
  texts = _texts(config, result, hypotheses,
                 references if references is not None else [p['target'] for p in pairs])
  if multihost.is_writer():
    result['path'] = write_result(workdir, split, inference.label or inference.step, result,
                                  texts)
    folder = layout.Workdir.eval_texts(result['path'])
    result.update({name.split('.')[0] + '_path': os.path.join(folder, name) for name in texts})
  logging.info('%s %s; written to %s', split, score_line(result), result.get('path'))
  return result
