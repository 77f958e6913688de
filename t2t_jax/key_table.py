"""Which config key does something in which mode and decode strategy: one table.

Every key of `configs/default.py` has one row: the modes in which it is used (a condition on
the run's other keys may narrow one, e.g. `eval_sentence_scores` in training only when the
run ends with an evaluation). Elsewhere it has **no effect**, or is **refused**:

* the keys that fix the model (`config.MODEL_KEYS`) are refused by every mode that reads a
  trained run when they differ from its checkpoint's (`resolution.with_overrides`);
* an export carries no decoding options: those keys are refused (`EXPORT_REFUSED`);
* within a mode, the decode strategy (and the other cross-key rules, `CROSS_KEY_RULES`)
  leaves some keys without effect: `temperature` without sampling, `beam_size` with greedy
  search. Those are `no_effect`'s, refused when typed without the key that makes them
  so, else named in a warning (`runtime/resolution.py`).

`unused(mode, config, keys)` is what a command names: each key it typed that does nothing in
its mode, once, in one warning line (`main.py`); `effect` is one cell of the table,
`markdown` the whole table as docs/modes.md prints it, and `tests/test_key_table.py` walks it
row by row. `--mode=info` shows every key it is given and `plot` and `plan` read none
(`plan` compiles the training config it is given): they are not columns here.
"""

from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import ml_collections
from absl import logging

from t2t_jax import choices
from t2t_jax import config as config_lib
from t2t_jax.configs import default as default_config

USED, NO_EFFECT, REFUSED = 'used', 'no effect', 'refused'
MODES = ('train', 'eval', 'decode', 'score', 'attention', 'export', 'average', 'serve')
STRATEGIES = ('beam', 'greedy', 'sample')
# The modes that read a trained run's checkpoint (its model keys are fixed there).
READS_A_RUN = ('eval', 'decode', 'score', 'attention', 'export', 'average', 'serve')
_RUNS_THE_MODEL = ('train', 'eval', 'decode', 'score', 'attention', 'export', 'serve')
# Training decodes dev sentences (eval_bleu_sentences) and the final split's; eval decodes
# for BLEU; attention translates --input when no --targets are given.
_SEARCHES = ('train', 'eval', 'decode', 'attention', 'serve')

Condition = Optional[Callable[[ml_collections.ConfigDict], bool]]

