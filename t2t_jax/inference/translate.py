"""Translating text with beam search (§6.1), greedy search or sampling, in input order.

Sentences are tokenized, sorted by length and decoded in batches of a fixed number of rows
padded to a fixed set of lengths (one compilation per length bucket), then put back in input
order; empty lines stay empty. Maximum output length = input length (tokens, with EOS) +
max_decode_extra. Devices: on an accelerator host every batch is split over all its chips
(SPMD; `multihost` splits the sentences across processes); on CPU batches run on one device,
one batch per core at once (`choose_parallelism`).
"""

import functools
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import jax
import numpy as np
from absl import logging
from jax.sharding import NamedSharding, PartitionSpec as P

from t2t_jax.inference import portable
from t2t_jax.inference.portable import truncation_warning  # noqa: F401  (re-exported)
from t2t_jax.inference.progress import end_progress_line, print_progress  # noqa: F401  (re-exported)
from t2t_jax.inference import prefixes as prefix_lib
from t2t_jax.inference.batch_search import (  # noqa: F401  (re-exported: translate.decode_batch)
    SearchSettings, decode_batch, decode_batch_n_best, decoder, sharded_decoder)
from t2t_jax.model import array_checks, transformer as model_lib, search, variant
from t2t_jax.runtime import multihost


PARALLELISM = ('auto', 'sharded', 'threads')


def choose_parallelism(parallelism: str = 'auto',
                       devices: Optional[Sequence[jax.Device]] = None) -> str:
  """'sharded' or 'threads': how a process spreads decoding over `devices` (its local ones).

  'sharded': every batch's rows split over all local devices, one SPMD beam search
  (`sharded_decoder`). 'threads': every batch on the first local device, `threads` batches
  at once. 'auto' is 'sharded' on accelerators with several local devices (a TPU v5e-8 host,
  an 8-GPU host: each chip decodes its own rows instead of idling), otherwise 'threads'. A
  CPU has one device unless more are simulated (--xla_force_host_platform_device_count, as
  the tests do), and simulated devices share the same cores: splitting rows over them adds
  no compute, only per-device overhead and batches rounded up to the device count. On the
  bundled test set (2 loaded cores, 8 simulated devices, quickstart's model, 4 and 8 rows:
  benchmarks/peers/decode_sharded.py) sharded decoding ran 0.81-0.87x as fast as one device, the
  same translations; threads use idle cores (1.6x on 2 idle ones: `default_threads`).
  """
  if parallelism not in PARALLELISM:
    raise ValueError(f'parallelism {parallelism!r}: expected one of {PARALLELISM}')
  if parallelism != 'auto':
    return parallelism
  devices = jax.local_devices() if devices is None else devices
  return 'sharded' if len(devices) > 1 and devices[0].platform != 'cpu' else 'threads'


class Hypothesis(NamedTuple):
  """One translation of an n-best list (`Translator.translate_n_best`): `text`, its token
  `ids` (up to, not including, EOS), `log_prob` = log p(ids + [EOS] | source) with padding
  excluded from the softmax as decoding does (`scoring.token_log_probs(..., exclude_pad=True)`
  summed) and `score` = log_prob / length_penalty(len(ids) + 1, ...), what the beam ranks by."""
  text: str
  ids: List[int]
  score: float
  log_prob: float


