"""Small transformers models made here, offline (tests/pretrained/ and
benchmarks/peers/transformers_decode.py): SentencePiece models trained on the
bundled corpus, a `vocab.json` over both (as OPUS-MT's conversion makes it: `</s>` 0, `<unk>`
1, the pieces, `<pad>` last), random weights with nonzero biases, saved by transformers'
own `save_pretrained`."""

import gzip
import io
import json
import os

import numpy as np
import sentencepiece as spm

BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 't2t_jax', 'data', 'bible_en_es')  # the bundled corpus

PAIR = {'source_lang': 'en', 'target_lang': 'es'}  # the M2M100 tests' language pair
SOURCES = ['In the beginning God created the heaven and the earth.',
           'And God said, Let there be light: and there was light.',
           'And the evening and the morning were the first day.',
           'Amen.']
TARGETS = ['En el principio creó Dios los cielos y la tierra.',
           'Y dijo Dios: Sea la luz; y fue la luz.',
           'Y fue la tarde y la mañana un día.',
           'Amén.']


def _lines(name, count):
  with gzip.open(os.path.join(BUNDLED, name), 'rt', encoding='utf-8') as f:
    return [next(f).strip() for _ in range(count)]


def _spm(lines, size):
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                 vocab_size=size, model_type='unigram',
                                 character_coverage=1.0, minloglevel=2)
  return model.getvalue()


def marian_dir(folder, *, seed=0, d_model=32, layers=2, heads=4, d_ff=64, train_steps=300,
               spm_lines=400, vocab_sizes=(160, 180), max_positions=128):
  """A MarianMT directory under `folder` (model, config, tokenizer files); returns its path.

  Weights: normal with std 0.15, every bias and `final_logits_bias` nonzero, then
  `train_steps` Adam steps on 400 bundled pairs (a few seconds), so that outputs vary and end
  as a trained model's do. The SentencePiece models: `vocab_sizes` (source, target) pieces
  trained on `spm_lines` lines of each language."""
  import torch  # pylint: disable=import-outside-toplevel
  from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # pylint: disable=import-outside-toplevel
  os.makedirs(folder, exist_ok=True)
  protos = {'source': _spm(_lines('train.en.gz', spm_lines), vocab_sizes[0]),
            'target': _spm(_lines('train.es.gz', spm_lines), vocab_sizes[1])}
  pieces = []
  for side in ('source', 'target'):
    with open(os.path.join(folder, f'{side}.spm'), 'wb') as f:
      f.write(protos[side])
    processor = spm.SentencePieceProcessor(model_proto=protos[side])
    for i in range(processor.get_piece_size()):
      if not (processor.is_control(i) or processor.is_unknown(i)):
        piece = processor.id_to_piece(i)
        if piece not in pieces:
          pieces.append(piece)
  vocab = {'</s>': 0, '<unk>': 1, **{p: i + 2 for i, p in enumerate(pieces)}}
  vocab['<pad>'] = len(vocab)
  with open(os.path.join(folder, 'vocab.json'), 'w', encoding='utf-8') as f:
    json.dump(vocab, f, ensure_ascii=False)
  config = MarianConfig(
      vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=d_model,
      encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
      decoder_attention_heads=heads, encoder_ffn_dim=d_ff, decoder_ffn_dim=d_ff,
      activation_function='swish', max_position_embeddings=max_positions, scale_embedding=True,
      pad_token_id=vocab['<pad>'], eos_token_id=0, forced_eos_token_id=None,
      decoder_start_token_id=vocab['<pad>'], share_encoder_decoder_embeddings=True,
      dropout=0.1)
  torch.manual_seed(seed)
  model = MarianMTModel(config).eval()
  with torch.no_grad():
    for name, param in model.named_parameters():
      param.normal_(0.0, 0.15)
      if name.endswith('layer_norm.weight'):
        param.add_(1.0)
    model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape) * 0.5)
    model.model.shared.weight[vocab['<pad>']] = 0.0  # padding's row, as Marian's conversion
  tokenizer = MarianTokenizer(os.path.join(folder, 'source.spm'),
                              os.path.join(folder, 'target.spm'),
                              os.path.join(folder, 'vocab.json'))
  _train(model, tokenizer, train_steps)
  model.save_pretrained(folder)
  tokenizer.save_pretrained(folder)
  return folder


def _train(model, tokenizer, steps, batch=16):
  """`steps` teacher-forced Adam steps on the first 400 bundled pairs, batches in turn."""
  import torch  # pylint: disable=import-outside-toplevel
  sources, targets = _lines('train.en.gz', 400), _lines('train.es.gz', 400)
  optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
  model.train()
  for step in range(steps):
    start = (step * batch) % len(sources)
    data = tokenizer(sources[start:start + batch], text_target=targets[start:start + batch],
                     padding=True, truncation=True, max_length=64, return_tensors='pt')
    data['labels'][data['labels'] == tokenizer.pad_token_id] = -100
    loss = model(**data).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
  model.eval()