# (keys, the modes that use them, why not elsewhere); a mode may be (mode, condition, why not).
_ROWS: Tuple[Tuple[Tuple[str, ...], Tuple, str], ...] = (
    (config_lib.MODEL_KEYS, ('train',), 'nothing is built from the model keys here'),
    (('dtype', 'attention_impl', 'scan_layers'), _RUNS_THE_MODEL,
     'how the model computes, and this mode runs none'),
    (('remat_policy', 'dropout_rate', 'attention_dropout_rate'), ('train',),
     'training only: evaluation and decoding are deterministic, with no backward pass'),
    (('label_smoothing',), ('train', 'eval'), 'the loss of training and of --mode=eval only'),
    (('dataset', 'source_lang', 'target_lang'), _RUNS_THE_MODEL,
     'the task: nothing here reads or writes text'),
    (('data_dir', 'local_corpus_dir', 'corpora', 'treebank_dir', 'tokens_per_batch'),
     ('train', 'eval'),
     'where the splits are and how they are batched: only training and --mode=eval read them'),
    (('bucket_lengths',), _RUNS_THE_MODEL, 'the padded lengths of batches, and this mode '
     'runs none'),
    (('train_split', 'eval_split', 'vocab_sample_sentences', 'byte_fallback', 'vocab_model',
      'source_vocab_model', 'vocab_from', 'max_length', 'shuffle_seed', 'pack_examples'), ('train',),
     'training data only (--mode=eval reads --split; the vocabulary is the workdir\'s)'),
    (('optimizer', 'weight_decay', 'aux_loss_weight', 'adam_b1', 'adam_b2', 'adam_eps',
      'warmup_steps', 'learning_rate_scale', 'lr_schedule', 'learning_rate',
      'min_learning_rate', 'clip_grad_norm', 'trainable', 'ema_decay', 'grad_accum_steps',
      'shard_optimizer_state', 'num_train_steps', 'seed', 'init_from',
      'max_consecutive_nonfinite', 'debug_nonfinite_steps'), ('train',),
     'training only: how it optimises (--checkpoint=ema reads what ema_decay kept)'),
    (('mesh',), ('train', 'eval'), 'decoding spreads its batches over the local devices '
     '(decode_parallelism), not over a mesh'),
    (('profile_steps',), ('train', 'decode'), 'it traces train steps or decode batches'),
    (('writers', 'wandb_project', 'wandb_entity', 'mlflow_tracking_uri'), ('train',),
     'training only: where its metrics go'),
    (('checkpoint_every_steps', 'checkpoint_every_minutes', 'keep_checkpoints',
      'best_metric', 'best_weights', 'early_stop_patience', 'log_every_steps', 'eval_every_steps',
      'eval_batches', 'eval_bleu_sentences', 'final_eval_split'), ('train',),
     'training only: what it saves, logs and evaluates'),
    (('keep_best',), ('train', 'average'), 'training keeps the best; --mode=average with '
     'average_best reads how many it kept'),
    (('eval_sentence_scores',),
     ('eval', ('train', lambda c: bool(c.final_eval_split),
               "training with final_eval_split='' ends with no evaluation")),
     'only an evaluation writes sentence scores'),
    (('average_last',),
     ('average', ('train', lambda c: bool(c.final_eval_split),
                  "training with final_eval_split='' ends without averaging")),
     'eval and decode read the newest average; --mode=average writes one'),
    (('average_best',), ('average',), '--mode=average only'),
    (('beam_size', 'length_penalty_alpha', 'length_penalty_rule', 'max_decode_extra'),
     _SEARCHES + ('export',),
     'this mode searches for no translation'),
    (('decode_strategy', 'no_repeat_ngram_size', 'temperature', 'top_k', 'top_p',
      'sample_seed'), _SEARCHES, 'this mode searches for no translation'),
    (('nbest', 'output_scores', 'target_prefix_file'), ('decode',), '--mode=decode only (a '
     'server takes nbest and a target prefix per request)'),
    (('serve_max_wait_ms', 'serve_max_sentences', 'serve_max_tokens', 'serve_max_queue',
      'serve_max_body_bytes'), ('serve',), '--mode=serve only'),
    (('decode_batch_sentences',), _RUNS_THE_MODEL, 'this mode runs no model'),
    (('decode_threads', 'decode_parallelism'), _SEARCHES, 'this mode searches for no '
     'translation'),
)

