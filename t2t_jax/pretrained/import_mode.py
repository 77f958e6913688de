"""`--mode=import --input=DIR --workdir=W`: a transformers model directory as a t2t_jax
workdir that every mode reads (decode, eval, score, attention, export, info, and `init_from`
for fine-tuning).

What W holds afterwards: `vocab/spm.model` (the target side's SentencePiece model) and
`vocab/source_spm.model` (the source side's), both renumbered to our ids (`spm_protos`), with
their records; and one params-only checkpoint, `averaged/step_0_last_1`, holding the
parameters, the resolved run config (the model's keys, `marian.model_keys`) and an `imported`
item: the family, the directory, the weights file and its sha256, and config.json as read.
Nothing is written when anything is refused, and a workdir that already holds a vocabulary or
a checkpoint is refused (nothing is overwritten).
"""

import os
from typing import Any, Dict, Optional

from absl import logging
import jax
import numpy as np

from t2t_jax import config as config_lib
from t2t_jax.configs import default as default_config
from t2t_jax.data import tokenizer, vocab_record
from t2t_jax.data.vocab_pair import VocabPair
from t2t_jax.inference import averaging, checkpoint_choice
from t2t_jax.model import variant
from t2t_jax.pretrained import hf_files, id_map, m2m100, marian
from t2t_jax.pretrained.hf_files import PretrainedError
from t2t_jax.runtime import checkpoint
from t2t_jax.storage import layout, paths

IMPORT_ITEM = checkpoint_choice.IMPORTED_ITEM
FAMILIES = {'marian': marian, 'm2m_100': m2m100}
CHECKPOINT_NAME = 'step_0_last_1'
# The keys an import takes: the language pair of a model with language tokens (M2M100).
LANGUAGE_KEYS = ('source_lang', 'target_lang')


def _special_ids(folder: str, hf_config: Dict[str, Any], vocab: Dict[str, int]):
  """(pad, eos, unk) of their ids: config.json's pad/eos ids, the vocabulary's unknown piece
  (tokenizer_config.json's `unk_token`, '<unk>' by default)."""
  where = os.path.join(folder, 'config.json')
  pad = hf_files.field(hf_config, 'pad_token_id', int, where)
  eos = hf_config.get('eos_token_id')
  eos = eos[0] if isinstance(eos, list) and eos else eos
  if not isinstance(eos, int) or isinstance(eos, bool):
    raise PretrainedError(f'{where}: field \'eos_token_id\' is {eos!r}; expected an id')
  unk_piece = '<unk>'
  if os.path.isfile(os.path.join(folder, 'tokenizer_config.json')):
    unk = hf_files.read_json(folder, 'tokenizer_config.json').get('unk_token', '<unk>')
    unk_piece = unk.get('content', '<unk>') if isinstance(unk, dict) else str(unk)
  if unk_piece not in vocab:
    raise PretrainedError(f'{os.path.join(folder, "vocab.json")}: no {unk_piece!r} (the '
                          'unknown token)')
  return pad, eos, vocab[unk_piece]