class Translator:
  """Decoding sentences with a trained model. `Translator.from_workdir(workdir)` loads a run's
  config, parameters, vocabulary and decoding settings; `translate` gives the best
  translations, `translate_n_best` the n best with their scores.

  Args:
    model: the model (`Transformer`, or a variant with its own extension points), or its
      `TransformerConfig` (the paper's model).
    params: model parameters (host arrays, device arrays or the training mesh's replicated
      arrays); placed on the decoding devices once, at the first `translate` after they are
      set (assigning `translator.params` re-places them, and compiles nothing new).
    tokenizer: `encode(str) -> ids` (no EOS), `decode(ids) -> str` (data.tokenizer.Tokenizer);
      its `forced` ids (`data/language_tokens.py`) start every translation.
    beam_size, alpha: 4 and 0.6 in the paper. max_decode_extra: output length <= input + this.
    length_rule: 'gnmt' (the paper's) or 'transformers' (`model/length_rules.py`).
    batch_sentences: rows of every decode batch; sharded, rounded up to a multiple of the
      local device count (the last batch of a call is padded with empty rows).
    bucket_lengths: padded source lengths; longer inputs are padded to a multiple of 32.
    threads: batches decoded at once (None or 0: `portable.default_threads()`, one per core
      on a CPU backend, with 'threads'; 1 with 'sharded').
    parallelism: 'auto', 'sharded' or 'threads' (`choose_parallelism`); no choice changes a
      translation.
    strategy, no_repeat_ngram_size, temperature, top_k, top_p: `batch_search.SearchSettings`
      (defaults: the paper's beam search).
    seed: sampling's seed: sample j of line i draws with `fold_in(fold_in(PRNGKey(seed), i),
      j)`, the same in any batch, on any device or process count.

  Attributes:
    parallelism: 'sharded' or 'threads', as chosen.
    mesh: the decoding devices (`multihost.local_mesh`): all local ones when sharded, else
      the first.
    placements: how many times parameters were placed on `mesh`.
    truncated_lines: 1-based positions, in the last `translate` call's input, of the inputs
      cut to fit `cfg.max_len` (a warning names them too).
  """

  def __init__(self, model: model_lib.ModelLike, params, tokenizer, *, beam_size: int = 4,
               alpha: float = 0.6, max_decode_extra: int = 50, batch_sentences: int = 64,
               bucket_lengths: Sequence[int] = (16, 32, 64, 128, 256),
               threads: Optional[int] = None, parallelism: str = 'auto',
               strategy: str = 'beam', no_repeat_ngram_size: int = 0, temperature: float = 1.0,
               top_k: int = 0, top_p: float = 1.0, seed: int = 0, length_rule: str = 'gnmt'):
    search.check_length_rule('Translator', length_rule)
    self.model = model_lib.as_model(model, deterministic=True, decode=False)
    self.cfg = self.model.cfg
    _check_tokenizer(tokenizer, self.cfg.vocab_size)
    if beam_size < 1:
      raise ValueError(f'Translator: beam_size={beam_size}; expected 1 or more')
    self.params = params
    self.tokenizer = tokenizer
    self.forced = list(getattr(tokenizer, 'forced', []))  # `data/language_tokens.py`
    self.beam_size, self.alpha = beam_size, alpha
    self.max_decode_extra = max_decode_extra
    self.parallelism = choose_parallelism(parallelism)
    devices = jax.local_devices()
    self.mesh = multihost.local_mesh(devices if self.parallelism == 'sharded' else devices[:1])
    self.batch_sentences = -(-batch_sentences // self.mesh.size) * self.mesh.size
    self.bucket_lengths = tuple(sorted(bucket_lengths))
    self.threads = threads or (portable.default_threads() if self.parallelism == 'threads'
                               else 1)
    self.settings, self.seed = SearchSettings(beam_size, alpha, strategy, no_repeat_ngram_size,
                                              temperature, top_k, top_p, length_rule), seed
    self._decode, self._decode_n_best = (
        decoder(self.model, beam_size, alpha, self.mesh, n_best=b, length_rule=length_rule)
        for b in (False, True))
    self._search = sharded_decoder(self.model, beam_size, alpha, self.mesh, n_best=True,
                                   settings=self.settings)
    self.placements = 0
    self.compiled_shapes = set()
    self.truncated_lines: List[int] = []

  @classmethod
  def from_workdir(cls, workdir: str, checkpoint: Optional[str] = None, *,
                   model: Optional[model_lib.Transformer] = None, **overrides: Any
                   ) -> 'Translator':
    """The Translator of a trained run `workdir` (local or gs://), as `--mode=decode` builds it:
    the run's config, vocabulary and decoding settings, and the parameters of `checkpoint`
    (`checkpoint_choice.load_inference_params`: None is the newest averaged checkpoint if
    any, else the newest training one; or a step such as '800', or a checkpoint's path).

    `model`: the variant the run was trained with (its extension points kept, its config
    the run's); None: the one the run's config names (`--config.model`, the paper's).
    `overrides`: `Translator` arguments that replace the run's settings (beam_size, alpha,
    batch_sentences, parallelism, ...).
    Raises, in one line: `CheckpointError` naming a folder without (readable) checkpoints,
    `TokenizerError` naming a missing or damaged vocabulary file.
    """
    # Here, not at the top: parameters in memory need no orbax or sentencepiece.
    from t2t_jax.data import vocabularies
    from t2t_jax.runtime import resolution
    from t2t_jax.inference import checkpoint_choice
    inference = checkpoint_choice.load_inference_params(workdir, checkpoint)
    config = resolution.from_saved(inference.config_json, f'checkpoint {inference.path}')
    checkpoint_choice.check_built_from(config, inference, None if model is None else (
        model_lib.as_model(model).clone(cfg=model_lib.TransformerConfig.from_config(config))))
    tok = vocabularies.load(workdir, config)  # separate vocabularies: a VocabPair
    return from_config(config, inference.params, tok, model=model, **overrides)

  @property
  def params(self):
    return self._params

  @params.setter
  def params(self, params) -> None:
    if params is not None:  # None: allowed until used (the settings alone need none)
      array_checks.check_tree_shapes('Translator', 'params', params, model_lib.param_shapes(
          self.model), 'the model', "the parameters of this model (init_params', a checkpoint's)")
    self._params, self._placed = params, None

  def _placed_params(self):
    """The parameters replicated on `mesh`: placed once per params object, not per batch."""
    if self._placed is None:
      if self._params is None:  # allowed until then: the settings alone need none
        raise ValueError('Translator: params is None; set the model parameters, or use '
                         'Translator.from_workdir(workdir)')
      self._placed = multihost.local_replicas(self._params, self.mesh)
      self.placements += 1
    return self._placed

  def _decode_numpy(self, params, inputs: np.ndarray, max_lengths: np.ndarray,
                    max_decode_len: int, n_best: bool = False,
                    extras: Optional[Dict[str, np.ndarray]] = None):
    """`decode_batch` (`decode_batch_n_best` with n_best; `search_batch` with `extras`, when
    the settings are not the plain beam search) on host arrays, into host arrays."""
    shape = (inputs.shape[1], max_decode_len)
    if not n_best and shape not in self.compiled_shapes:
      self.compiled_shapes.add(shape)
      logging.info('compiling decode for source length %d, output length %d', *shape)
    rows = NamedSharding(self.mesh, P(multihost.ROWS))
    decode = self._decode_n_best if n_best else self._decode
    arrays = jax.device_put((inputs, max_lengths), rows)
    if extras is not None:
      result = self._search(params, *arrays, max_decode_len, jax.device_put(extras, rows))
    else:
      result = decode(params, *arrays, max_decode_len)
    return tuple(map(np.asarray, result)) if n_best else np.asarray(result)

  def translate(self, sentences: Sequence[str],
                progress: Optional[Callable[[int, int, float], None]] = None,
                line_numbers: Optional[Sequence[int]] = None,
                prefixes: Optional[Sequence[str]] = None) -> List[str]:
    """Translations of `sentences`, in the same order; empty (whitespace) lines stay empty.

    `line_numbers` name the sentences in warnings (default 1, 2, ...; a process decoding its
    share of a file passes the file's line numbers). `prefixes`: one target prefix per
    sentence ('' for none), which its translation starts with (`translate_n_best`).
    """
    if prefixes is None:  # `translate_ids` takes the settings' search
      return [self.tokenizer.decode(ids)
              for ids in self.translate_ids(sentences, progress, line_numbers)]
    return [hyps[0].text if hyps else '' for hyps in self.translate_n_best(
        sentences, 1, progress, line_numbers, prefixes)]

  def translate_ids(self, sentences: Sequence[str],
                    progress: Optional[Callable[[int, int, float], None]] = None,
                    line_numbers: Optional[Sequence[int]] = None) -> List[List[int]]:
    """`translate`, as the best hypotheses' token ids (up to, not including, EOS; [] for an
    empty line). Batching: `portable` (the exported artifact batches alike)."""
    if not self.settings.plain or self.forced:  # greedy, sampling, a language token, ...
      return [best[0].ids if best else []
              for best in self.translate_n_best(sentences, 1, progress, line_numbers)]
    params = self._placed_params()  # here, not in the decoding threads: placed once
    outputs, truncated = portable.translate_ids(
        sentences, self._encode, functools.partial(self._decode_numpy, params),
        rows=self.batch_sentences, buckets=self.bucket_lengths, max_len=self.cfg.max_len,
        max_decode_extra=self.max_decode_extra, progress=progress, threads=self.threads)
    self._note_truncated(truncated, line_numbers)
    return outputs

  def translate_n_best(self, sentences: Sequence[str], n: Optional[int] = None,
                       progress: Optional[Callable[[int, int, float], None]] = None,
                       line_numbers: Optional[Sequence[int]] = None,
                       prefixes: Optional[Sequence[str]] = None) -> List[List[Hypothesis]]:
    """The `n` best translations of each sentence, best first, with their scores.

    Per sentence, in input order: up to `n` `Hypothesis`, by score, descending, the first
    being `translate`'s; fewer when the search finished fewer (e.g. at most one output
    token), none for an empty line. Beam search: n at most `beam_size` (the default); greedy:
    1; sampling: `n` samples (default 1), sorted by score. Batched like `translate`.
    `prefixes`: one target prefix per sentence ('' for none): each hypothesis starts with its
    tokens and the search goes on from there. Other arguments as `translate`.
    """
    n = self._check_n(self.settings.width if n is None else n)
    if prefixes is None and self.forced:  # every translation starts with its language token
      prefixes = [''] * len(sentences)
    params = self._placed_params()
    encoded, truncated = portable.encode_sources(sentences, self._encode, self.cfg.max_len)
    copies = n if self.settings.strategy == 'sample' else 1
    rows = {i * copies + j: ids for i, ids in encoded.items() for j in range(copies)}
    prefix_ids = prefix_lib.encode(prefixes, encoded, self.tokenizer, self.max_decode_extra,
                                   line_numbers)
    searched = prefix_ids is not None or not self.settings.plain
    results: List[List[Hypothesis]] = [[] for _ in sentences]
    start, done = time.monotonic(), len(sentences) - len(encoded)
    batch_list = list(portable.batches(rows, rows=self.batch_sentences,
                                       buckets=self.bucket_lengths, max_len=self.cfg.max_len,
                                       max_decode_extra=self.max_decode_extra))

    # Sampling keys by the sentence's line in the whole input (`line_numbers`), so that a
    # process decoding its share of a file draws what one process would.
    lines = [i + 1 for i in range(len(sentences))] if line_numbers is None else line_numbers

    def decode(batch):
      extras = (prefix_lib.extras(batch.indices, batch.inputs.shape[0], copies, prefix_ids,
                                  self.seed, lines) if searched else None)
      return self._decode_numpy(params, batch.inputs, batch.max_lengths, batch.max_decode_len,
                                n_best=True, extras=extras)
    for batch, (sequences, scores, log_probs) in portable.in_threads(decode, batch_list,
                                                                     self.threads):
      for r, row in enumerate(batch.indices):
        results[row // copies] += [
            self._hypothesis(sequences[r, k], scores[r, k], log_probs[r, k])
            for k in range(n if copies == 1 else 1) if scores[r, k] > search.NEG_INF]
      done += len(batch.indices) // copies
      if progress is not None:
        progress(done, len(sentences), time.monotonic() - start)
    self._note_truncated(truncated, line_numbers)
    return [sorted(h, key=lambda x: -x.score) if copies > 1 else h for h in results]

  def compile_buckets(self) -> List[int]:
    """Compiles (or reads from the persistent cache) what `translate` runs at every padded
    source length (`portable.source_lengths`), which it returns: a stand-in sentence of a
    repeated token per length through `translate` itself, as a server does before it is up."""
    lengths = portable.source_lengths(self.bucket_lengths, self.cfg.max_len)
    token, encode = (self._encode('a') or [3])[-1], self._encode
    self._encode = lambda count: [token] * int(count)  # EOS added after: `count` + 1 tokens
    try:
      for length in lengths:  # n tokens + EOS within max_len - 1 (`encode_sources`'s cut)
        self.translate([str(min(length, self.cfg.max_len - 1) - 1)])
    finally:
      self._encode = encode
    return lengths

  def _check_n(self, n: int) -> int:
    strategy = self.settings.strategy
    if strategy == 'beam' and not 1 <= n <= self.beam_size:
      raise ValueError(f'translate_n_best: n={n} must be in [1, beam_size={self.beam_size}] '
                       '(a longer list needs a wider beam: Translator(..., beam_size=n))')
    if n < 1 or (strategy == 'greedy' and n > 1):
      raise ValueError(f'translate_n_best: n={n} must be {"1" if strategy == "greedy" else ">= 1"}'
                       f' with strategy={strategy!r} (several samples: strategy=\'sample\')')
    return n

  def _hypothesis(self, sequence: np.ndarray, score: float, log_prob: float) -> Hypothesis:
    ids = portable.until_eos(sequence.tolist())
    return Hypothesis(self.tokenizer.decode(ids), ids, float(score), float(log_prob))

  def _encode(self, sentence: str) -> List[int]:
    """`tokenizer.encode`, refusing ids the model has no embedding for (NaN logits)."""
    ids = self.tokenizer.encode(sentence)
    size = self.cfg.input_vocab_size  # the source side's: vocab_size, or source_vocab_size
    bad = next((p for p, i in enumerate(ids) if not 0 <= i < size), None)
    if bad is not None:
      name = 'source_vocab_size' if self.cfg.source_vocab_size else 'vocab_size'
      raise ValueError(f'the tokenizer gave id {ids[bad]} at position {bad} of {sentence!r:.60}, '
                       f'outside the model\'s vocabulary ({name}={size})')
    return ids

  def _note_truncated(self, truncated: List[int], line_numbers: Optional[Sequence[int]]
                      ) -> None:
    self.truncated_lines = ([line_numbers[i - 1] for i in truncated]
                            if line_numbers is not None else truncated)
    if self.truncated_lines:
      logging.warning('%s', truncation_warning(self.truncated_lines, self.cfg.max_len))


def _check_tokenizer(tokenizer, vocab_size: int) -> None:
  """One line for a tokenizer a Translator cannot use: none, no encode (`translate_ids`
  needs no decode), or more ids than the model has embeddings."""
  if isinstance(tokenizer, (str, bytes)):  # str.encode exists, but is not a tokenizer's
    raise ValueError(f'Translator: tokenizer is the path {tokenizer!r}; expected a tokenizer '
                    'object with encode(str) -> ids, e.g. t2t_jax.data.tokenizer.load(path)')
  if not callable(getattr(tokenizer, 'encode', None)):
    what = 'None' if tokenizer is None else f'{type(tokenizer).__name__} without encode'
    raise ValueError(f'Translator: tokenizer is {what}; it needs encode(str) -> ids (and '
                     'decode(ids) -> str for text), e.g. the run\'s vocabulary: t2t_jax.data.tokenizer.'
                     'load(tokenizer.vocab_path(workdir)), or use Translator.from_workdir')
  size = getattr(tokenizer, 'vocab_size', None)
  if isinstance(size, int) and size > vocab_size:
    raise ValueError(f'Translator: the tokenizer has {size} ids but the model\'s vocab_size is '
                     f'{vocab_size}; ids {vocab_size}..{size - 1} have no embedding (is it '
                     'the vocabulary this model was trained with?)')


# Translator argument, config key, default for a config of before the key.
_SEARCH_KEYS = (('strategy', 'decode_strategy', 'beam'),
                ('no_repeat_ngram_size', 'no_repeat_ngram_size', 0),
                ('temperature', 'temperature', 1.0), ('top_k', 'top_k', 0),
                ('top_p', 'top_p', 1.0), ('seed', 'sample_seed', 0),
                ('length_rule', 'length_penalty_rule', 'gnmt'))


def from_config(config, params, tokenizer, *, model: Optional[model_lib.Transformer] = None,
                **overrides: Any) -> Translator:
  """A Translator with the inference settings of a run config (configs/default.py keys;
  `decode_parallelism`), `overrides` (Translator arguments) replacing some. `model`: the
  variant to decode with (its config becomes `config`'s), None: the one `config` names
  (`variant.from_config`: `config.model`'s factory, or the paper's Transformer)."""
  settings = dict(beam_size=config.beam_size, alpha=config.length_penalty_alpha,
                  max_decode_extra=config.max_decode_extra,
                  batch_sentences=config.decode_batch_sentences,
                  bucket_lengths=config.bucket_lengths, threads=config.decode_threads,
                  parallelism=config.decode_parallelism,
                  **{key: getattr(config, name, default) for key, name, default in _SEARCH_KEYS})
  settings.update(overrides)
  net = (variant.from_config(config) if model is None else
         model_lib.as_model(model).clone(cfg=model_lib.TransformerConfig.from_config(config)))
  return Translator(net, params, tokenizer, **settings)
