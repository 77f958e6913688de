"""The key table (`t2t_jax/key_table.py`), walked row by row: every key of configs/default.py
has a row; each (key, mode) cell is what the resolution step does with the key typed in that
mode (named as unused, refused by the checkpoint or the export, or inert under the decode
strategy); docs/modes.md prints the table; and what the table says decode does not use
changes nothing that decode writes."""

import contextlib
import io
import logging
import os
import re

import pytest

from conftest import ROOT
from t2t_jax import config as config_lib
from t2t_jax import key_table
from t2t_jax.choices import ConfigError
from t2t_jax.configs import default
from t2t_jax.export import formats
from t2t_jax.inference import modes
from t2t_jax.runtime import resolution

DEFAULTS = default.get_config()
# A value other than the default for each key, valid on its own.
CHANGED = {'model': 'no_such_module:f', 'mesh': 'data:2', 'trainable': 'decoder/.*',
           'init_from': '/nowhere', 'vocab_model': '/nowhere/x.model',
           'source_vocab_model': '/nowhere/y.model', 'target_prefix_file': '/nowhere/p.txt',
           'positional': 'learned', 'norm_position': 'pre', 'dtype': 'bfloat16',
           'attention_impl': 'xla', 'remat_policy': 'full', 'optimizer': 'adamw',
           'lr_schedule': 'cosine', 'decode_strategy': 'sample', 'best_metric': 'bleu', 'best_weights': 'ema',
           'dataset': 'local', 'decode_parallelism': 'threads', 'debug_nonfinite_steps': (3,),
           'bucket_lengths': (8, 256), 'final_eval_split': 'test', 'eval_split': 'test',
           'train_split': 'dev', 'activation': 'swish', 'language_tokens': '__{lang}__'}


def _changed(key):
  if key in CHANGED:
    return CHANGED[key]
  value = DEFAULTS[key]
  if isinstance(value, bool):
    return not value
  if isinstance(value, float):
    return value / 2 if 0 < value <= 1 else value + 1.0
  if isinstance(value, int):
    return 2 * value if value > 0 else value + 1
  return value + '_x'


def test_every_key_has_one_row_and_every_cell_a_kind():
  assert set(key_table.TABLE) == set(DEFAULTS.keys())
  for key in DEFAULTS.keys():
    for mode in key_table.MODES:
      kind, why = key_table.effect(key, mode)
      assert kind in (key_table.USED, key_table.NO_EFFECT, key_table.REFUSED), (key, mode)
      assert (kind == key_table.USED) == (why == ''), (key, mode, why)


@pytest.mark.parametrize('mode', key_table.MODES)
def test_each_cell_is_what_the_command_does_with_the_key(mode, caplog):
  """Row by row: a key the table does not use in `mode` is named by `check_command` (one line,
  with its reason) and left out of what the mode applies; a used one is applied silently; a
  refused one is refused by the code that refuses it."""
  by_rule = {key: why for key, _, why in key_table.no_effect_rules(DEFAULTS)}
  for key in DEFAULTS.keys():
    kind, why = key_table.effect(key, mode)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
      applied = key_table.check_command(mode, DEFAULTS, [key])
    named = [r.getMessage() for r in caplog.records]
    if kind == key_table.NO_EFFECT and why != by_rule.get(key):  # the mode's, not a rule's
      assert applied == [] and len(named) == 1, (key, mode, named)
      assert named[0] == f'--mode={mode}: config key has no effect here: {key} ({why})'
    elif kind == key_table.REFUSED:
      assert applied == [key] and not named, (key, mode)
      if mode == 'export' and key in key_table.EXPORT_REFUSED:
        with pytest.raises(formats.ExportError, match=rf'^--config\.{key}: an export does not'):
          formats.check_decoding_keys(modes.Overrides(DEFAULTS, [key]))
      else:
        _assert_the_checkpoint_refuses(key)
    else:  # used, or inert through another key (resolution's to name: the strategy's below)
      assert applied == [key] and not named, (key, mode, named)


