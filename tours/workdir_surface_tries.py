"""The workdir surface of the user's tour (workdir_keys_streams_tries.py runs it first): a run
needs nothing outside its workdir once it has a checkpoint. Runs trained with a vocab model, a
model factory file, an optimizer factory file and init_from; then those inputs, the corpus and
the workdir itself are moved, renamed, deleted or edited, and every mode is run.
The keys and files surfaces use what it leaves: runs/base, inputs/other*.model, in/tgt_two.txt.
"""

import os
import shutil

from tours.user_tour_fixtures import (FACTORY, FACTORY_EDITED, FACTORY_SAME_SHAPES, OPTIMIZER,
                                      VERSES_ES)
from tours.user_tour_kit import (file_lines, main_py, read_bytes, same_file, sh, stdout_has, tiny,
                                 write)

# --------------------------------------------------------------------------- 1. workdir

def workdir_surface(tour):
  S, p = 'workdir', tour.p
  C = p('corpus')
  base, other, voc, fac = p('runs', 'base'), p('runs', 'other300'), p('runs', 'voc'), p('runs', 'fac')
  par, ft, ftfac, opt = p('runs', 'parent'), p('runs', 'ft'), p('runs', 'ftfac'), p('runs', 'opt')
  two, tgt2 = p('in', 'two.txt'), p('in', 'tgt_lf.txt')
  write(p('in', 'tgt_two.txt'), ''.join(v + '\n' for v in VERSES_ES[:2]))
  tgt2 = p('in', 'tgt_two.txt')
  n = [0]

  def o(tag):
    n[0] += 1
    return p('out', f'w{n[0]:03d}_{tag}')

  def every_mode(prefix, wd, extra_train, steps, exp_note, skip=()):
    """decode, eval, score, info, export, average, attention, resume on one workdir."""
    if 'decode' not in skip:
      out = o('decode.txt')
      tour.t(S, f'{prefix}.decode', main_py('--mode=decode', f'--workdir={wd}', f'--input={two}', f'--output={out}'),
             f'decode runs from the workdir alone ({exp_note})', 'ok', pred=file_lines(out, 2))
    if 'eval' not in skip:
      tour.t(S, f'{prefix}.eval', main_py('--mode=eval', f'--workdir={wd}'),
             f'eval runs from the workdir and the corpus ({exp_note})', 'ok')
    if 'score' not in skip:
      out = o('score.tsv')
      tour.t(S, f'{prefix}.score', main_py('--mode=score', f'--workdir={wd}', f'--input={two}', f'--targets={tgt2}', f'--output={out}'),
             f'score runs from the workdir alone ({exp_note})', 'ok', pred=file_lines(out, 2))
    if 'info' not in skip:
      tour.t(S, f'{prefix}.info', main_py('--mode=info', f'--workdir={wd}'),
             f'info prints the recorded run, inputs as provenance ({exp_note})', 'ok')
    if 'export' not in skip:
      out = o('hlo')
      tour.t(S, f'{prefix}.export', main_py('--mode=export', '--format=stablehlo', f'--workdir={wd}', f'--output={out}'),
             f'the StableHLO export is built and self-checked ({exp_note})', 'ok',
             pred=lambda r, out=out: (os.path.isfile(os.path.join(out, 'serve.py')), 'serve.py in the export'))
    if 'average' not in skip:
      tour.t(S, f'{prefix}.average', main_py('--mode=average', f'--workdir={wd}', '--config.average_last=1'),
             f'average writes averaged/ ({exp_note})', 'ok',
             pred=lambda r: (os.path.isdir(os.path.join(wd, 'averaged')), 'averaged/ present'))
    if 'attention' not in skip:
      out = o('att')
      tour.t(S, f'{prefix}.attention', main_py('--mode=attention', f'--workdir={wd}', f'--input={two}', f'--output={out}'),
             f'attention maps from the workdir alone ({exp_note})', 'ok',
             pred=lambda r, out=out: (os.path.isdir(os.path.join(out, 'sentence_0')) or os.path.isdir(os.path.join(out, 'sentence_1')), 'sentence folders written'))
    if 'resume' not in skip:
      tour.t(S, f'{prefix}.resume', main_py(f'--workdir={wd}', *extra_train(steps)),
             f'the same training command resumes to step {steps} ({exp_note})', 'ok',
             pred=lambda r: (f'step {steps}' in r.err, f'reached step {steps}' if f'step {steps}' in r.err else f'no "step {steps}" logged'),
             timeout=600)

  # --- setup runs (each is a try: training with the inputs under test)
  tour.t(S, 'base.train', main_py(f'--workdir={base}', *tiny(C)), 'a tiny run trains 10 steps and checkpoints', timeout=600)
  tour.t(S, 'other_vocab.train', main_py(f'--workdir={other}', *tiny(C, vocab_size=300)),
         'a second tiny run with a 300-piece vocabulary trains', timeout=600)
  os.makedirs(p('inputs', 'voc'), exist_ok=True)
  shutil.copy(os.path.join(base, 'vocab', 'spm.model'), p('inputs', 'voc', 'my.model'))
  shutil.copy(os.path.join(other, 'vocab', 'spm.model'), p('inputs', 'other300.model'))
  other400 = p('runs', 'other400')
  tour.t(S, 'other_corpus_vocab.train', main_py(f'--workdir={other400}', *tiny(p('corpus_ft'))),
         'a tiny run on another corpus (another 400-piece vocabulary) trains', timeout=600)
  shutil.copy(os.path.join(other400, 'vocab', 'spm.model'), p('inputs', 'other400.model'))
  write(p('inputs', 'fac', 'fac.py'), FACTORY)
  write(p('inputs', 'opt', 'opt.py'), OPTIMIZER)

  def voc_args(steps, vm=p('inputs', 'voc', 'my.model')):
    return tiny(C, vocab_model=vm, vocab_sample_sentences=None, num_train_steps=steps)
  tour.t(S, 'vocab_model.train', main_py(f'--workdir={voc}', *voc_args(10)),
         'a run with --config.vocab_model copies it into vocab/ and trains', timeout=600,
         pred=lambda r: (read_bytes(os.path.join(voc, 'vocab', 'spm.model')) == read_bytes(p('inputs', 'voc', 'my.model')), 'vocab/spm.model is the given file byte for byte'))

  fac_spec = p('inputs', 'fac', 'fac.py') + ':swiglu'

  def fac_args(steps, spec=fac_spec):
    return tiny(C, model=spec, num_train_steps=steps)
  tour.t(S, 'factory.train', main_py(f'--workdir={fac}', *fac_args(10)),
         'a run with a --config.model factory file trains', timeout=600)
  tour.t(S, 'parent.train', main_py(f'--workdir={par}', *tiny(C)), 'a parent run for fine-tuning trains', timeout=600)

  def ft_args(steps, init=par):
    d = tiny(p('corpus_ft'), vocab_sample_sentences=None, num_train_steps=steps)
    return d + ([f'--config.init_from={init}'] if init else [])
  tour.t(S, 'finetune.train', main_py(f'--workdir={ft}', *ft_args(10)),
         'a fine-tune from the parent on another corpus trains; vocab copied', timeout=600,
         pred=lambda r: (read_bytes(os.path.join(ft, 'vocab', 'spm.model')) == read_bytes(os.path.join(par, 'vocab', 'spm.model')), "vocab/spm.model is the parent's"))

  def ftfac_args(steps, spec=fac_spec):
    return tiny(p('corpus_ft'), vocab_sample_sentences=None, num_train_steps=steps, model=spec,
                init_from=fac)
  tour.t(S, 'finetune_factory.train', main_py(f'--workdir={ftfac}', *ftfac_args(10)),
         'a fine-tune of the factory run, naming the same factory, trains', timeout=600)

  def opt_args(steps):
    return tiny(C, optimizer=p('inputs', 'opt', 'opt.py') + ':lion', num_train_steps=steps)
  tour.t(S, 'optimizer_factory.train', main_py(f'--workdir={opt}', *opt_args(10)),
         'a run with an optimizer factory file trains', timeout=600)

  # --- the vocab model moved, then deleted
  shutil.move(p('inputs', 'voc'), p('inputs', 'voc_moved'))
  every_mode('moved_vocab_model', voc, lambda st: voc_args(st), 20,
             'docs: a vocab_model that has moved is no error at resume, decode, eval, score, info or export')
  tour.t(S, 'moved_vocab_model.resume_named_at_new_place',
         main_py(f'--workdir={voc}', *voc_args(30, p('inputs', 'voc_moved', 'my.model'))),
         'named again at its new place, same content: resumes', timeout=600)
  tour.t(S, 'moved_vocab_model.resume_named_other_file',
         main_py(f'--workdir={voc}', *voc_args(40, p('inputs', 'other400.model'))),
         'another vocab file named: refused in one line naming both sha256', 'refuse', words=['sha256'],
         timeout=600)
  ftv = p('runs', 'ft_voc')
  tour.t(S, 'moved_vocab_model.finetune_again',
         main_py(f'--workdir={ftv}', *tiny(C, vocab_sample_sentences=None, init_from=voc)),
         'a fine-tune of the run whose vocab_model moved trains', timeout=600)
  shutil.rmtree(p('inputs', 'voc_moved'))
  out = o('decode.txt')
  tour.t(S, 'deleted_vocab_model.decode', main_py('--mode=decode', f'--workdir={voc}', f'--input={two}', f'--output={out}'),
         'decode runs with the vocab_model deleted', pred=file_lines(out, 2))
  tour.t(S, 'deleted_vocab_model.resume', main_py(f'--workdir={voc}', *voc_args(50)),
         'the original training command resumes with the vocab_model deleted', timeout=600)

  # --- the factory file moved, then deleted, then edited
  shutil.move(p('inputs', 'fac'), p('inputs', 'fac_moved'))
  moved_spec = p('inputs', 'fac_moved', 'fac.py') + ':swiglu'
  out = o('decode.txt')
  tour.t(S, 'moved_factory.decode', main_py('--mode=decode', f'--workdir={fac}', f'--input={two}', f'--output={out}'),
         'decode runs with the factory file moved (recorded source loads)', pred=file_lines(out, 2))
  tour.t(S, 'moved_factory.resume_named_at_new_place', main_py(f'--workdir={fac}', *fac_args(20, moved_spec)),
         'named at its new place with the same sha256: resumes', timeout=600)
  tour.t(S, 'moved_factory.resume_old_command', main_py(f'--workdir={fac}', *fac_args(30)),
         'the original command (file gone from that path) resumes from the recorded source', timeout=600)
  shutil.rmtree(p('inputs', 'fac_moved'))
  every_mode('deleted_factory', fac, lambda st: fac_args(st), 40,
             'docs: the recorded source loads when the file is gone')
  ftfac2 = p('runs', 'ftfac2')
  tour.t(S, 'deleted_factory.finetune_again',
         main_py(f'--workdir={ftfac2}', *ftfac_args(10)),
         "a new fine-tune naming the gone factory file loads its parent's recorded one", timeout=600)
  tour.t(S, 'deleted_factory.finetune_resume', main_py(f'--workdir={ftfac}', *ftfac_args(20)),
         'the fine-tune of the factory run resumes with the factory file gone', timeout=600)
  ftfac3 = p('runs', 'ftfac3')
  tour.t(S, 'deleted_factory.finetune_without_model_key',
         main_py(f'--workdir={ftfac3}', *tiny(p('corpus_ft'), vocab_sample_sentences=None, init_from=fac)),
         "a fine-tune that does not name --config.model: the model is the source's (trains) or one line",
         'ok_or_refuse', words=['model'], timeout=600)
  write(p('inputs', 'fac', 'fac.py'), FACTORY_EDITED)
  tour.t(S, 'edited_factory.resume', main_py(f'--workdir={fac}', *fac_args(50)),
         'an edited factory file at the recorded path: refused in one line (another model)', 'refuse',
         words=[('fac.py', 'model', 'sha256')], timeout=600)
  out = o('decode.txt')
  tour.t(S, 'edited_factory.decode', main_py('--mode=decode', f'--workdir={fac}', f'--input={two}', f'--output={out}'),
         'decode with an edited file at the recorded path: the recorded model decodes, or one line',
         'ok_or_refuse', words=[('fac.py', 'model', 'sha256')], pred=file_lines(out, 2))
  out = o('decode.txt')
  tour.t(S, 'edited_factory.decode_naming_it',
         main_py('--mode=decode', f'--workdir={fac}', f'--input={two}', f'--output={out}', f'--config.model={fac_spec}'),
         'decode naming the edited file: refused in one line (model key / sha256)', 'refuse',
         words=[('fac.py', 'model', 'sha256')])
  shutil.rmtree(p('inputs', 'fac'))

  # --- a second factory run: plain deletion, then an edit that keeps every parameter shape
  fac2 = p('runs', 'fac2')
  write(p('inputs', 'fac2', 'fac.py'), FACTORY)
  fac2_spec = p('inputs', 'fac2', 'fac.py') + ':swiglu'
  tour.t(S, 'factory2.train', main_py(f'--workdir={fac2}', *tiny(C, model=fac2_spec, num_train_steps=150, checkpoint_every_steps=50)),
         'a 150-step run with a factory file trains', timeout=600)
  sref = o('score.tsv')
  tour.t(S, 'factory2.score_reference', main_py('--mode=score', f'--workdir={fac2}', f'--input={two}', f'--targets={tgt2}', f'--output={sref}'),
         'scores with the factory file in place (the reference)', pred=file_lines(sref, 2))
  os.remove(p('inputs', 'fac2', 'fac.py'))
  out = o('score.tsv')
  tour.t(S, 'deleted_factory_plain.score', main_py('--mode=score', f'--workdir={fac2}', f'--input={two}', f'--targets={tgt2}', f'--output={out}'),
         'factory file deleted (never moved): the recorded source loads, the same scores', pred=same_file(out, sref))
  out = o('decode.txt')
  tour.t(S, 'deleted_factory_plain.decode', main_py('--mode=decode', f'--workdir={fac2}', f'--input={two}', f'--output={out}'),
         'factory file deleted: decode runs from the recorded source', pred=file_lines(out, 2))
  out = o('ct2')
  tour.t(S, 'deleted_factory_plain.export_ctranslate2', main_py('--mode=export', '--format=ctranslate2', f'--workdir={fac2}', f'--output={out}'),
         'docs: --format=ctranslate2 refuses a variant, in one line', 'refuse', [('model', 'variant', 'ctranslate2')])
  write(p('inputs', 'fac2_new', 'fac.py'), FACTORY_SAME_SHAPES)
  tour.t(S, 'edited_factory_new_place.resume',
         main_py(f'--workdir={fac2}', *tiny(C, model=p('inputs', 'fac2_new', 'fac.py') + ':swiglu', num_train_steps=200, checkpoint_every_steps=50)),
         'docs: an edited file named at another place is another model and refused, naming model', 'refuse', ['model'],
         timeout=600)
  write(p('inputs', 'fac2', 'fac.py'), FACTORY_SAME_SHAPES)
  out = o('score.tsv')
  tour.t(S, 'edited_factory_same_shapes.score', main_py('--mode=score', f'--workdir={fac2}', f'--input={two}', f'--targets={tgt2}', f'--output={out}'),
         'docs: the recorded file edited where it is (silu -> relu, same shapes) runs with one warning naming it and both sha256',
         'warn', ['fac.py', 'sha256'], pred=lambda r: (read_bytes(out) != read_bytes(sref), 'the edited code scores (other numbers than the reference)'))
  tour.t(S, 'edited_factory_same_shapes.resume', main_py(f'--workdir={fac2}', *tiny(C, model=fac2_spec, num_train_steps=200, checkpoint_every_steps=50)),
         'docs: the recorded file edited where it is resumes with one warning naming it and both sha256', 'warn',
         ['fac.py', 'sha256'], timeout=600)
  shutil.rmtree(p('inputs', 'fac2'))
  shutil.rmtree(p('inputs', 'fac2_new'))

  # --- the parent of a fine-tune moved, then deleted
  shutil.move(par, p('runs', 'parent_moved'))
  tour.t(S, 'moved_parent.finetune_resume_old_command', main_py(f'--workdir={ft}', *ft_args(20)),
         'the fine-tune resumes with its parent moved away (init_from path gone)', timeout=600)
  tour.t(S, 'moved_parent.finetune_resume_new_path',
         main_py(f'--workdir={ft}', *ft_args(30, p('runs', 'parent_moved'))),
         'the fine-tune resumes with init_from naming the moved parent', timeout=600)
  shutil.rmtree(p('runs', 'parent_moved'))
  tour.t(S, 'deleted_parent.finetune_resume_without_init_from', main_py(f'--workdir={ft}', *ft_args(40, None)),
         'the fine-tune resumes with its parent deleted and init_from left out', timeout=600)
  tour.t(S, 'deleted_parent.info', main_py('--mode=info', f'--workdir={ft}'),
         'info shows where the fine-tune started (the gone parent)', pred=stdout_has(par))
  every_mode('deleted_parent', ft, lambda st: ft_args(st), 50,
             'docs: once it has a checkpoint, its parent is history', skip=('info',))
  ft2 = p('runs', 'ft_of_ft')
  tour.t(S, 'deleted_parent.finetune_from_orphan',
         main_py(f'--workdir={ft2}', *tiny(C, vocab_sample_sentences=None, init_from=ft)),
         'a fine-tune of the fine-tune whose parent is gone trains', timeout=600)
  tour.t(S, 'deleted_parent.new_finetune_from_gone_parent',
         main_py(f'--workdir={p("runs", "ft_gone")}', *tiny(C, vocab_sample_sentences=None, init_from=par)),
         'a new fine-tune from a deleted parent: refused in one line naming init_from / the path', 'refuse',
         words=[('init_from', par)], timeout=600)

  # --- a corpus moved, edited, not named
  rc_ = p('runs', 'corp')
  cc, cc2 = p('corpus_c'), p('corpus_c_moved')
  tour.t(S, 'corpus.train', main_py(f'--workdir={rc_}', *tiny(cc)), 'a run on its own corpus folder trains', timeout=600)
  shutil.move(cc, cc2)
  tour.t(S, 'moved_corpus.resume_old_command', main_py(f'--workdir={rc_}', *tiny(cc, num_train_steps=20)),
         'resume naming the gone corpus folder: refused in one line naming that folder',
         'refuse', words=[cc], timeout=600)
  tour.t(S, 'moved_corpus.resume_new_dir', main_py(f'--workdir={rc_}', *tiny(cc2, num_train_steps=20)),
         'resume naming the moved, byte-identical corpus resumes', timeout=600)
  out = o('decode.txt')
  tour.t(S, 'moved_corpus.decode', main_py('--mode=decode', f'--workdir={rc_}', f'--input={two}', f'--output={out}'),
         'decode does not read the corpus: runs', pred=file_lines(out, 2))
  tour.t(S, 'moved_corpus.eval_without_naming_it', main_py('--mode=eval', f'--workdir={rc_}'),
         'eval reads the corpus: runs from the workdir, or one line naming the folder and the flag',
         'ok_or_refuse', words=['local_corpus_dir'])
  tour.t(S, 'moved_corpus.eval_new_dir', main_py('--mode=eval', f'--workdir={rc_}', f'--config.local_corpus_dir={cc2}'),
         'eval naming the moved corpus runs')
  tour.t(S, 'moved_corpus.resume_bundled', main_py(f'--workdir={rc_}', *tiny(None, dataset=None, local_corpus_dir=None, num_train_steps=30)),
         'resume naming no corpus (the bundled one): refused, told the folder trained on and the flag', 'refuse',
         words=['local_corpus_dir', cc2], bad=['bible_en_es/train.en (gone)'], timeout=600)
  shutil.copy(os.path.join(cc2, 'train.es'), p('train.es.bak'))
  with open(os.path.join(cc2, 'train.es'), 'a') as f:
    f.write('Una línea más.\n')
  with open(os.path.join(cc2, 'train.en'), 'a') as f:
    f.write('One more line.\n')
  tour.t(S, 'edited_corpus.resume_train_file_changed', main_py(f'--workdir={rc_}', *tiny(cc2, num_train_steps=30)),
         'a changed training file: refused in one line naming it', 'refuse', words=['train.'], timeout=600)
  sh(f'head -n 1500 {cc2}/train.en > {cc2}/t && mv {cc2}/t {cc2}/train.en')
  shutil.copy(p('train.es.bak'), os.path.join(cc2, 'train.es'))
  sh(f"sed -i '1s/^/X /' {cc2}/dev.es")
  tour.t(S, 'edited_corpus.resume_dev_file_changed', main_py(f'--workdir={rc_}', *tiny(cc2, num_train_steps=30)),
         'a changed dev file only warns; the run resumes', 'warn', words=['dev'], timeout=600)

  # --- the workdir itself moved
  vm = p('runs', 'voc_moved_wd')
  shutil.move(voc, vm)
  every_mode('moved_workdir', vm, lambda st: voc_args(st), 60, 'the workdir moved to another path')
  tour.t(S, 'moved_workdir.finetune_from_it',
         main_py(f'--workdir={p("runs", "ft_of_moved")}', *tiny(C, vocab_sample_sentences=None, init_from=vm)),
         'a fine-tune from the moved workdir trains', timeout=600)
  cp = p('runs', 'base_copy')
  shutil.copytree(base, cp)
  tour.t(S, 'copied_workdir.resume', main_py(f'--workdir={cp}', *tiny(C, num_train_steps=20)),
         'a copy of a workdir resumes on its own', timeout=600)

  # --- the optimizer factory file deleted
  shutil.rmtree(p('inputs', 'opt'))
  out = o('decode.txt')
  tour.t(S, 'deleted_optimizer_factory.decode', main_py('--mode=decode', f'--workdir={opt}', f'--input={two}', f'--output={out}'),
         'decode does not optimise: runs with the optimizer factory file gone', pred=file_lines(out, 2))
  tour.t(S, 'deleted_optimizer_factory.info', main_py('--mode=info', f'--workdir={opt}'),
         'info prints the run with the optimizer factory file gone')
  tour.t(S, 'deleted_optimizer_factory.eval', main_py('--mode=eval', f'--workdir={opt}'),
         'eval does not optimise: runs')
  tour.t(S, 'deleted_optimizer_factory.resume', main_py(f'--workdir={opt}', *opt_args(20)),
         'resume: the factory is not recorded (docs: not hashed), so one line naming --config.optimizer (and only true advice) is fine',
         'ok_or_refuse', words=['optimizer'], bad=['--config.model='], timeout=600)

  # --- the workdir's own files damaged or mixed with another run
  vr = p('runs', 'base_vr')
  shutil.copytree(base, vr)
  shutil.copy(p('inputs', 'other300.model'), os.path.join(vr, 'vocab', 'spm.model'))
  out = o('decode.txt')
  tour.t(S, 'replaced_vocab.decode', main_py('--mode=decode', f'--workdir={vr}', f'--input={two}', f'--output={out}'),
         'a replaced vocab/spm.model stops decode in one line naming it', 'refuse', words=['spm.model'])
  tour.t(S, 'replaced_vocab.resume', main_py(f'--workdir={vr}', *tiny(C, num_train_steps=20)),
         'a replaced vocab/spm.model stops resume in one line naming it', 'refuse', words=['spm.model'], timeout=600)
  out = o('decode.txt')
  tour.t(S, 'checkpoint_of_other_run.decode',
         main_py('--mode=decode', f'--workdir={base}', f'--checkpoint={os.path.join(other, "checkpoints", "10")}', f'--input={two}', f'--output={out}'),
         "--checkpoint=PATH of another run: refused in one line naming the checkpoint", 'refuse',
         words=[('checkpoint', 'checkpoints/10')])
