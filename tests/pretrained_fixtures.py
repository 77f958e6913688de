"""The fixtures of tests/pretrained/ (a pytest plugin that tests/conftest.py registers): the
transformers models, each made once a session, and the fine-tune command line."""

import os

import pytest

from conftest import run_main, shared_once


# The transformers models tests/pretrained/ shares (benchmarks/shared/transformers_models.py): each made once a
# session (seconds of training), imported into a workdir no test writes into.
def _imported(tmp_path_factory, name, family, languages=None):
  torch = pytest.importorskip('torch')
  # One thread: the pytest-xdist workers already keep every core busy, and torch's threads
  # contending with them made the model's training ~3x slower (63 s per worker, cold).
  torch.set_num_threads(1)
  from benchmarks.shared import transformers_models as hf_models  # pylint: disable=import-outside-toplevel
  from t2t_jax.pretrained import import_mode  # pylint: disable=import-outside-toplevel

  def make(root):
    import_mode.run(getattr(hf_models, f'{family}_dir')(os.path.join(root, 'hf')),
                    os.path.join(root, 'w'), languages)
  root = shared_once(tmp_path_factory, name, make)  # once a session, whatever the workers
  folder, workdir = os.path.join(root, 'hf'), os.path.join(root, 'w')
  model, tok = hf_models.load(folder)
  if languages:
    tok.src_lang, tok.tgt_lang = languages['source_lang'], languages['target_lang']
  return folder, workdir, model, tok


@pytest.fixture(scope='session')
def marian(tmp_path_factory):
  """(a MarianMT directory, its imported workdir, transformers' model and tokenizer)."""
  return _imported(tmp_path_factory, 'marian', 'marian')


@pytest.fixture(scope='session')
def m2m(tmp_path_factory):
  """(an M2M100 directory, its imported workdir (en -> es), transformers' model and
  tokenizer)."""
  from benchmarks.shared import transformers_models as hf_models  # pylint: disable=import-outside-toplevel
  return _imported(tmp_path_factory, 'm2m100', 'm2m100', hf_models.PAIR)


@pytest.fixture(scope='session')
def nllb(tmp_path_factory):
  """(an NLLB directory (M2M100's model, NllbTokenizer), its imported workdir (eng_Latn ->
  spa_Latn), transformers' model and tokenizer)."""
  from benchmarks.shared import transformers_models as hf_models  # pylint: disable=import-outside-toplevel
  return _imported(tmp_path_factory, 'nllb', 'nllb', hf_models.NLLB_PAIR)


def fine_tune(parent, corpus, run, steps, *extra):
  """`main.py` training `run` from `parent` with `--config.init_from` alone (no model key
  typed) on `corpus`, `steps` steps, a checkpoint and a dev evaluation at the last: the
  result (tests/pretrained/)."""
  return run_main(f'--workdir={run}', f'--config.init_from={parent}',
                  f'--config.local_corpus_dir={corpus}', f'--config.num_train_steps={steps}',
                  f'--config.checkpoint_every_steps={steps}',
                  f'--config.eval_every_steps={steps}', '--config.eval_bleu_sentences=0',
                  '--config.final_eval_split=', '--config.tokens_per_batch=1024',
                  '--config.warmup_steps=1', *extra, timeout=600)


def n_best_against_transformers(workdir, model, tok, sources, alpha, rule, **generate):
  """(our 4-best lists of `sources` by length `rule` in transformers' ids, transformers' own
  (`generate(num_beams=4, length_penalty=alpha, **generate)`), our scores, theirs)."""
  from benchmarks.shared import transformers_models as hf_models  # pylint: disable=import-outside-toplevel
  from t2t_jax.inference.translate import Translator  # pylint: disable=import-outside-toplevel
  order = hf_models.id_order(tok, model.config.vocab_size)
  translator = Translator.from_workdir(workdir, beam_size=4, alpha=alpha, length_rule=rule)
  ours = translator.translate_n_best(sources)
  theirs = [hf_models.beam_n_best(model, tok, s, beam_size=4, alpha=alpha,
                                  max_new_tokens=len(tok(s)['input_ids']) + 50, **generate)
            for s in sources]
  assert all(ended for hyps in theirs for _, ended, _ in hyps), 'the test wants ended outputs'
  mine = [[[int(order[i]) for i in h.ids] for h in hyps] for hyps in ours]
  return (mine, [[ids for ids, _, _ in hyps] for hyps in theirs],
          [[h.score for h in hyps] for hyps in ours],
          [[score for _, _, score in hyps] for hyps in theirs])
