"""What a server translates with: the run's parameters, loaded once, and a `Translator` per
direction and decoding settings, as `--mode=decode` builds it for the same keys
(`translate.from_config` of the run's config with the request's language pair and keys),
so that a sentence's translation is decode's whatever batch it is decoded in.

`answer` turns a checked request (`requests.Request`) into its JSON answer through the
batcher; `decode_group` is the batcher's `decode`.
"""

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import ml_collections

from t2t_jax.choices import ConfigError
from t2t_jax.data import tasks, vocabularies
from t2t_jax.inference import modes, translate
from t2t_jax.serving import batcher as batcher_lib
from t2t_jax.serving.languages import Pairs
from t2t_jax.serving.requests import Request, Settings


class Service:
  """A trained run ready to translate (see the module doc)."""

  def __init__(self, workdir: str, overrides: modes.Overrides, checkpoint: Optional[str]):
    self.workdir = workdir
    if jax.process_count() > 1:
      raise ConfigError('--mode=serve runs in one process (on its host\'s devices); run it '
                        'without --distributed')
    self.config, inference = modes.load(workdir, checkpoint, overrides)
    if tasks.get(self.config.dataset) is not None:
      raise ConfigError(f'--mode=serve translates; {workdir} is a {self.config.dataset} run, '
                        'whose trees --mode=decode writes')
    self.checkpoint = inference.path
    self.params = inference.params
    self.pairs = Pairs.of_run(self.config, vocabularies.load(workdir, self.config))
    self._translators: Dict[Tuple, translate.Translator] = {}
    self._lock = threading.Lock()
    c = self.config
    self.default = Settings(c.source_lang, c.target_lang, c.decode_strategy, 1, c.sample_seed,
                            c.temperature, c.top_k, c.top_p, False)
    self.batcher = batcher_lib.Batcher(
        self.decode_group, max_wait_s=c.serve_max_wait_ms / 1000.0,
        max_sentences=c.serve_max_sentences, max_tokens=c.serve_max_tokens,
        max_queue=c.serve_max_queue, workers=self.translator(self.default).threads)

  def translator(self, settings: Settings) -> translate.Translator:
    """The Translator of `settings`' direction and search, built once."""
    key = (settings.source, settings.target, settings.decode_strategy, settings.sample_seed,
           settings.temperature, settings.top_k, settings.top_p)
    with self._lock:
      if key not in self._translators:
        config = ml_collections.ConfigDict(self.config.to_dict())
        config.update(source_lang=settings.source, target_lang=settings.target,
                      decode_strategy=settings.decode_strategy,
                      sample_seed=settings.sample_seed, temperature=settings.temperature,
                      top_k=settings.top_k, top_p=settings.top_p)
        self._translators[key] = translate.from_config(
            config, self.params, vocabularies.load(self.workdir, config))
      return self._translators[key]

  def warm_up(self) -> List[int]:
    """Compiles (or loads from the persistent cache) the default direction's decode at every
    padded source length; returns them."""
    return self.translator(self.default).compile_buckets()

  def answer(self, request: Request, timeout: Optional[float] = None) -> Dict[str, Any]:
    """The JSON answer of `request`, decoded with the requests queued beside it.
    Raises batcher.Busy when the queue is full."""
    lines = [line for text in request.texts for line in text.split('\n')]
    prefixes = None
    if request.prefixes is not None:
      prefixes = [p for text, p in zip(request.texts, request.prefixes)
                  for _ in text.split('\n')]
    tokenizer = self.translator(request.settings).tokenizer
    tokens = sum(len(tokenizer.encode(line)) + 1 for line in lines)
    future = self.batcher.submit(request.settings, lines, tokens, prefixes)
    decoded = future.result(timeout)
    return _shape(request, decoded)

  def decode_group(self, settings: Settings, items: List[batcher_lib.Item]) -> List[Any]:
    """The batcher's `decode`: the items' lines in one call; per item, its lines' best
    translations, or their n-best `Hypothesis` lists (nbest > 1, a target prefix)."""
    translator = self.translator(settings)
    lines = [line for item in items for line in item.lines]
    # Sampling draws by line number: each request's lines count from 1, as decode's file.
    numbers = [n + 1 for item in items for n in range(len(item.lines))]
    if settings.nbest > 1 or settings.prefixed:
      prefixes = ([p for item in items for p in item.payload] if settings.prefixed else None)
      out: Sequence[Any] = translator.translate_n_best(lines, settings.nbest, None, numbers,
                                                      prefixes)
    else:
      out = translator.translate(lines, None, numbers)
    results, start = [], 0
    for item in items:
      results.append(out[start:start + len(item.lines)])
      start += len(item.lines)
    return results

  def close(self) -> None:
    self.batcher.close()


def _shape(request: Request, decoded: Sequence[Any]) -> Dict[str, Any]:
  """`decoded` (per line) regrouped by `q` item, in the answer's shape."""
  per_text, start = [], 0
  for text in request.texts:
    count = len(text.split('\n'))
    per_text.append(list(decoded[start:start + count]))
    start += count
  n_best = request.settings.nbest > 1 or request.settings.prefixed
  best = ['\n'.join(h[0].text if h else '' for h in lines) if n_best else '\n'.join(lines)
          for lines in per_text]
  if request.api == 'libretranslate':
    answer: Dict[str, Any] = {'translatedText': best[0] if request.single else best}
    if n_best:  # `alternatives`: the next translations of a one-line text
      alternatives = [[h.text for h in (lines[0][1:] if lines else [])] for lines in per_text]
      answer['alternatives'] = alternatives[0] if request.single else alternatives
    return answer
  items = []
  for text, lines in zip(best, per_text):
    item: Dict[str, Any] = {'text': text}
    if n_best:
      item['hypotheses'] = [[{'text': h.text, 'score': h.score, 'log_prob': h.log_prob}
                             for h in hyps] for hyps in lines]
    items.append(item)
  return {'translations': items[0] if request.single else items}
