"""The end-of-run report of `summary.finish`."""

import sys

from t2t_jax.training import summary

_COMMON = {'checkpoint': 'averaged steps 10,20', 'split': 'test', 'sentences': 2,
           'beam_size': 4, 'length_penalty_alpha': 0.6, 'perplexity': 3.5,
           'path': '/w/eval_test_20.json',
           'examples': [{'source': 'a b', 'reference': 'x', 'hypothesis': 'y'}]}
_BLEU = {'bleu': 24.9, 'bleu_signature': 'nrefs:1', 'tokenized_bleu': 25.1}
_F1 = {'f1': 91.2, 'precision': 91.0, 'recall': 91.4, 'complete_match': 40.0,
       'tagging_accuracy': 96.0, 'error_sentences': 0}
_DECODE = 'python main.py --mode=decode --workdir=/w --input=FILE --output=FILE'


def test_the_report_says_what_decoding_does_translate_or_parse():
  translation = summary.report({**_COMMON, **_BLEU}, '/w', '/w/averaged/20').splitlines()
  parsing = summary.report({**_COMMON, **_F1}, '/w', '/w/averaged/20').splitlines()
  assert translation[-1] == f'  translate:   {_DECODE}'
  assert parsing[-1] == f'  parse:       {_DECODE}'
  assert '  BLEU 24.90' in translation[2] and '  F1 91.20' in parsing[2]
  assert [line for line in parsing if 'translat' in line] == []


def test_a_signal_during_the_final_evaluation_says_training_is_kept(monkeypatch, tmp_path):
  """After the last step, a signal interrupts the final evaluation in one line that says
  what is kept (it exited 143 in silence: training's own stop handling had ended)."""
  import signal  # pylint: disable=import-outside-toplevel
  from t2t_jax import cli  # pylint: disable=import-outside-toplevel
  from t2t_jax.runtime import interruptible  # pylint: disable=import-outside-toplevel

  def finish(config, workdir):
    signal.raise_signal(signal.SIGTERM)

  monkeypatch.setattr(interruptible, '_state', interruptible._Signals())  # pylint: disable=protected-access
  monkeypatch.setattr(sys, 'unraisablehook', sys.unraisablehook)
  monkeypatch.setattr(summary.train, 'train', lambda config, workdir, resolved: {})
  monkeypatch.setattr(summary, 'finish', finish)
  previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    summary.train_and_finish({}, str(tmp_path), resolved=True)
    raise AssertionError('no interruption')
  except KeyboardInterrupt as e:
    assert cli._interrupted_line('SIGTERM', e.kept) == (  # pylint: disable=protected-access
        'error: interrupted by SIGTERM; training is finished and its checkpoints are kept; the '
        'final evaluation was not done: the same command runs it\n')
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