def load(folder):
  """(transformers' model, its tokenizer) of `folder`, as a user loads them."""
  from transformers import AutoModelForSeq2SeqLM, AutoTokenizer  # pylint: disable=import-outside-toplevel
  return (AutoModelForSeq2SeqLM.from_pretrained(folder).eval(),
          AutoTokenizer.from_pretrained(folder))


def rows(lists, pad=0):
  """A `[len(lists), longest]` int32 array, each row padded with `pad`."""
  out = np.full((len(lists), max(map(len, lists))), pad, np.int32)
  for i, ids in enumerate(lists):
    out[i, :len(ids)] = ids
  return out


def _spm_bpe(lines, size):
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                 vocab_size=size, model_type='bpe', character_coverage=1.0,
                                 minloglevel=2)
  return model.getvalue()


def m2m100_dir(folder, *, seed=0, d_model=32, layers=2, heads=4, d_ff=64, train_steps=300):
  """An M2M100 directory under `folder`: one SentencePiece BPE model over English and Spanish,
  fairseq's dictionary order in `vocab.json` (`<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, the
  pieces), the tokenizer's language tokens after it; random weights with nonzero biases, then
  `train_steps` Adam steps EN->ES (as `marian_dir`)."""
  from transformers import M2M100Tokenizer  # pylint: disable=import-outside-toplevel
  os.makedirs(folder, exist_ok=True)
  proto = _spm_bpe(_lines('train.en.gz', 400) + _lines('train.es.gz', 400), 300)
  spm_path = os.path.join(folder, 'sentencepiece.bpe.model')
  with open(spm_path, 'wb') as f:
    f.write(proto)
  processor = spm.SentencePieceProcessor(model_proto=proto)
  pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]
  vocab = {'<s>': 0, '<pad>': 1, '</s>': 2, '<unk>': 3,
           **{p: i + 4 for i, p in enumerate(pieces)}}
  vocab_path = os.path.join(folder, 'vocab.json')
  with open(vocab_path, 'w', encoding='utf-8') as f:
    json.dump(vocab, f, ensure_ascii=False)
  tokenizer = M2M100Tokenizer(vocab_path, spm_path, src_lang='en', tgt_lang='es')
  # fairseq's dictionary: the pieces, then one token per language, then 8 made-up words.
  size = len(vocab) + len(tokenizer.lang_code_to_id) + tokenizer.num_madeup_words
  return _m2m100_trained(folder, tokenizer, size, seed=seed, d_model=d_model, layers=layers,
                         heads=heads, d_ff=d_ff, train_steps=train_steps)


def _m2m100_trained(folder, tokenizer, size, *, seed, d_model, layers, heads, d_ff,
                    train_steps):
  """An M2M100 model of `size` ids (random weights, nonzero biases, `train_steps` Adam steps
  with `tokenizer`), saved with the tokenizer into `folder`; returns `folder`."""
  import torch  # pylint: disable=import-outside-toplevel
  from transformers import M2M100Config, M2M100ForConditionalGeneration  # pylint: disable=import-outside-toplevel
  config = M2M100Config(
      vocab_size=size, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
      encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=d_ff,
      decoder_ffn_dim=d_ff, max_position_embeddings=128, scale_embedding=True,
      encoder_layerdrop=0.0, decoder_layerdrop=0.0, dropout=0.1, attention_dropout=0.0,
      pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
  torch.manual_seed(seed)
  model = M2M100ForConditionalGeneration(config).eval()
  with torch.no_grad():
    for name, param in model.named_parameters():
      param.normal_(0.0, 0.15)
      if 'layer_norm.weight' in name:
        param.add_(1.0)
    model.model.shared.weight[1] = 0.0  # padding's row
  _train(model, tokenizer, train_steps)
  model.save_pretrained(folder)
  tokenizer.save_pretrained(folder)
  return folder


NLLB_PAIR = {'source_lang': 'eng_Latn', 'target_lang': 'spa_Latn'}  # the NLLB tests' pair


def nllb_dir(folder, *, seed=0, d_model=32, layers=2, heads=4, d_ff=64, train_steps=300):
  """An NLLB directory under `folder`: M2M100's model (as `m2m100_dir`) under
  `NllbTokenizer`, made by transformers from the SentencePiece BPE model alone (its
  conversion writes `tokenizer.json`: fairseq's `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, the
  pieces, `<mask>` and the FLORES-200 codes); `train_steps` Adam steps eng_Latn -> spa_Latn."""
  from transformers import NllbTokenizer  # pylint: disable=import-outside-toplevel
  from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES  # pylint: disable=import-outside-toplevel
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, 'sentencepiece.bpe.model'), 'wb') as f:
    f.write(_spm_bpe(_lines('train.en.gz', 400) + _lines('train.es.gz', 400), 300))
  tokenizer = NllbTokenizer.from_pretrained(folder, extra_special_tokens=FAIRSEQ_LANGUAGE_CODES,
                                            src_lang=NLLB_PAIR['source_lang'],
                                            tgt_lang=NLLB_PAIR['target_lang'])
  return _m2m100_trained(folder, tokenizer, len(tokenizer), seed=seed, d_model=d_model,
                         layers=layers, heads=heads, d_ff=d_ff, train_steps=train_steps)