def read(folder: str, languages: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
  """Everything of a transformers directory `folder` a workdir needs, checked: the run
  config's keys, the parameter tree (numpy), the renumbered SentencePiece models (the target
  side's, and the source side's when it has its own) and the provenance record.
  `languages`: `source_lang` and `target_lang`, which a model with language tokens (M2M100)
  needs and a model without refuses. Raises PretrainedError in one line."""
  if not os.path.isdir(folder):
    raise PretrainedError(f'--input={folder}: not a directory; expected a transformers model '
                          'directory (config.json, model.safetensors, the tokenizer\'s files)')
  hf_config = hf_files.read_json(folder, 'config.json')
  where = os.path.join(folder, 'config.json')
  kind = hf_config.get('model_type') if isinstance(hf_config, dict) else None
  if kind not in FAMILIES:
    raise PretrainedError(f'{where}: model_type={kind!r}; t2t_jax imports '
                          f'{", ".join(map(repr, FAMILIES))}')
  family = FAMILIES[kind]
  vocab, tokens = family.vocabulary(folder, hf_config)
  size = hf_files.field(hf_config, 'vocab_size', int, where)
  ids = id_map.build(vocab, size, *_special_ids(folder, hf_config, vocab),
                     where=os.path.join(folder, 'vocab.json'))
  keys = family.model_keys(hf_config, ids, where)
  keys.update(_languages(keys, ids, languages or {}, folder))
  tensors, weights, sha256 = hf_files.read_weights(folder)
  tree = family.params(tensors, weights, keys, ids)
  record = {'family': kind, 'input': os.path.abspath(folder), 'weights': weights,
            'sha256': sha256, 'config': hf_config}
  return dict(keys=keys, params=tree, protos=family.protos(folder, ids, tokens), record=record)


def _languages(keys: Dict[str, Any], ids: id_map.IdMap, languages: Dict[str, str],
               folder: str) -> Dict[str, str]:
  """`source_lang` and `target_lang` of a model with language tokens, each checked to have
  its token; refused for a model without (they would do nothing)."""
  pattern = keys.get('language_tokens', '')
  if not pattern:
    if languages:
      raise config_lib.ConfigError(f'--config.{sorted(languages)[0]}: {folder} holds a model '
                                   'without language tokens; drop it')
    return {}
  out = {}
  for key in ('source_lang', 'target_lang'):
    if not languages.get(key):
      raise config_lib.ConfigError(f'--mode=import of {folder} (language tokens '
                                   f'{pattern!r}) needs --config.source_lang and '
                                   '--config.target_lang: the pair to decode (a later command '
                                   'may name another)')
    if pattern.format(lang=languages[key]) not in ids.pieces:
      raise config_lib.ConfigError(f'--config.{key}={languages[key]}: {folder} has no language '
                                   f'token {pattern.format(lang=languages[key])!r}')
    out[key] = languages[key]
  return out


def run_config(keys: Dict[str, Any]):
  """The run config of an imported model: the defaults with its model keys, validated; the
  training lengths cut to the model's positions (a fine-tune may set its own)."""
  config = default_config.get_config()
  for key, value in keys.items():
    config[key] = value
  config_lib.fit_buckets(config)
  return config_lib.validate(config)


def _refuse_used(workdir: layout.Workdir) -> None:
  for path in (workdir.vocab, workdir.checkpoints, workdir.averaged):
    if os.path.exists(path):
      raise FileExistsError(f'--workdir={workdir.root} already holds {path}; import into a new '
                            'or empty --workdir (nothing was changed)')


def _write_vocabulary(workdir: layout.Workdir, protos: Dict[str, bytes],
                      record: Dict[str, Any]) -> Dict[str, Any]:
  """Each side's model (the target's alone when both share it) and its record; returns the
  checkpoint's vocabulary item."""
  paths.makedirs(os.path.dirname(workdir.vocab))
  for side, where in (('source', workdir.source_side), ('target', workdir)):
    if side not in protos:
      continue
    given = {'given': f'{record["input"]} ({side} side, renumbered)',
             'given_sha256': vocab_record.sha256(protos[side])}
    vocab_record.write(where, given, vocab_record.sha256(protos[side]))
    paths.write_atomic(where.vocab, protos[side], overwrite=False)
  target = tokenizer.Tokenizer(workdir.vocab)
  if 'source' not in protos:
    return vocab_record.of_tokenizer(target)
  return vocab_record.of_tokenizer(VocabPair(tokenizer.Tokenizer(workdir.source_vocab), target))


def run(folder: str, workdir_path: str, languages: Optional[Dict[str, str]] = None) -> str:
  """Imports the transformers directory `folder` into `workdir_path` (`languages`: as `read`);
  returns the line that says what was written."""
  imported = read(folder, languages)
  config = run_config(imported['keys'])
  net = variant.from_config(config)
  mismatch = variant.parameter_mismatch(net, imported['params'])
  if mismatch:  # a conversion fault of ours, not the user's
    raise AssertionError(f'the imported parameters are not the model\'s: {mismatch}')
  workdir = layout.of(workdir_path)
  _refuse_used(workdir)
  vocabulary = _write_vocabulary(workdir, imported['protos'], imported['record'])
  params = jax.tree_util.tree_map(np.asarray, imported['params'])
  target = os.path.join(workdir.averaged, CHECKPOINT_NAME)
  averaging.write_average(target, params, checkpoint.config_to_json(config), (0,), 1,
                          imported['record']['input'],
                          setup={checkpoint.VOCAB_ITEM: vocabulary,
                                 IMPORT_ITEM: imported['record']})
  record = imported['record']
  line = (f'imported {record["family"]} from {record["input"]} ({os.path.basename(record["weights"])} '
          f'sha256 {record["sha256"][:12]}...) into {workdir.root}: d_model={config.d_model} '
          f'layers={config.num_layers}/{config.num_decoder_layers or config.num_layers} '
          f'vocab_size={config.vocab_size}')
  logging.info(line)
  return line