# The strategy's and the other cross-key rules: keys that a run's other settings make
# ineffective, in any mode: (key, the keys that make it so, when it has no effect, why). A value
# other than the default is refused when typed on the command line without the keys that make
# it so, else warned about; the canonical form (`runtime/resolution.py`) records the default.
CROSS_KEY_RULES = (
    ('shard_optimizer_state', ('mesh',), lambda c: config_lib.parse_mesh(c.mesh).get('fsdp', 1) != 1,
     "a mesh with 'fsdp' splits the optimizer state with the parameters already (ZeRO-3)"),
    ('weight_decay', ('optimizer',), lambda c: c.optimizer in ('adam', 'adafactor'),
     "only optimizer='adamw' (or an optimizer factory) decays weights"),
    ('adam_b1', ('optimizer',), lambda c: c.optimizer == 'adafactor', "optimizer='adafactor' uses "
     "tensor2tensor's settings, not Adam's"),
    ('adam_b2', ('optimizer',), lambda c: c.optimizer == 'adafactor', "optimizer='adafactor' uses "
     "tensor2tensor's settings, not Adam's"),
    ('adam_eps', ('optimizer',), lambda c: c.optimizer == 'adafactor', "optimizer='adafactor' uses "
     "tensor2tensor's settings, not Adam's"),
    ('wandb_project', ('writers',), lambda c: 'wandb' not in choices.parse_writers(c.writers), "only writers with "
     "'wandb' write to W&B"),
    ('wandb_entity', ('writers',), lambda c: 'wandb' not in choices.parse_writers(c.writers), "only writers with "
     "'wandb' write to W&B"),
    ('mlflow_tracking_uri', ('writers',), lambda c: 'mlflow' not in choices.parse_writers(c.writers), "only writers "
     "with 'mlflow' write to MLflow"),
    ('local_corpus_dir', ('dataset',), lambda c: c.dataset != 'local', "only dataset='local' reads it"),
    ('eval_batches', ('eval_every_steps',), lambda c: not c.eval_every_steps, 'eval_every_steps=0 turns the '
     'periodic evaluation off'),
    ('eval_bleu_sentences', ('eval_every_steps',), lambda c: not c.eval_every_steps, 'eval_every_steps=0 turns the '
     'periodic evaluation off'),
    ('decode_threads', ('decode_parallelism',), lambda c: c.decode_parallelism == 'sharded',
     "decode_parallelism='sharded' decodes one batch at a time over the devices"),
    ('learning_rate', ('lr_schedule',), lambda c: c.lr_schedule == 'rsqrt', "lr_schedule='rsqrt' takes its "
     'peak from d_model, warmup_steps and learning_rate_scale'),
    ('min_learning_rate', ('lr_schedule',), lambda c: c.lr_schedule in ('rsqrt', 'constant'),
     "only lr_schedule='cosine' or 'linear' decays to it"),
    ('learning_rate_scale', ('lr_schedule', 'learning_rate'), lambda c: c.lr_schedule != 'rsqrt' and c.learning_rate,
     'learning_rate sets the peak of the schedule itself'),
    ('vocab_sample_sentences', ('vocab_model', 'init_from', 'vocab_from'),
     lambda c: c.vocab_model or c.init_from or c.vocab_from,
     'the vocabulary is given (vocab_model, init_from or vocab_from), not trained'),
    ('byte_fallback', ('vocab_model', 'init_from', 'vocab_from'),
     lambda c: c.vocab_model or c.init_from or c.vocab_from,
     'the vocabulary is given (vocab_model, init_from or vocab_from), not trained'),
    ('source_vocab_size', ('share_vocab',), lambda c: c.share_vocab, 'share_vocab=True: one vocabulary of '
     'vocab_size serves both sides'),
    ('source_vocab_model', ('share_vocab', 'share_tokenizer'), lambda c: c.share_vocab and c.share_tokenizer,
     'share_vocab=True and share_tokenizer=True: one model (vocab_model) serves both sides'),
    ('share_tokenizer', ('share_vocab',), lambda c: not c.share_vocab, 'share_vocab=False: each side has '
     'its own vocabulary and model anyway'),
    ('keep_best', ('eval_every_steps',), lambda c: not c.eval_every_steps, 'eval_every_steps=0: no evaluation ranks '
     'checkpoints'),
    ('early_stop_patience', ('eval_every_steps',), lambda c: not c.eval_every_steps, 'eval_every_steps=0: no '
     'evaluation to be patient with'),
    ('temperature', ('decode_strategy',), lambda c: c.decode_strategy != 'sample', "only "
     "decode_strategy='sample' draws"),
    ('top_k', ('decode_strategy',), lambda c: c.decode_strategy != 'sample', "only "
     "decode_strategy='sample' draws"),
    ('top_p', ('decode_strategy',), lambda c: c.decode_strategy != 'sample', "only "
     "decode_strategy='sample' draws"),
    ('sample_seed', ('decode_strategy',), lambda c: c.decode_strategy != 'sample', "only "
     "decode_strategy='sample' draws"),
    ('beam_size', ('decode_strategy',), lambda c: c.decode_strategy != 'beam', "only "
     "decode_strategy='beam' searches with a beam (nbest sets how many samples are drawn)"),
    ('length_penalty_alpha', ('decode_strategy',), lambda c: c.decode_strategy == 'greedy',
     "decode_strategy='greedy' takes the argmax at each step, with no length penalty"),
    ('length_penalty_rule', ('decode_strategy',), lambda c: c.decode_strategy == 'greedy',
     "decode_strategy='greedy' takes the argmax at each step, with no length penalty"),
    ('output_scores', ('nbest',), lambda c: c.nbest > 1, 'nbest > 1 writes the scores anyway'),
    ('best_metric', ('keep_best', 'early_stop_patience'), lambda c: not c.keep_best and not c.early_stop_patience,
     'only keep_best and early_stop_patience rank by it'),
    ('best_weights', ('keep_best', 'early_stop_patience'), lambda c: not c.keep_best and not c.early_stop_patience,
     'only keep_best and early_stop_patience rank evaluations'),
)


