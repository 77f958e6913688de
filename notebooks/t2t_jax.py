# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # t2t_jax: train, decode and look inside the original Transformer
#
# This notebook trains the embedded default of [t2t_jax](https://github.com/t2t-jax/t2t_jax)
# (the Transformer of Vaswani et al. 2017 in JAX/Flax, `configs/quickstart.py`: a d_model 128
# model on the bundled English -> Spanish Bible corpus), then plots its learning curves,
# averages the last checkpoints, decodes a few sentences, scores BLEU on the test split, draws
# attention maps and shows the library API the command line is built on.
#
# **Runtime.** It runs anywhere: on Colab pick *Runtime > Change runtime type* and a **TPU**
# (the mesh spans all its cores) or a **GPU** (T4 or better); the CPU runtime works too (the
# full 7000 steps take ~9 minutes of training on a 2-core CPU from `main.py`, which
# runs with huge pages for malloc; in a notebook ~1.5x that, unless
# `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` is set before Python starts). Outside Colab, run
# it from a clone of the repository (`pip install -r requirements.txt` first).
#
# Everything below goes through the library in this process (`t2t_jax.training.train.train`,
# `t2t_jax.average_checkpoints`, `t2t_jax.Translator`, ...); each cell names the command line
# that does the same.

# %% [markdown]
# ## Parameters
# The number of training steps is set here (default: the full quickstart run). Each value can
# also come from an environment variable, which is how CI runs this notebook with a few steps
# of a tiny model (`T2T_NOTEBOOK_CONFIG` is a JSON object of config keys, e.g.
# `{"d_model": 32}`).

# %%
import json
import os
import sys

REPO_URL = 'https://github.com/t2t-jax/t2t_jax'  # installed from here on Colab
REPO_REF = 'main'                                 # branch, tag or commit
STEPS = int(os.environ.get('T2T_NOTEBOOK_STEPS', 7000))  # configs/quickstart.py: 7000
CONFIG_OVERRIDES = json.loads(os.environ.get('T2T_NOTEBOOK_CONFIG', '{}'))
TEST_SENTENCES = int(os.environ.get('T2T_NOTEBOOK_TEST_SENTENCES', 0))  # 0: the whole split
USE_DRIVE = False  # Colab: keep the run on Google Drive, so it survives the runtime

IN_COLAB = 'google.colab' in sys.modules
if os.environ.get('T2T_NOTEBOOK_WORKDIR'):
  WORKDIR = os.environ['T2T_NOTEBOOK_WORKDIR']
elif IN_COLAB:
  WORKDIR = '/content/drive/MyDrive/t2t_jax/quickstart' if USE_DRIVE else '/content/quickstart'
else:
  WORKDIR = os.path.abspath(os.path.join('runs', 'notebook_quickstart'))
print(f'steps {STEPS}, workdir {WORKDIR}, overrides {CONFIG_OVERRIDES or "none"}')

# %% [markdown]
# ## Install (Colab only)
# On Colab the package comes from the repository; the accelerator's JAX build is asked for
# alongside, so an upgrade of `jax` keeps a matching TPU or CUDA runtime. Elsewhere nothing is
# installed: a clone's own `t2t_jax` is put first on the path.

# %%
import subprocess

if IN_COLAB:
  if os.path.exists('/dev/accel0') or os.environ.get('COLAB_TPU_ADDR'):
    jax_build = ['jax[tpu]>=0.10']
  elif subprocess.run(['nvidia-smi'], capture_output=True).returncode == 0:
    jax_build = ['jax[cuda12]>=0.10']
  else:
    jax_build = []
  subprocess.run([sys.executable, '-m', 'pip', 'install', '-q',
                  f't2t_jax @ git+{REPO_URL}@{REPO_REF}', *jax_build], check=True)
  if USE_DRIVE:
    from google.colab import drive
    drive.mount('/content/drive')
else:
  clone = os.path.dirname(os.path.abspath(''))  # notebooks/.. when run from a clone
  if os.path.isdir(os.path.join(clone, 't2t_jax')) and clone not in sys.path:
    sys.path.insert(0, clone)

# %% [markdown]
# ## Devices and the mesh
# Training is data-parallel over one `jax.sharding.Mesh` with a `data` axis over every device:
# all TPU cores, the GPU, or the CPU.

# %%
import jax
import t2t_jax

print('backend:', jax.default_backend())
print('devices:', jax.devices())
mesh = t2t_jax.make_mesh()
print(f'mesh: {dict(mesh.shape)} over {mesh.size} device(s) -- every batch is split along "data"')