def log_probs(model, tok, sources, targets):
  """transformers' teacher-forced log p(target | source) of each pair, `[pairs]` float32, and
  each target's token count (EOS included), as `model(..., labels=...)` computes them."""
  import torch  # pylint: disable=import-outside-toplevel
  batch = tok(list(sources), text_target=list(targets), padding=True, return_tensors='pt')
  labels = batch['labels']
  with torch.no_grad():
    logits = model(input_ids=batch['input_ids'], attention_mask=batch['attention_mask'],
                   labels=labels).logits
  chosen = torch.gather(torch.log_softmax(logits, -1), 2, labels.unsqueeze(-1))[..., 0]
  real = labels != tok.pad_token_id
  return (chosen * real).sum(1).numpy(), real.sum(1).tolist()


def our_log_probs(workdir_vocab, config, params, sources, targets):
  """Ours, of the same pairs: `scoring.token_log_probs` summed, and the token counts."""
  from t2t_jax.model import scoring, variant  # pylint: disable=import-outside-toplevel
  inputs = rows([workdir_vocab.encode(s) + [1] for s in sources])
  outputs = rows([workdir_vocab.target.encode(t) + [1] for t in targets])
  mine = np.asarray(scoring.token_log_probs(variant.from_config(config), params, inputs,
                                            outputs)).sum(1)
  return mine, (outputs != 0).sum(1).tolist()


def imported(workdir, **changes):
  """(the imported workdir's parameters (`InferenceParams`), its run config with `changes`,
  its vocabulary as every mode loads it)."""
  # pylint: disable=import-outside-toplevel
  from t2t_jax.data import vocabularies
  from t2t_jax.inference import checkpoint_choice
  from t2t_jax.runtime import resolution
  inference = checkpoint_choice.load_inference_params(workdir)
  config = resolution.from_saved(inference.config_json)
  for key, value in changes.items():
    config[key] = value
  return inference, config, vocabularies.load(workdir, config)


def id_order(tok, size):
  """Their id at each of our ids: padding, EOS, unknown first, then theirs in order
  (`t2t_jax/pretrained/id_map.py`), for transformers' tokenizer `tok` of `size` ids."""
  special = [tok.pad_token_id, tok.eos_token_id, tok.unk_token_id]
  return np.array(special + [i for i in range(size) if i not in special])


def short_dev_sources(tok, count, max_tokens=40):
  """The first `count` bundled dev sources of at most `max_tokens` ids in `tok` (EOS
  included), so that an output of source length + 50 stays within the tiny models' 128
  positions."""
  with gzip.open(os.path.join(BUNDLED, 'dev.en.gz'), 'rt', encoding='utf-8') as f:
    lines = (line.strip() for line in f)
    return [s for s in lines if len(tok(s)['input_ids']) <= max_tokens][:count]


def beam_n_best(model, tok, sentence, *, beam_size, alpha, max_new_tokens, **generate):
  """transformers' beam search of `sentence` by its own `generate` (its default
  `early_stopping=False`, padding never an output): [(ids up to EOS, EOS-terminated?, score)],
  best first, `beam_size` of them."""
  import torch  # pylint: disable=import-outside-toplevel
  batch = tok([sentence], return_tensors='pt')
  with torch.no_grad():
    out = model.generate(**batch, num_beams=beam_size, num_return_sequences=beam_size,
                         do_sample=False, length_penalty=alpha, max_new_tokens=max_new_tokens,
                         bad_words_ids=[[tok.pad_token_id]], output_scores=True,
                         return_dict_in_generate=True, **generate)
  hypotheses = []
  for ids, score in zip(out.sequences.tolist(), out.sequences_scores.tolist()):
    ids = ids[1:]  # the decoder start
    ended = tok.eos_token_id in ids
    hypotheses.append((ids[:ids.index(tok.eos_token_id)] if ended else ids, ended, score))
  return hypotheses