def no_effect_rules(config: Optional[ml_collections.ConfigDict]) -> list:
  """[(key, the keys that make it so, why)] of the cross-key rules (`CROSS_KEY_RULES`) that leave
  their key without effect in `config`, whatever its own value (None: every rule); the
  decode strategy's among them (`markdown` shows them per mode)."""
  return [(key, because, why) for key, because, inert, why in CROSS_KEY_RULES
          if config is None or inert(config)]


def no_effect(config: ml_collections.ConfigDict) -> list:
  """[(key, the keys that make it so, why)] for each key of a validated `config` that holds a
  value other than its default where the run's other settings make it do nothing
  (`weight_decay` with Adam)."""
  defaults = default_config.get_config()
  return [(key, because, why) for key, because, inert, why in CROSS_KEY_RULES
          if config[key] != defaults[key] and inert(config)]


# An export carries no decoding options: a CTranslate2 model is decoded with CTranslate2's own
# (num_hypotheses, sampling_topk/topp/temperature, no_repeat_ngram_size, target_prefix), and
# the StableHLO artifact is the paper's beam search.
EXPORT_REFUSED = ('decode_strategy', 'nbest', 'output_scores', 'temperature', 'top_k',
                  'top_p', 'sample_seed', 'no_repeat_ngram_size', 'target_prefix_file')


def _index() -> Dict[str, Tuple[Dict[str, Tuple[Condition, str]], str]]:
  """{key: ({mode: (condition, why not when it fails)}, why not in the other modes)}."""
  table = {}
  for keys, modes, why in _ROWS:
    used = {}
    for mode in modes:
      name, condition, unless = mode if isinstance(mode, tuple) else (mode, None, '')
      used[name] = (condition, unless)
    for key in keys:
      assert key not in table, key  # one row a key
      table[key] = (used, why)
  return table


TABLE = _index()


def effect(key: str, mode: str, config: Optional[ml_collections.ConfigDict] = None
           ) -> Tuple[str, str]:
  """(USED, NO_EFFECT or REFUSED, why) of `key` typed in `mode` for the run `config` (its
  other keys: the conditions and the cross-key rules (`no_effect_rules`), the decode strategy
  among them; None: the defaults)."""
  config = default_config.get_config() if config is None else config
  if mode == 'export' and key in EXPORT_REFUSED:
    return REFUSED, 'an export does not decode, so it carries no decoding options'
  if mode in READS_A_RUN and key in config_lib.MODEL_KEYS:
    return REFUSED, 'the checkpoint fixes the model: refused when it differs'
  used, why = TABLE[key]
  if mode not in used:
    return NO_EFFECT, why
  condition, unless = used[mode]
  if condition is not None and not condition(config):
    return NO_EFFECT, unless
  for inert, _, reason in no_effect_rules(config):
    if inert == key:
      return NO_EFFECT, reason
  return USED, ''


