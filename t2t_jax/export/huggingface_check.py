"""The self-check of a transformers export (`huggingface_export.convert`): the directory,
loaded by transformers' own `AutoModelForSeq2SeqLM` and `AutoTokenizer` (where torch and
transformers are installed), must encode the self-check sentences to our ids, decode them
greedily to our outputs (with our language token forced first, as `forced_bos_token_id`),
and score our outputs as we do to 1e-4 per sentence. Otherwise nothing is written."""

from typing import Any

import numpy as np

from t2t_jax.data import language_tokens
from t2t_jax.export.common import ExportError, ExportSource


def check(source: ExportSource, folder: str, rows: np.ndarray) -> str:
  """What was checked, or why nothing was; ExportError naming the first sentence that
  differs. `rows[their id]` = our id."""
  try:
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
  except ImportError:
    return 'not checked through transformers (torch and transformers are not installed)'
  # pylint: disable=import-outside-toplevel
  from t2t_jax.export import self_check as checks
  from t2t_jax.inference import translate
  from t2t_jax.model import scoring
  tok = language_tokens.wrap(source.tokenizer(), source.config)
  sentences = checks.check_sentences(source.config, tok)
  extra = checks.Settings.of(source.config).max_decode_extra
  ours = translate.Translator(source.transformer, source.params, tok, strategy='greedy',
                              max_decode_extra=extra, threads=1,
                              parallelism='threads').translate_ids(sentences)
  model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
  their_tok = _tokenizer(transformers, folder, source.config)
  theirs_of = {int(r): j for j, r in enumerate(rows)}
  forced = language_tokens.forced(tok)
  options = {'forced_bos_token_id': theirs_of[forced[0]]} if forced else {}
  worst = 0.0
  for i, (sentence, mine) in enumerate(zip(sentences, ours)):
    where = f'self-check sentence {i + 1} {sentence[:40]!r}'
    batch = their_tok([sentence], return_tensors='pt')
    if batch['input_ids'][0].tolist() != [theirs_of[t] for t in list(tok.encode(sentence)) + [1]]:
      raise ExportError(f'the transformers tokenizer written to {folder} encodes {where} '
                        'otherwise; nothing was written')
    # Ours: at most input + max_decode_extra tokens, EOS included, within max_len; theirs count
    # the start token too.
    limit = min(batch['input_ids'].shape[1] + extra, source.model_config.max_len)
    with torch.no_grad():
      generated = model.generate(**batch, num_beams=1, do_sample=False, max_length=limit + 1,
                                 **options).tolist()[0][1:]
      labels = torch.tensor([[theirs_of[t] for t in list(mine) + [1]]])
      logits = model(**batch, labels=labels).logits
    eos = theirs_of[1]
    its = [int(rows[t]) for t in (generated[:generated.index(eos)] if eos in generated
                                  else generated)]
    if its != list(mine):
      raise ExportError(f'the transformers model written to {folder} decodes {where} as '
                        f'{its[:8]}..., ours greedily as {list(mine)[:8]}...; nothing was '
                        'written')
    theirs = float(torch.log_softmax(logits, -1)[0].gather(1, labels[0][:, None]).sum())
    mine_lp = float(scoring.token_log_probs(
        source.transformer, source.params, np.asarray([list(tok.encode(sentence)) + [1]]),
        np.asarray([list(mine) + [1]])).sum())
    worst = max(worst, abs(theirs - mine_lp))
    if abs(theirs - mine_lp) > 1e-4:
      raise ExportError(f'the transformers model written to {folder} scores {where} '
                        f'{theirs:.6f}, ours {mine_lp:.6f}; nothing was written')
  return (f'checked through transformers {transformers.__version__}: {len(sentences)} '
          f'sentences decode as ours (greedy), log probs within {worst:.1e}')


def _tokenizer(transformers: Any, folder: str, config: Any) -> Any:
  tok = transformers.AutoTokenizer.from_pretrained(folder)
  if getattr(config, 'language_tokens', ''):
    tok.src_lang, tok.tgt_lang = config.source_lang, config.target_lang
  return tok