# %% [markdown]
# ## The configuration
# `configs/quickstart.py` documents its choices; `configs/default.py` lists every key. Any key
# can be changed here before training (on the command line: `--config.KEY=VALUE`).

# %%
from t2t_jax.configs import quickstart
from t2t_jax.model import info

config = quickstart.get_config()
config.num_train_steps = STEPS
config.final_eval_split = ''  # this notebook averages and scores in its own cells below
for key, value in CONFIG_OVERRIDES.items():
  config[key] = tuple(value) if isinstance(config[key], tuple) else value
config = t2t_jax.validate(config)
print(info.describe(config).split('shapes:')[0])  # python main.py --mode=info

# %% [markdown]
# ## Train
# `python main.py --workdir=DIR` does the same. The log shows step, loss, learning rate,
# tokens/s and ETA; the dev loss and dev BLEU come every `eval_every_steps`. Running the cell
# again resumes from the last checkpoint; interrupting the kernel finishes the current step and
# writes a checkpoint.

# %%
import logging as std_logging
import time

from absl import logging

import t2t_jax.training.train
from t2t_jax import cli
from t2t_jax.runtime import compile_cache

logging.set_verbosity(logging.INFO)  # step, loss, learning rate, tokens/s, ETA, evals
std_logging.getLogger('absl').addFilter(cli.QuietLibraries())  # without orbax's chatter
compile_cache.enable(compile_cache.default_dir())  # reruns load compiled programs

start = time.monotonic()
last = t2t_jax.training.train.train(config, WORKDIR)
print(f'trained to step {STEPS} in {(time.monotonic() - start) / 60:.1f} min; last log: {last}')

# %% [markdown]
# ## Learning curves
# `t2t_jax.load_curves` reads `metrics.jsonl` as arrays; `t2t_jax.write_learning_curves` draws
# the PNGs `--mode=plot` draws (loss and dev BLEU against step and against wall time).

# %%
from IPython.display import Image, display

curves = t2t_jax.load_curves(os.path.join(WORKDIR, 'metrics.jsonl'))
for step, loss, bleu in zip(curves.eval_steps, curves.eval_loss, curves.eval_bleu):
  print(f'step {step:>5}: {curves.eval_split} loss {loss:.3f}, BLEU {bleu:.1f}')
for path in t2t_jax.write_learning_curves(WORKDIR):
  display(Image(filename=path))

# %% [markdown]
# ## Average the last checkpoints
# As in §6.1 of the paper (`python main.py --mode=average --workdir=DIR`). The averaged
# parameters are what decoding uses from now on.

# %%
from t2t_jax.inference import averaging

steps = averaging.training_steps(WORKDIR)
averaged = t2t_jax.average_checkpoints(WORKDIR, min(config.average_last, len(steps)))
print('averaged steps', averaged.steps, 'into', averaged.path)

# %% [markdown]
# ## Decode
# Beam search (beam 4, alpha 0.6) with the averaged parameters and the run's own config and
# vocabulary, as `python main.py --mode=decode --workdir=DIR --input=FILE --output=FILE` does.

# %%
from t2t_jax.inference import translate
from t2t_jax.data import tokenizer

inference = t2t_jax.load_inference_params(WORKDIR)  # the newest averaged checkpoint
run_config = t2t_jax.config.from_json(inference.config_json)
tok = tokenizer.load(tokenizer.vocab_path(WORKDIR))
translator = translate.from_config(run_config, inference.params, tok)
sentences = ['In the beginning God created the heaven and the earth.',
             'And God said, Let there be light: and there was light.',
             'Blessed are the meek: for they shall inherit the earth.']
for source, output in zip(sentences, translator.translate(sentences)):
  print(f'{source}\n  -> {output}')

# %% [markdown]
# ## BLEU on the test split
# sacreBLEU on detokenized text, and the paper's tokenized BLEU; `python main.py --mode=eval
# --workdir=DIR --split=test` reports both with the teacher-forced perplexity.

# %%
from t2t_jax.data import corpora

test = corpora.load_split(run_config, 'test', corpora.default_data_dir(run_config, WORKDIR))
pairs = [test[i] for i in range(TEST_SENTENCES or len(test))]
start = time.monotonic()
hypotheses = translator.translate([p['source'] for p in pairs])
references = [p['target'] for p in pairs]
sacre = t2t_jax.corpus_bleu(hypotheses, references)
tokenized = t2t_jax.tokenized_bleu(hypotheses, references, lang=run_config.target_lang)
print(f'{len(pairs)} sentences in {time.monotonic() - start:.0f} s ({inference.description})')
print(f'BLEU {sacre.score:.2f} ({sacre.signature}); tokenized BLEU {tokenized.score:.2f}')
for pair, hypothesis in list(zip(pairs, hypotheses))[:3]:
  print(f'\nsource:    {pair["source"]}\nreference: {pair["target"]}\nmodel:     {hypothesis}')