def unused(mode: str, config: ml_collections.ConfigDict, keys: Iterable[str]
           ) -> List[Tuple[str, str]]:
  """[(key, why)] of the `keys` a command typed (`--config.KEY=...`) that do nothing in
  `mode` by this table alone (the cross-key rules are `resolution`'s to name), in order."""
  out = []
  for key in dict.fromkeys(keys):
    if key not in TABLE or mode not in MODES or refused(mode, [key]) or (
        mode in READS_A_RUN and key in config_lib.MODEL_KEYS):  # checked against the checkpoint
      continue
    used, why = TABLE[key]
    if mode not in used:
      out.append((key, why))
    elif used[mode][0] is not None and not used[mode][0](config):
      out.append((key, used[mode][1]))
  return out


def refused(mode: str, keys: Iterable[str]) -> Optional[str]:
  """The first of `keys` this table refuses outright in `mode` (an export's decoding option),
  or None. The model keys are refused where they differ from the checkpoint's, by
  `resolution.with_overrides`, which knows the checkpoint."""
  return next((k for k in keys if mode == 'export' and k in EXPORT_REFUSED), None)


def check_command(mode: str, config: ml_collections.ConfigDict, keys: Sequence[str]
                  ) -> List[str]:
  """The keys a command typed that do something in `mode`: `keys` less `unused`'s, which are
  named in one warning line and left out of what the mode applies (so that a training key
  given to --mode=eval cannot refuse the evaluation). What `refused` names stays, for the
  mode to refuse (`export.formats.check_decoding_keys`)."""
  found = unused(mode, config, keys)
  if found:
    logging.warning('%s', describe_unused(mode, found))
  skipped = {key for key, _ in found}
  return [key for key in keys if key not in skipped]


def describe_unused(mode: str, found: Sequence[Tuple[str, str]]) -> str:
  """One line naming `unused`'s keys, grouped by why."""
  by_why: Dict[str, List[str]] = {}
  for key, why in found:
    by_why.setdefault(why, []).append(key)
  parts = [f'{", ".join(keys)} ({why})' for why, keys in by_why.items()]
  noun = 'key has' if len(found) == 1 else 'keys have'
  return f'--mode={mode}: config {noun} no effect here: {"; ".join(parts)}'


def markdown() -> str:
  """The table as docs/modes.md prints it: one row per key, one column per mode ('used',
  'no effect', 'refused'; 'used*' where a condition, the decode strategy or another key may
  make it 'no effect', said in the last column)."""
  defaults = default_config.get_config()
  lines = ['| key | ' + ' | '.join(MODES) + ' | when it does nothing |',
           '|---|' + '---|' * (len(MODES) + 1)]
  rules = no_effect_rules(None)
  for key in defaults.keys():
    cells, notes = [], []
    ruled = any(inert == key for inert, _, _ in rules)
    for mode in MODES:
      kind, _ = effect(key, mode, defaults)
      if kind != REFUSED:  # the row as written, whatever the defaults make of its conditions
        kind = USED if mode in TABLE[key][0] else NO_EFFECT
      condition = TABLE[key][0].get(mode, (None, ''))
      if kind == USED and condition[0] is not None:
        notes.append(f'{mode}: {condition[1]}')
      if kind == USED and (condition[0] is not None or ruled):
        kind += '*'
      cells.append(kind)
    for inert, because, reason in rules:
      if inert == key:
        notes.append(f'with {", ".join(because)}: {reason}')
    if NO_EFFECT in cells:
      notes.append(TABLE[key][1])
    for mode in MODES:
      kind, why = effect(key, mode, defaults)
      if kind == REFUSED:
        notes.append(f'refused: {why}')
    lines.append(f'| `{key}` | ' + ' | '.join(cells) + ' | ' + '; '.join(dict.fromkeys(notes))
                 + ' |')
  return '\n'.join(lines) + '\n'