def _assert_the_checkpoint_refuses(key):
  """A model key given with another value than the checkpoint's is refused, naming it."""
  saved = resolution.resolve(DEFAULTS, saved=True)
  source = config_lib.from_json(dict(DEFAULTS.to_dict(), **{key: _changed(key)}))
  with pytest.raises(ConfigError, match=key):
    resolution.with_overrides(saved, source, [key])


@pytest.mark.parametrize('strategy', key_table.STRATEGIES)
def test_the_decode_strategy_column(strategy):
  """The strategy's rows: inert keys are `no effect` in every mode that searches; typed
  against a strategy the command did not type, refused; typed with it, recorded at the
  default (named in a warning)."""
  config = config_lib.validate(DEFAULTS.copy_and_resolve_references())
  config.decode_strategy = strategy
  sampling = {'temperature', 'top_k', 'top_p', 'sample_seed'}
  inert = {'beam': sampling, 'greedy': {'beam_size', 'length_penalty_alpha'} | sampling,
           'sample': {'beam_size'}}[strategy]
  for key in ('beam_size', 'length_penalty_alpha', 'temperature', 'top_k', 'top_p',
              'sample_seed', 'no_repeat_ngram_size', 'max_decode_extra'):
    kinds = {key_table.effect(key, mode, config)[0] for mode in ('eval', 'decode', 'attention')}
    assert kinds == {key_table.NO_EFFECT if key in inert else key_table.USED}, (key, strategy)
    if key in inert:
      typed = config.copy_and_resolve_references()
      typed[key] = _changed(key)
      with pytest.raises(ConfigError, match=rf"config key '{key}'=.* has no effect"):
        resolution.resolve(typed, [key])
      assert resolution.resolve(typed, [key, 'decode_strategy'])[key] == DEFAULTS[key]


def test_conditions_narrow_a_mode():
  ends_with_eval = config_lib.validate(DEFAULTS.copy_and_resolve_references())
  ends_with_eval.final_eval_split = 'test'
  for key in ('eval_sentence_scores', 'average_last'):
    assert key_table.effect(key, 'train')[0] == key_table.NO_EFFECT  # final_eval_split ''
    assert key_table.effect(key, 'train', ends_with_eval) == (key_table.USED, '')
  assert key_table.unused('train', DEFAULTS, ['eval_sentence_scores', 'nbest']) == [
      ('eval_sentence_scores', "training with final_eval_split='' ends with no evaluation"),
      ('nbest', '--mode=decode only (a server takes nbest and a target prefix per request)')]


def test_docs_print_the_table():
  with open(os.path.join(ROOT, 'docs', 'modes.md'), encoding='utf-8') as f:
    text = f.read()
  printed = re.search(r'<!-- key table: generated[^\n]*\n(.*?)<!-- end of key table -->', text,
                      re.S).group(1)
  assert printed == key_table.markdown()
  assert printed.count('\n') == len(DEFAULTS.keys()) + 2


@pytest.mark.slow
def test_what_decode_does_not_use_changes_nothing_it_writes(tiny_workdir, tmp_path):
  """The table's claim, checked: each key it says --mode=decode does not use, applied anyway
  (bypassing `check_command`), leaves decode's output as it was; a used key changes it."""
  source = tmp_path / 'in.txt'
  source.write_text('In the beginning God created the heaven and the earth.\nAnd God said\n')

  def decode(**changes):
    config = DEFAULTS.copy_and_resolve_references()
    config.update(changes)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      modes.decode(tiny_workdir, modes.Overrides(config, list(changes)), None, str(source),
                   None)
    return out.getvalue()

  plain = decode()
  probes = ('label_smoothing', 'tokens_per_batch', 'warmup_steps', 'trainable', 'mesh',
            'log_every_steps', 'average_last', 'dropout_rate', 'seed',
            'shuffle_seed', 'grad_accum_steps', 'checkpoint_every_steps')
  for key in probes:
    assert key_table.effect(key, 'decode')[0] == key_table.NO_EFFECT, key
    assert decode(**{key: _changed(key)}) == plain, key
  assert key_table.effect('max_decode_extra', 'decode')[0] == key_table.USED
  assert decode(max_decode_extra=1) != plain