# %% [markdown]
# ## The library API
# The model is a pure function of its parameters: `Transformer.apply` gives teacher-forced
# logits; `decode_context` + `decode_step` run the decoder one position at a time with a
# key/value cache, and `beam_search` knows nothing about the model. `Translator` (used above)
# puts these together with the tokenizer.

# %%
import jax.numpy as jnp

cfg = t2t_jax.TransformerConfig.from_config(run_config)
params = inference.params
source, translation = sentences[0], translator.translate(sentences[:1])[0]
inputs = jnp.array([tok.encode(source) + [t2t_jax.EOS_ID]])        # [1, src_len]
targets = jnp.array([tok.encode(translation) + [t2t_jax.EOS_ID]])  # [1, tgt_len]

model = t2t_jax.Transformer(cfg.replace(deterministic=True))
logits = jax.jit(model.apply)({'params': params}, inputs, targets)  # [1, tgt_len, vocab]
log_probs = jax.nn.log_softmax(logits)
chosen = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
print(f'logits {logits.shape} {logits.dtype}; log p(translation | source) = '
      f'{float(chosen.sum()):.2f} over {targets.shape[1]} tokens')

max_decode_len = min(inputs.shape[1] + run_config.max_decode_extra, cfg.max_len)


@jax.jit  # one compiled program for the whole search; params are an argument, not constants
def search(params, inputs):
  context = t2t_jax.decode_context(cfg, params, inputs)  # encoder output, per-layer keys/values

  def logits_fn(tokens, cache):
    logits, cache = t2t_jax.decode_step(cfg, params, cache, tokens, context)
    return logits.at[:, t2t_jax.PAD_ID].set(-1e9), cache  # padding is never an output

  return t2t_jax.beam_search(
      logits_fn, t2t_jax.init_cache(cfg, 1, max_decode_len), batch_size=1,
      beam_size=run_config.beam_size, alpha=run_config.length_penalty_alpha,
      max_decode_len=max_decode_len)


sequences, scores = search(params, inputs)
print(f'beam_search: sequences {sequences.shape}, best score {float(scores[0, 0]):.3f}')
print('best beam: ', tok.decode(sequences[0, 0].tolist()))
print('Translator:', translation)

# %% [markdown]
# ## Attention maps
# `t2t_jax.attention_weights` runs the teacher-forced model with attention capture on and
# returns every layer's encoder self-attention, decoder self-attention and encoder-decoder
# attention, each `[layers, batch, heads, q_len, k_len]`, from the model's own forward pass.
# `t2t_jax.attention_figure` draws one layer of one kind: a grid of heads, or the line view of
# the paper's Figures 3-5 (one colour per head). Decoder positions are labelled with the piece
# they output, so the encoder-decoder map reads as an alignment. `python main.py
# --mode=attention --workdir=DIR --input=FILE --output=DIR` writes every kind and layer as
# PNGs, a self-contained HTML page and an npz.

# %%
from t2t_jax.inspect import attention_plots

src_ids = tok.encode(source) + [t2t_jax.EOS_ID]
tgt_ids = tok.encode(translation) + [t2t_jax.EOS_ID]  # the model's own translation
weights = t2t_jax.attention_weights(cfg, params, jnp.array([src_ids]), jnp.array([tgt_ids]))
print({kind: w.shape for kind, w in weights.items()})
maps = weights.sentence(0, len(src_ids), len(tgt_ids))  # {kind: [layers, heads, q, k]}
pieces = {'source_pieces': tok.pieces(src_ids), 'target_pieces': tok.pieces(tgt_ids)}
last = cfg.num_layers - 1
for figure in (
    t2t_jax.attention_figure(maps, 'encoder_decoder', last, **pieces),
    # The paper's figures show the encoder's layer 5 of 6: here the last layer but one.
    t2t_jax.attention_figure(maps, 'encoder', max(last - 1, 0), view='lines', **pieces)):
  display(Image(attention_plots.png_bytes(figure)))

# %% [markdown]
# ## Next
# The command line does all of the above for any config (`configs/wmt_base.py` is the paper's
# base model on WMT'14 EN-DE); the README lists the modes and the library functions.
