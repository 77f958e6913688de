"""The keys surface of the user's tour (workdir_keys_streams_tries.py): every key checked against
the mode and decode strategy it is given to (docs/modes.md "Which key does what, where"), keys
where they do nothing, bad values, export with decoding options, resume with changed keys.
It uses what the workdir surface left: runs/base, inputs/other*.model, in/tgt_two.txt.
"""

import os
import shutil

from tours.user_tour_kit import cfg_args, file_lines, main_py, tiny

# --------------------------------------------------------------------------- 2. keys

def keys_surface(tour):
  S, p = 'keys', tour.p
  C = p('corpus')
  base = p('runs', 'base')
  two = p('in', 'two.txt')
  tgt2 = p('in', 'tgt_two.txt')
  n = [0]

  def o(tag='decode.txt'):
    n[0] += 1
    return p('out', f'k{n[0]:03d}_{tag}')

  def dec(name, keys, expected, kind='ok', words=(), nlines=2, extra=()):
    out = o()
    return tour.t(S, f'decode.{name}', main_py('--mode=decode', f'--workdir={base}', f'--input={two}', f'--output={out}', *extra, *keys),
                  expected, kind, words, file_lines(out, nlines) if kind in ('ok', 'warn', 'ok_or_refuse') else None)

  dec('beam_size_with_sample_typed', ['--config.decode_strategy=sample', '--config.beam_size=8'],
      'beam_size typed with decode_strategy=sample typed: one warning line naming beam_size, decodes', 'warn', ['beam_size'])
  dec('temperature_with_beam', ['--config.temperature=0.7'],
      'temperature against the recorded beam strategy: refused in one line naming temperature', 'refuse', ['temperature'])
  dec('temperature_with_beam_typed', ['--config.decode_strategy=beam', '--config.temperature=0.7'],
      'temperature with decode_strategy=beam typed: one warning line naming temperature', 'warn', ['temperature'])
  dec('length_penalty_with_greedy_typed', ['--config.decode_strategy=greedy', '--config.length_penalty_alpha=1.0'],
      'length_penalty_alpha with greedy typed: one warning line, decodes', 'warn', ['length_penalty_alpha'])
  dec('beam_size_with_greedy_typed', ['--config.decode_strategy=greedy', '--config.beam_size=2'],
      'beam_size with greedy typed: one warning line, decodes', 'warn', ['beam_size'])
  dec('top_k_without_sample', ['--config.top_k=5'],
      'top_k with the beam strategy: refused in one line naming top_k', 'refuse', ['top_k'])
  dec('top_p_without_sample', ['--config.top_p=0.5'],
      'top_p with the beam strategy: refused in one line naming top_p', 'refuse', ['top_p'])
  dec('sample_seed_without_sample', ['--config.sample_seed=3'],
      'sample_seed with the beam strategy: refused in one line naming sample_seed', 'refuse', ['sample_seed'])
  dec('model_key_d_model_differs', ['--config.d_model=64'],
      'a model key that differs from the checkpoint: refused naming d_model', 'refuse', ['d_model'])
  dec('model_key_d_model_same', ['--config.d_model=32'],
      'a model key equal to the checkpoint: accepted (refused only when it differs)', 'ok')
  dec('model_key_num_layers_expanded', ['--config.num_encoder_layers=1', '--config.num_decoder_layers=1'],
      'the same depth written out: the same model, accepted', 'ok')
  dec('model_key_vocab_size_differs', ['--config.vocab_size=500'],
      'vocab_size differs: refused naming vocab_size', 'refuse', ['vocab_size'])
  dec('training_key_warmup_steps', ['--config.warmup_steps=99'],
      'a training key at decode: one warning line naming warmup_steps, decodes', 'warn', ['warmup_steps'])
  dec('training_key_mesh', ["--config.mesh=data:-1"],
      'mesh at decode: one warning line naming mesh, decodes', 'warn', ['mesh'])
  dec('eval_key_eval_sentence_scores', ['--config.eval_sentence_scores=True'],
      'eval_sentence_scores at decode: one warning line, decodes', 'warn', ['eval_sentence_scores'])
  dec('data_key_local_corpus_dir', [f'--config.local_corpus_dir={C}'],
      'local_corpus_dir at decode: no effect, one warning line', 'warn', ['local_corpus_dir'])
  dec('init_from_at_decode', [f'--config.init_from={base}'],
      'init_from at decode: no effect, one warning line', 'warn', ['init_from'])
  dec('vocab_model_other_file', [f'--config.vocab_model={p("inputs", "other400.model")}'],
      'modes.md: a vocab_model named again at decode is compared by content; another file is refused, naming both sha256',
      'refuse', ['sha256'])
  dec('vocab_model_same_file', [f'--config.vocab_model={os.path.join(base, "vocab", "spm.model")}'],
      "the workdir's own vocabulary named at decode: decodes (a no-effect warning is fine)", 'ok')
  dec('sample_seed_huge', ['--config.decode_strategy=sample', f'--config.sample_seed={2**70}'],
      'a 2**70 sample_seed: used, or refused in one line naming sample_seed', 'ok_or_refuse', ['sample_seed'])
  dec('sample_seed_negative', ['--config.decode_strategy=sample', '--config.sample_seed=-7'],
      'a negative sample_seed: used, or refused in one line naming sample_seed', 'ok_or_refuse', ['sample_seed'])
  dec('beam_size_negative', ['--config.beam_size=-3'],
      'beam_size=-3: refused in one line naming beam_size', 'refuse', ['beam_size'])
  dec('beam_size_zero', ['--config.beam_size=0'],
      'beam_size=0: refused in one line naming beam_size', 'refuse', ['beam_size'])
  dec('nbest_above_beam', ['--config.nbest=8'],
      'nbest 8 > beam_size 4: refused naming nbest', 'refuse', ['nbest'])
  dec('nbest_negative', ['--config.nbest=-1'],
      'nbest=-1: refused naming nbest', 'refuse', ['nbest'])
  dec('decode_batch_sentences_negative', ['--config.decode_batch_sentences=-4'],
      'decode_batch_sentences=-4: refused naming it', 'refuse', ['decode_batch_sentences'])
  dec('top_p_above_one', ['--config.decode_strategy=sample', '--config.top_p=1.5'],
      'top_p=1.5: refused naming top_p', 'refuse', ['top_p'])
  dec('temperature_negative', ['--config.decode_strategy=sample', '--config.temperature=-1'],
      'temperature=-1: refused naming temperature', 'refuse', ['temperature'])
  dec('temperature_zero', ['--config.decode_strategy=sample', '--config.temperature=0'],
      'temperature=0: greedy-like, or refused naming temperature', 'ok_or_refuse', ['temperature'])
  dec('top_k_negative', ['--config.decode_strategy=sample', '--config.top_k=-2'],
      'top_k=-2: refused naming top_k', 'refuse', ['top_k'])
  dec('max_decode_extra_negative', ['--config.max_decode_extra=-60'],
      'max_decode_extra=-60: refused naming it', 'refuse', ['max_decode_extra'])
  dec('no_repeat_ngram_size_negative', ['--config.no_repeat_ngram_size=-1'],
      'no_repeat_ngram_size=-1: refused naming it', 'refuse', ['no_repeat_ngram_size'])
  dec('output_scores_with_nbest_typed', ['--config.nbest=2', '--config.output_scores=True'],
      'output_scores typed with nbest=2 typed: one warning line; 2 lines per input', 'warn', ['output_scores'],
      nlines=4)
  dec('decode_threads_with_sharded_typed', ['--config.decode_parallelism=sharded', '--config.decode_threads=2'],
      'decode_threads with sharded typed: one warning line naming decode_threads', 'warn', ['decode_threads'])
  dec('sample_nbest_3', ['--config.decode_strategy=sample', '--config.nbest=3'],
      'sampling 3 per input writes 6 n-best lines', 'ok', nlines=6)
  dec('unknown_key', ['--config.beam_sise=4'],
      'a misspelt key: refused in one line naming it', 'refuse', ['beam_sise'])
  dec('decode_strategy_bogus', ['--config.decode_strategy=topk'],
      'an unknown decode_strategy: refused naming the choices', 'refuse', ['decode_strategy'])
  dec('checkpoint_missing_step', [], '--checkpoint=99999: refused in one line naming it', 'refuse', ['99999'],
      extra=['--checkpoint=99999'])
  dec('checkpoint_best_without_keep_best', [], '--checkpoint=best with no best/ kept: refused in one line', 'refuse',
      [('best', 'keep_best')], extra=['--checkpoint=best'])
  dec('checkpoint_ema_without_ema_decay', [], '--checkpoint=ema on a run without ema_decay: refused in one line', 'refuse',
      [('ema',)], extra=['--checkpoint=ema'])

  # score
  def score(name, keys, expected, kind='ok', words=()):
    out = o('score.tsv')
    return tour.t(S, f'score.{name}', main_py('--mode=score', f'--workdir={base}', f'--input={two}', f'--targets={tgt2}', f'--output={out}', *keys),
                  expected, kind, words, file_lines(out, 2) if kind != 'refuse' else None)
  score('nbest', ['--config.nbest=2'], 'nbest at score: one warning line (not used by the mode), scores', 'warn', ['nbest'])
  score('decode_strategy', ['--config.decode_strategy=sample'], 'decode_strategy at score: one warning line, scores', 'warn', ['decode_strategy'])
  score('beam_size', ['--config.beam_size=2'], 'beam_size at score: no effect, one warning line', 'warn', ['beam_size'])
  score('temperature', ['--config.temperature=0.5'], 'temperature at score: no effect, one warning line', 'warn', ['temperature'])
  score('model_key_differs', ['--config.num_heads=2'], 'num_heads differs at score: refused naming num_heads', 'refuse', ['num_heads'])

  # eval
  def ev(name, keys, expected, kind='ok', words=(), extra=()):
    return tour.t(S, f'eval.{name}', main_py('--mode=eval', f'--workdir={base}', *extra, *keys), expected, kind, words)
  ev('training_key_learning_rate', ['--config.learning_rate=0.001'],
     'a training key at eval: one warning line naming learning_rate', 'warn', ['learning_rate'])
  ev('training_key_trainable', ["--config.trainable=decoder/.*"],
     'trainable at eval: one warning line', 'warn', ['trainable'])
  ev('eval_bleu_sentences', ['--config.eval_bleu_sentences=0'],
     'eval_bleu_sentences at eval: one warning line, evaluates', 'warn', ['eval_bleu_sentences'])
  ev('nbest', ['--config.nbest=2'], 'nbest at eval: one warning line', 'warn', ['nbest'])
  ev('temperature_with_beam', ['--config.temperature=0.5'],
     'temperature against the beam strategy at eval: refused naming temperature', 'refuse', ['temperature'])
  ev('model_key_num_heads', ['--config.num_heads=2'], 'num_heads differs: refused naming num_heads', 'refuse', ['num_heads'])
  ev('label_smoothing_used', ['--config.label_smoothing=0.2'], 'label_smoothing is used by eval: evaluates')
  ev('tokens_per_batch_negative', ['--config.tokens_per_batch=-5'], 'tokens_per_batch=-5: refused naming it', 'refuse', ['tokens_per_batch'])
  ev('split_bogus', [], '--split=valid: refused in one line naming the choices', 'refuse', [('split', 'valid')], extra=['--split=valid'])

  # export (stablehlo)
  def ex(name, keys, expected, kind='refuse', words=()):
    out = o('hlo')
    return tour.t(S, f'export.{name}', main_py('--mode=export', '--format=stablehlo', f'--workdir={base}', f'--output={out}', *keys),
                  expected, kind, words,
                  (lambda r: (os.path.isfile(os.path.join(out, 'manifest.json')), 'manifest written')) if kind == 'ok' else None)
  ex('temperature', ['--config.temperature=0.7'], 'an export carries no decoding options: refused naming temperature', 'refuse', ['temperature'])
  ex('nbest', ['--config.nbest=2'], 'export with nbest: refused naming nbest', 'refuse', ['nbest'])
  ex('target_prefix_file', [f'--config.target_prefix_file={p("in", "prefix_lf.txt")}'], 'export with a target prefix file: refused', 'refuse', ['target_prefix_file'])
  ex('sample_seed', ['--config.sample_seed=1'], 'export with sample_seed: refused', 'refuse', ['sample_seed'])
  ex('no_repeat_ngram_size', ['--config.no_repeat_ngram_size=3'], 'export with no_repeat_ngram_size: refused', 'refuse', ['no_repeat_ngram_size'])
  ex('decode_strategy_greedy', ['--config.decode_strategy=greedy'], 'export with decode_strategy: refused', 'refuse', ['decode_strategy'])
  ex('output_scores', ['--config.output_scores=True'], 'export with output_scores: refused', 'refuse', ['output_scores'])
  ex('beam_size_2', ['--config.beam_size=2'], 'beam_size is used by export: exports with beam 2', 'ok')
  ex('training_key_dropout', ['--config.dropout_rate=0.3'], 'dropout_rate at export: one warning line, exports', 'warn', ['dropout_rate'])

  def ct2(name, keys, expected, kind='refuse', words=(), flags=()):
    out = o('ct2')
    return tour.t(S, f'export_ctranslate2.{name}', main_py('--mode=export', '--format=ctranslate2', f'--workdir={base}', f'--output={out}', *flags, *keys),
                  expected, kind, words,
                  (lambda r: (os.path.isfile(os.path.join(out, 'model.bin')), 'model.bin written')) if kind != 'refuse' else None)
  ct2('temperature', ['--config.temperature=0.7'], 'CTranslate2 export with temperature: refused naming it', 'refuse', ['temperature'])
  ct2('top_k', ['--config.decode_strategy=sample', '--config.top_k=5'], 'CTranslate2 export with sampling options: refused naming them', 'refuse', [('top_k', 'decode_strategy')])
  ct2('beam_size_2', ['--config.beam_size=2'], 'beam_size is used by export: a CTranslate2 model with beam 2 in its decoding file', 'ok')
  ct2('quantization_bogus', [], '--quantization=int3: refused in one line naming the choices', 'refuse', [('quantization', 'int3')],
      flags=['--quantization=int3'])

  # attention, average, info, plot
  out = o('att')
  tour.t(S, 'attention.nbest', main_py('--mode=attention', f'--workdir={base}', f'--input={two}', f'--output={out}', '--config.nbest=2'),
         'nbest at attention: one warning line, draws', 'warn', ['nbest'])
  out = o('att')
  tour.t(S, 'attention.top_k_without_sample', main_py('--mode=attention', f'--workdir={base}', f'--input={two}', f'--output={out}', '--config.top_k=3'),
         'top_k with the beam strategy at attention: refused naming top_k', 'refuse', ['top_k'])
  av = p('runs', 'base_av')
  shutil.copytree(base, av)
  tour.t(S, 'average.beam_size', main_py('--mode=average', f'--workdir={av}', '--config.average_last=1', '--config.beam_size=2'),
         'beam_size at average: one warning line, averages', 'warn', ['beam_size'])
  tour.t(S, 'average.average_best_without_keep_best', main_py('--mode=average', f'--workdir={av}', '--config.average_best=2'),
         'average_best with no best/ kept: refused in one line', 'refuse', [('best',)])
  tour.t(S, 'average.average_last_zero', main_py('--mode=average', f'--workdir={av}', '--config.average_last=0'),
         'average_last=0: refused naming average_last', 'refuse', ['average_last'])
  tour.t(S, 'average.average_last_negative', main_py('--mode=average', f'--workdir={av}', '--config.average_last=-2'),
         'average_last=-2: refused naming average_last', 'refuse', ['average_last'])
  tour.t(S, 'info.workdir_with_decode_key', main_py('--mode=info', f'--workdir={base}', '--config.beam_size=2'),
         'info shows every key it is given', 'ok', pred=lambda r: ('beam_size                 = 2' in r.out, 'shows beam_size = 2' if 'beam_size                 = 2' in r.out else 'beam_size=2 not shown'))
  tour.t(S, 'info.bad_heads', main_py('--mode=info', '--config.d_model=30', '--config.num_heads=4'),
         'd_model 30 with 4 heads: refused naming the keys', 'refuse', [('d_model', 'num_heads')])
  tour.t(S, 'plot.with_keys', main_py('--mode=plot', f'--workdir={av}', '--config.beam_size=2'),
         'plot reads no key: draws (a warning is fine)', 'ok')

  # train: refusals before work
  def tr(name, over, expected, kind='refuse', words=(), timeout=600, pred=None, base_over=None, corpus=C, wd=None):
    wd = wd or p('runs', f'k_{name}')
    return tour.t(S, f'train.{name}', main_py(f'--workdir={wd}', *tiny(corpus, **(base_over or {})), *cfg_args(over)),
                  expected, kind, words, pred, timeout=timeout)
  tr('warmup_above_steps_cosine', {'lr_schedule': 'cosine', 'learning_rate': 0.001, 'warmup_steps': 100},
     'warmup_steps > num_train_steps with cosine: refused naming warmup_steps', 'refuse', ['warmup_steps'])
  tr('warmup_above_steps_linear', {'lr_schedule': 'linear', 'learning_rate': 0.001, 'warmup_steps': 11},
     'warmup_steps 11 > num_train_steps 10 with linear: refused naming warmup_steps', 'refuse', ['warmup_steps'])
  tr('warmup_above_steps_rsqrt', {'warmup_steps': 100}, 'rsqrt with warmup > steps is allowed: trains', 'ok')
  tr('warmup_zero_rsqrt', {'warmup_steps': 0}, 'rsqrt with warmup 0 divides by zero: refused naming warmup_steps (or trains finitely)',
     'ok_or_refuse', ['warmup_steps'],
     pred=lambda r: ('loss nan' not in r.err and 'loss inf' not in r.err, 'finite loss' if 'loss nan' not in r.err else 'NaN loss'))
  tr('learning_rate_with_rsqrt', {'learning_rate': 0.001}, 'learning_rate with rsqrt: refused naming learning_rate', 'refuse', ['learning_rate'])
  tr('min_learning_rate_with_rsqrt', {'min_learning_rate': 1e-5}, 'min_learning_rate with rsqrt: refused', 'refuse', ['min_learning_rate'])
  tr('min_learning_rate_with_constant_typed', {'lr_schedule': 'constant', 'learning_rate': 0.001, 'min_learning_rate': 1e-5},
     'min_learning_rate with constant typed: one warning line, trains', 'warn', ['min_learning_rate'])
  tr('weight_decay_with_adam', {'weight_decay': 0.1}, 'weight_decay with adam: refused naming weight_decay', 'refuse', ['weight_decay'])
  tr('adam_b2_with_adafactor_typed', {'optimizer': 'adafactor', 'adam_b2': 0.99},
     'adam_b2 with adafactor typed: one warning line, trains', 'warn', ['adam_b2'])
  tr('keep_best_with_eval0_typed', {'keep_best': 2}, 'keep_best with eval_every_steps=0 typed: one warning line, recorded as 0',
     'warn', ['keep_best'])
  tr('early_stop_with_eval0_typed', {'early_stop_patience': 3}, 'early_stop_patience with eval_every_steps=0 typed: one warning line',
     'warn', ['early_stop_patience'])
  tr('keep_best_config_eval_on', {'keep_best': 2}, 'keep_best with periodic evaluation on: trains, keeps the best in best/',
     'ok', base_over={'eval_every_steps': 5, 'eval_bleu_sentences': None}, timeout=600,
     pred=lambda r: (os.path.isdir(p('runs', 'k_keep_best_config_eval_on', 'best')), 'best/ written'))
  tr('best_metric_bleu_without_bleu_sentences', {'keep_best': 2, 'best_metric': 'bleu'},
     'best_metric=bleu with eval_bleu_sentences=0: refused in one line', 'refuse', [('eval_bleu_sentences', 'best_metric')],
     base_over={'eval_every_steps': 5})
  tr('eval_bleu_sentences_with_eval0', {}, 'eval_bleu_sentences typed with eval_every_steps=0 typed: one warning line',
     'warn', ['eval_bleu_sentences'], base_over={'eval_bleu_sentences': 5})
  tr('seed_huge', {'seed': 2**70}, 'seed 2**70: trains, or refused in one line naming seed', 'ok_or_refuse', ['seed'])
  tr('seed_negative', {'seed': -5}, 'seed -5: trains, or refused naming seed', 'ok_or_refuse', ['seed'])
  tr('shuffle_seed_huge', {'shuffle_seed': 2**70}, 'shuffle_seed 2**70: trains, or refused naming shuffle_seed', 'ok_or_refuse', ['shuffle_seed'])
  tr('num_train_steps_negative', {'num_train_steps': -10}, 'num_train_steps=-10: refused naming it', 'refuse', ['num_train_steps'])
  tr('tokens_per_batch_zero', {'tokens_per_batch': 0}, 'tokens_per_batch=0: refused naming it', 'refuse', ['tokens_per_batch'])
  tr('vocab_size_negative', {'vocab_size': -400}, 'vocab_size=-400: refused naming it', 'refuse', ['vocab_size'])
  tr('d_model_not_divisible', {'d_model': 30}, 'd_model 30 with 4 heads: refused naming them', 'refuse', [('d_model', 'num_heads')])
  tr('dropout_rate_above_one', {'dropout_rate': 1.5}, 'dropout_rate=1.5: refused naming it', 'refuse', ['dropout_rate'])
  tr('grad_accum_steps_zero', {'grad_accum_steps': 0}, 'grad_accum_steps=0: refused naming it', 'refuse', ['grad_accum_steps'])
  tr('bucket_lengths_unsorted', {'bucket_lengths': '(32,16)'}, 'unsorted buckets: sorted and used, or refused naming bucket_lengths',
     'ok_or_refuse', ['bucket_lengths'])
  tr('bucket_lengths_below_max_length', {'bucket_lengths': '(8,16)'}, 'largest bucket 16 < max_length 32: refused naming bucket_lengths/max_length',
     'refuse', [('bucket_lengths', 'max_length')])
  tr('trainable_matches_nothing', {'trainable': 'nothing/.*'}, 'trainable that matches nothing: refused, naming the top-level paths',
     'refuse', ['trainable'])
  tr('final_eval_split_bogus', {'final_eval_split': 'valid'}, 'final_eval_split=valid: refused naming it', 'refuse', ['final_eval_split'])
  tr('share_vocab_false_shared_embeddings', {'share_vocab': False}, 'share_vocab=False with share_embeddings=True: refused in one line',
     'refuse', ['share_embeddings'])
  tr('vocab_model_with_vocab_sample_sentences', {'vocab_model': p('inputs', 'other300.model')},
     'vocab_sample_sentences typed with vocab_model typed (the key that makes it inert): one warning line naming it',
     'warn', ['vocab_sample_sentences'],
     base_over={'vocab_size': 300})
  tr('vocab_model_other_vocab_size', {'vocab_model': p('inputs', 'other300.model')},
     'vocab_model of 300 pieces with vocab_size=400: refused naming both', 'refuse', ['vocab_size'],
     base_over={'vocab_sample_sentences': None})
  tr('vocab_model_missing_file', {'vocab_model': p('inputs', 'nope.model')},
     'a vocab_model that does not exist: refused naming the file', 'refuse', ['nope.model'],
     base_over={'vocab_sample_sentences': None})
  tr('local_corpus_dir_missing', {}, 'a local_corpus_dir that does not exist: refused naming it', 'refuse',
     [('local_corpus_dir', 'no_such_corpus')], corpus=p('no_such_corpus'))
  tr('nbest_at_train', {'nbest': 2}, 'nbest at train: no effect, one warning line', 'warn', ['nbest'])
  tr('temperature_at_train', {'temperature': 0.5}, 'temperature against the beam strategy at train: refused naming temperature', 'refuse', ['temperature'])
  tr('unknown_key', {'num_layer': 2}, 'a misspelt key: refused naming it', 'refuse', ['num_layer'])
  tr('model_factory_missing_attr', {'model': p('inputs', 'other300.model') + ':f'},
     'a --config.model that is not a Python file: refused in one line before the workdir is created', 'refuse', ['model'])
  wd = p('runs', 'k_local_corpus_dir_wmt')
  tour.t(S, 'train.local_corpus_dir_without_local', main_py(f'--workdir={wd}', '--config=configs/wmt_base.py', f'--config.local_corpus_dir={C}'),
         'local_corpus_dir without dataset=local (wmt_base.py): refused in one line naming local_corpus_dir', 'refuse',
         ['local_corpus_dir'], timeout=120)

  # resume with changed keys
  bm = p('runs', 'k_bm')
  bm_over = {'eval_every_steps': 5, 'eval_bleu_sentences': 4, 'keep_best': 1, 'best_metric': 'loss'}
  tour.t(S, 'resume.setup_keep_best_run', main_py(f'--workdir={bm}', *tiny(C), *cfg_args(bm_over)),
         'a run with keep_best=1 and best_metric=loss trains and keeps its best', 'ok', timeout=600,
         pred=lambda r: (os.path.isdir(os.path.join(bm, 'best')), 'best/ written'))
  tour.t(S, 'resume.changed_best_metric', main_py(f'--workdir={bm}', *tiny(C, num_train_steps=20), *cfg_args(dict(bm_over, best_metric='bleu'))),
         'resume with best_metric=bleu: refused in one line naming best_metric', 'refuse', ['best_metric'], timeout=600)
  tour.t(S, 'resume.dropped_keep_best', main_py(f'--workdir={bm}', *tiny(C, num_train_steps=20), *cfg_args(dict(bm_over, keep_best=0))),
         'resume with keep_best turned off: trains on (or one line)', 'ok_or_refuse', ['keep_best'], timeout=600)
  out = o()
  tour.t(S, 'resume.decode_checkpoint_best', main_py('--mode=decode', f'--workdir={bm}', '--checkpoint=best', f'--input={two}', f'--output={out}'),
         '--checkpoint=best decodes from the kept best', 'ok', pred=file_lines(out, 2))
  lr = p('runs', 'k_lr')
  shutil.copytree(base, lr)
  tour.t(S, 'resume.changed_lr_schedule', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=20), '--config.lr_schedule=constant', '--config.learning_rate=0.001'),
         'resume with another lr_schedule: one warning line naming the change, trains on', 'warn',
         ['changes at step', 'lr_schedule'], timeout=600)
  tour.t(S, 'resume.changed_optimizer', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30), '--config.optimizer=adafactor'),
         'resume with another optimizer: refused naming optimizer', 'refuse', ['optimizer'], timeout=600)
  tour.t(S, 'resume.changed_d_ff', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30, d_ff=128)),
         'resume with another d_ff: refused naming d_ff', 'refuse', ['d_ff'], timeout=600)
  tour.t(S, 'resume.changed_trainable', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30), "--config.trainable=decoder/.*|shared_embedding/.*"),
         'a run resumes only with the same trainable: refused naming trainable', 'refuse', ['trainable'], timeout=600)
  tour.t(S, 'resume.changed_vocab_sample_sentences', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30, vocab_sample_sentences=1000)),
         'vocab settings differ once a checkpoint exists: refused in one line', 'refuse', ['vocab_sample_sentences'], timeout=600)
  tour.t(S, 'resume.changed_label_smoothing', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=30), '--config.label_smoothing=0.2'),
         'a hyperparameter may change on resume: trains on', 'ok', timeout=600)
  tour.t(S, 'resume.cosine_warmup_above_new_total', main_py(f'--workdir={lr}', *tiny(C, num_train_steps=40, warmup_steps=100), '--config.lr_schedule=cosine', '--config.learning_rate=0.001'),
         'cosine with warmup 100 > 40 steps on resume: refused naming warmup_steps', 'refuse', ['warmup_steps'], timeout=600)
