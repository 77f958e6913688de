"""A SentencePiece model of someone else's, given our ids: the same segmentation (its
normaliser, its pieces' scores and types), its pieces renumbered as `id_map.IdMap` orders the
model's vocabulary, so `tokenizer.Tokenizer` loads it as one of ours (pad 0, EOS 1, unk 2, no
BOS) and its ids are the model's rows.

Marian's tokenizer segments with `source.spm` (or `target.spm`), then looks each piece up in
`vocab.json`. Here the vocabulary's pieces that this side's model does not have become
`UNUSED` (SentencePiece never emits them), so encoding gives exactly the pieces the side's
model gives, each under its vocabulary id. A piece the side's model emits but the vocabulary
lacks would be `<unk>` in transformers: such a model is refused in one line (no id of ours can
stand for it).
"""

from typing import Iterable

from sentencepiece import sentencepiece_model_pb2 as model_pb2

from t2t_jax.pretrained.hf_files import PretrainedError
from t2t_jax.pretrained.id_map import IdMap

_TYPE = model_pb2.ModelProto.SentencePiece.Type
_SPECIAL = {0: ('<pad>', _TYPE.CONTROL), 1: ('</s>', _TYPE.CONTROL), 2: ('<unk>', _TYPE.UNKNOWN)}


def remapped(proto: bytes, ids: IdMap, where: str, user_defined: Iterable[str] = (),
             control: Iterable[str] = ()) -> bytes:
  """The serialized model `proto` with its pieces in `ids`' order (see the module doc).

  `user_defined`: vocabulary pieces kept whole wherever they appear in the text (Marian's
  `>>fr<<` language codes, which its tokenizer splits off before segmenting). `control`:
  pieces never read from text and decoded to nothing (M2M100's language tokens, which the
  tokenizer adds by id: `data/language_tokens.py`).
  """
  model = model_pb2.ModelProto()
  try:
    model.ParseFromString(proto)
  except Exception as e:  # noqa: BLE001  protobuf's DecodeError
    raise PretrainedError(f'{where} is not a SentencePiece model ({e})') from None
  if not model.pieces:
    raise PretrainedError(f'{where} is not a SentencePiece model (no pieces)')
  theirs = {p.piece: p for p in model.pieces}
  lacking = [p.piece for p in model.pieces
             if p.type in (_TYPE.NORMAL, _TYPE.USER_DEFINED) and p.piece not in ids.pieces]
  if lacking:
    raise PretrainedError(f'{where}: {len(lacking)} of its pieces are not in the vocabulary '
                          f'(e.g. {lacking[0]!r}); transformers would encode them as <unk>, '
                          'which t2t_jax cannot reproduce')
  keep, controls = set(user_defined), set(control)
  del model.pieces[:]
  for ours, piece in enumerate(ids.pieces):
    entry = model.pieces.add()
    if ours in _SPECIAL:
      entry.piece, entry.type = _SPECIAL[ours]
      entry.score = 0.0
    elif piece in keep:
      entry.piece, entry.type, entry.score = piece, _TYPE.USER_DEFINED, 0.0
    elif piece in controls:
      entry.piece, entry.type, entry.score = piece, _TYPE.CONTROL, 0.0
    elif piece in theirs and theirs[piece].type in (_TYPE.NORMAL, _TYPE.USER_DEFINED):
      entry.piece, entry.type, entry.score = piece, theirs[piece].type, theirs[piece].score
    else:  # the other side's piece, a special token of theirs, or a placeholder
      entry.piece, entry.type, entry.score = piece, _TYPE.UNUSED, 0.0
  spec = model.trainer_spec
  spec.pad_id, spec.eos_id, spec.unk_id, spec.bos_id = 0, 1, 2, -1
  spec.pad_piece, spec.eos_piece, spec.unk_piece = '<pad>', '</s>', '<unk>'
  spec.vocab_size = len(ids.pieces)
  return model.SerializeToString()
