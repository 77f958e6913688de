"""The end-of-run report of `summary.finish`."""

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
