"""Every configuration key, with its meaning: the single source of truth.

Presets (`wmt_base.py`, `wmt_big.py`, `table3.py`, `quickstart.py`) start from
`get_config()` here and change values only; `t2t_jax.config.validate` refuses any
key that is not defined in this file.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()

  # --- Model (§3; Table 3 "base" values) -------------------------------------------
  c.vocab_size = 37000            # SentencePiece vocabulary size, shared by source and target (§5.1: ~37000 EN-DE); with share_vocab=False the target's
  c.share_vocab = True            # one SentencePiece vocabulary for source and target (§5.1); False: one per language (fairseq's default; pairs in two scripts), needs share_embeddings=False
  c.share_tokenizer = True        # share_vocab=True: one SentencePiece model segments both sides; False: the source side segments with its own (vocab/source_spm.model) into the same ids (Marian's source.spm/target.spm; taken, never trained)
  c.language_tokens = ''          # language tokens' pattern, e.g. '__{lang}__' (M2M100's): source text starts with source_lang's token, and every translation with target_lang's (forced); '' for none (the paper)
  c.source_vocab_size = 0         # share_vocab=False: the source vocabulary's size (rows of the encoder's own embedding); 0 means vocab_size
  c.d_model = 512                 # model width d_model (§3.1)
  c.d_ff = 2048                   # inner width of the position-wise FFN d_ff (§3.3)
  c.num_heads = 8                 # attention heads h (§3.2.2)
  c.num_kv_heads = 0              # key/value heads; 0 means num_heads (the paper); fewer: grouped-query attention, 1: multi-query (each kv head serves num_heads // num_kv_heads query heads)
  c.d_k = 0                       # per-head query/key width; 0 means d_model // num_heads (Table 3 rows A, B)
  c.d_v = 0                       # per-head value width; 0 means d_model // num_heads (Table 3 row A)
  c.num_layers = 6                # N, identical layers in both the encoder and the decoder stack (§3.1); the shorthand for both
  c.num_encoder_layers = 0        # encoder layers apart from the decoder's; 0 means num_layers (the paper)
  c.num_decoder_layers = 0        # decoder layers apart from the encoder's; 0 means num_layers (the paper)
  c.decoder_window = 0            # W: the decoder's self-attention looks back at most W positions (a sliding window) and decodes with a ring cache of W slots; 0 means unbounded (the paper)
  c.share_embeddings = True       # one matrix for source/target embeddings and the pre-softmax projection (§3.4); False: the projection is its own matrix
  c.scale_embeddings = True       # multiply the embeddings by sqrt(d_model) (§3.4); False: unscaled (fairseq's --no-scale-embedding)
  c.dropout_rate = 0.1            # P_drop on embeddings+positions and every sub-layer output (§5.4)
  c.attention_dropout_rate = 0.0  # dropout on attention weights; 0 in the paper, an option
  c.label_smoothing = 0.1         # epsilon_ls (§5.4)
  c.positional = 'sinusoidal'     # 'sinusoidal' (§3.5) or 'learned' (Table 3 row E)
  c.norm_position = 'post'        # 'post': LayerNorm(x + Sublayer(x)) as the paper; 'pre': x + Sublayer(LayerNorm(x))
  c.activation = 'relu'           # the FFN's nonlinearity (Eq. 2: 'relu'); 'swish' (OPUS-MT's) or 'gelu' (exact) for imported models
  c.attention_bias = False        # biases on W^Q, W^K, W^V, W^O (none in §3.2.2; fairseq's, Marian's, transformers' models have them)
  c.logits_bias = False           # a [vocab] bias on the pre-softmax logits (Marian's final_logits_bias); none in §3.4
  c.layer_norm_epsilon = 1e-6     # every LayerNorm's epsilon (tensor2tensor's 1e-6; PyTorch's models use 1e-5)
  c.decoder_start_id = 1          # the id the decoder reads first ("shifted right", §3.1): 1 = EOS (tensor2tensor's); 0 = padding (Marian's)
  c.max_len = 512                 # largest position the model supports (learned positions, decode cache)
  c.dtype = 'float32'             # activation/compute dtype: 'float32' or 'bfloat16'; parameters stay float32
  c.attention_impl = ''           # jax.nn.dot_product_attention implementation: '' (backend default, XLA), 'xla' or 'cudnn' (NVIDIA GPUs, bf16)
  c.scan_layers = False           # each stack's layers as one lax.scan: ~3x less compile time per batch shape, ~2x the step's temporaries, same params (model/stack.py)
  c.model = ''                    # a model variant 'module:factory' or 'path/file.py:factory', factory(TransformerConfig) -> Transformer (docs/architecture.md); '' is the paper's Transformer
  c.remat_policy = 'none'         # recompute each layer's activations on the backward pass: 'none', 'full', 'dots_saveable' or 'dots_with_no_batch_dims_saveable' (keep matmul outputs)

  # --- Data (§5.1) -----------------------------------------------------------------
  c.dataset = 'wmt14_translate/de-en'  # 'wmt14_translate/de-en', 'wmt14_translate/fr-en', 'local' or 'treebank' (constituency parsing, §6.3)
  c.source_lang = 'en'            # source language code
  c.target_lang = 'de'            # target language code
  c.data_dir = ''                 # TFDS data dir (prepared datasets); '' means TFDS's default
  c.local_corpus_dir = ''         # for dataset='local': folder with {train,dev,test}.{src,tgt} or {split}.tsv
  c.corpora = ''                  # for dataset='local', instead of local_corpus_dir: a training mixture 'DIR[:WEIGHT[:TAG]],...', each entry [SRC-TGT=]DIR, WEIGHT a share or xK (K times its size), TAG a token before its sources (t2t_jax/corpora_spec.py); the first entry of the run's pair gives dev and test
  c.treebank_dir = ''             # for dataset='treebank': folder with {train,dev,test}.trees or the WSJ sections 02-23 (*.mrg)
  c.train_split = 'train'         # split used for training
  c.eval_split = 'dev'            # split used for periodic evaluation ('dev' maps to the dataset's validation split)
  c.vocab_sample_sentences = 1_000_000  # sentences per language sampled to train the SentencePiece model
  c.byte_fallback = False         # SentencePiece's byte fallback: a character the vocabulary's sample never saw becomes its UTF-8 bytes (256 pieces of vocab_size), not unk (⁇), so every text round-trips
  c.vocab_model = ''              # a SentencePiece .model to use as it is instead of training one (copied into the workdir byte for byte; ids pad 0, eos 1, unk 2, no bos); vocab_size follows it
  c.vocab_from = ''               # a run's workdir whose vocabulary this run takes as it is (vocab_model=W/vocab/spm.model, with W/vocab/source_spm.model as source_vocab_model where W has one): a back-translation or a fine-tune on other data keeps W's ids without naming its files
  c.source_vocab_model = ''       # share_vocab=False with vocab_model (both, or neither): the source side's SentencePiece .model, taken as vocab_model is (vocab/source_spm.model); source_vocab_size follows it
  c.max_length = 256              # drop training pairs whose source or target exceeds this many tokens (counted)
  c.tokens_per_batch = 25000      # padded target slots (rows x bucket length) per step over all devices, as many source; real tokens are fewer (padding efficiency is logged) (§5.1)
  c.bucket_lengths = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)  # padded lengths; bounds the number of compiled shapes
  c.shuffle_seed = 0              # seed of the data order
  c.pack_examples = False         # pack several short pairs into one row with segment ids

  # --- Optimisation (§5.3) ---------------------------------------------------------
  c.optimizer = 'adam'            # 'adam' (the paper's, adam_* keys), 'adamw' (+ weight_decay), 'adafactor' (tensor2tensor's settings), or 'module:factory' / 'path/file.py:factory' with factory(config, schedule) -> optax.GradientTransformation (docs/extension_points.md)
  c.weight_decay = 0.01           # optimizer='adamw': decoupled weight decay of every parameter of 2+ dimensions (kernels, embeddings), times the learning rate
  c.aux_loss_weight = 1.0         # multiplies the auxiliary losses the model sows into flax's 'losses' collection (e.g. a MoE load-balancing loss); the paper's model sows none
  c.adam_b1 = 0.9                 # Adam beta1
  c.adam_b2 = 0.98                # Adam beta2
  c.adam_eps = 1e-9               # Adam epsilon
  c.warmup_steps = 4000           # warmup_steps of the learning-rate schedule (§5.3)
  c.learning_rate_scale = 1.0     # multiplies d_model^-0.5 * min(step^-0.5, step * warmup^-1.5); 1.0 = paper
  c.lr_schedule = 'rsqrt'         # 'rsqrt' (the paper's, eq. 3), or linear warmup over warmup_steps to learning_rate then 'cosine' or 'linear' decay to min_learning_rate at num_train_steps, or 'constant'
  c.learning_rate = 0.0           # peak rate of cosine, linear and constant; 0: the paper's peak, learning_rate_scale * (d_model * warmup_steps)^-0.5
  c.min_learning_rate = 0.0       # the rate cosine and linear decay to at num_train_steps
  c.clip_grad_norm = 0.0          # scale the gradients to a global L2 norm of at most this (0: off, the paper); the norm before clipping is logged
  c.trainable = ''                # a regular expression over parameter paths (--mode=info lists them): only the parameters whose whole path it matches are trained, e.g. 'decoder/.*'; the others stay bitwise as they are and get no optimizer state ('': all)
  c.ema_decay = 0.0               # keep an exponential moving average of the weights with this decay (e.g. 0.9999; 0: off, the paper), checkpointed; --checkpoint=ema evaluates and decodes with it
  c.grad_accum_steps = 1          # micro-batches summed per update, to emulate a larger batch on a small machine
  c.shard_optimizer_state = False  # ZeRO-2: Adam moments and gradients sharded over the 'data' axis (reduce-scatter + all-gather instead of an all-reduce); a mesh with 'fsdp' shards them already
  c.mesh = ''                     # the device mesh, e.g. 'data:2,fsdp:2,tensor:2' ('': every device on 'data', the paper's data parallelism): data splits the batch; fsdp splits the batch and every parameter, gradient and optimizer state (ZeRO-3); tensor splits heads, d_ff and the vocabulary (Megatron); one size may be -1 (the devices left); docs/meshes.md
  c.num_train_steps = 100_000     # training steps (base: 100K, big: 300K; §5.2)
  c.seed = 0                      # parameter initialisation and dropout seed
  c.init_from = ''                # fine-tune: start from another run's parameters, 'WORKDIR' (its newest average, else its last checkpoint), 'WORKDIR:STEP' or 'WORKDIR:best', with its vocabulary as it is; the optimizer, schedule and step start fresh
  c.max_consecutive_nonfinite = 10  # stop after this many consecutive skipped (non-finite) steps
  c.debug_nonfinite_steps = (0,)  # test hook: 1-based steps whose loss is forced to NaN; (0,) = none

  # --- Checkpoints, logging, evaluation --------------------------------------------
  c.checkpoint_every_steps = 0    # save every N steps (0: off)
  c.checkpoint_every_minutes = 10.0  # save every T minutes (0: off); the paper: 10-minute intervals
  c.keep_checkpoints = 20         # keep the last K training checkpoints
  c.keep_best = 0                 # also keep the K best periodic evaluations' parameters in <workdir>/best/ by best_metric (0: off); --checkpoint=best reads the best
  c.best_metric = 'loss'          # what ranks evaluations for keep_best and early_stop_patience: 'loss' (dev loss, lower is better) or 'bleu' (dev BLEU of eval_bleu_sentences, a treebank's F1; higher is better)
  c.best_weights = 'params'       # which weights' dev evaluation best_metric ranks (keep_best keeps those weights) and early_stop_patience watches: 'params' (the trained weights) or 'ema' (the moving average of ema_decay; with ema_decay > 0 both are evaluated at every dev evaluation)
  c.early_stop_patience = 0       # stop after this many periodic evaluations in a row without improving best_metric, then average, evaluate and report as a finished run (0: off)
  c.log_every_steps = 100         # console/metrics line every N steps
  c.writers = 'jsonl,tensorboard'  # where every metric goes (process 0 only), a comma list of jsonl (required), tensorboard, wandb, mlflow, or package.module:factory, a writer of one's own (docs/tracking.md)
  c.wandb_project = ''            # writers with wandb: the W&B project ('': t2t_jax); the run's id is kept in <workdir>/tracking.json, so a resume continues it; its local files go in <workdir>/wandb (WANDB_MODE=offline: only there)
  c.wandb_entity = ''             # writers with wandb: the W&B entity (team or user; '': your default)
  c.mlflow_tracking_uri = ''      # writers with mlflow: MLflow's tracking URI ('': a file store in <workdir>/mlruns); the run's id is kept in <workdir>/tracking.json
  c.profile_steps = ''            # 'START:END': a jax.profiler trace of those train steps into <workdir>/profile/, each step named (decode --output=OUT: of its batches, into OUT.profile/); TensorBoard's profile plugin, Perfetto (docs/performance.md, "Profiling a run")
  c.eval_every_steps = 1000       # teacher-forced dev loss every N steps (0: off)
  c.eval_batches = 0              # dev batches per periodic eval (0: the whole split)
  c.eval_bleu_sentences = 0       # decode this many dev sentences for BLEU (a treebank: F1) at each eval (0: off)
  c.final_eval_split = ''         # after the last step: average, evaluate on this split, print a report ('': off)

  # --- Inference (§6.1) ------------------------------------------------------------
  c.eval_sentence_scores = False  # --mode=eval: also write each sentence's BLEU and chrF (eval_<split>_<step>.texts/sentences.tsv)
  c.average_last = 5              # checkpoints averaged for eval/decode (base: 5, big: 20)
  c.average_best = 0              # --mode=average: average the N best checkpoints keep_best kept instead of the last average_last, into averaged/step_<last>_best_<N> (read with --checkpoint=averaged/step_<last>_best_<N>); 0: the last
  c.beam_size = 4                 # beam width
  c.length_penalty_alpha = 0.6    # GNMT length penalty ((5 + |Y|) / 6)^alpha (with length_penalty_rule='transformers': |Y|^alpha)
  c.length_penalty_rule = 'gnmt'  # how beam search compares lengths: 'gnmt' (the paper's: the GNMT penalty, an exact early stop) or 'transformers' (|Y|^alpha and transformers' stop heuristic: decodes as its generate(num_beams=beam_size, length_penalty=alpha))
  c.max_decode_extra = 50         # maximum output length = input length + this
  c.decode_strategy = 'beam'      # 'beam' (the paper's), 'greedy' (the argmax each step), or 'sample' (temperature, top_k, top_p, sample_seed)
  c.nbest = 1                     # --mode=decode: N hypotheses per input (N <= beam_size; N samples with 'sample'), as input_index<TAB>rank<TAB>score<TAB>log_prob<TAB>hypothesis lines
  c.output_scores = False         # --mode=decode with nbest=1: the 1-best in those columns too (else plain text)
  c.temperature = 1.0             # decode_strategy='sample': the softmax temperature (> 0)
  c.top_k = 0                     # decode_strategy='sample': draw from the k most probable tokens only (0: all)
  c.top_p = 1.0                   # decode_strategy='sample': then from the smallest set reaching this probability (nucleus; 1.0: all)
  c.sample_seed = 0               # decode_strategy='sample': the seed; a line's samples depend on it and the line's number only
  c.no_repeat_ngram_size = 0      # no output repeats an n-gram of tokens of this size (beam, greedy, sample; 0: off, the paper)
  c.target_prefix_file = ''       # --mode=decode: one target prefix per --input line (may be empty); each translation starts with it
  c.decode_batch_sentences = 64   # sentences per decode batch
  c.decode_threads = 0            # batches decoded at once; 0: one per core on CPU, else 1
  c.decode_parallelism = 'auto'   # decoding over a host's devices: 'sharded' (each batch's rows split over all local chips), 'threads' (one device, decode_threads batches at once), 'auto' (sharded on several accelerators, else threads)
  # --mode=serve (docs/serving.md, "A translation server"): concurrent requests decoded together
  c.serve_max_wait_ms = 5.0       # how long the first queued sentence waits for others to join its batch
  c.serve_max_sentences = 64      # sentences decoded together at most (sorted by length into the decode buckets)
  c.serve_max_tokens = 8192       # source tokens decoded together at most
  c.serve_max_queue = 2048        # sentences waiting at most; a request beyond is answered 503 with Retry-After
  c.serve_max_body_bytes = 1048576  # a request body over this is answered 413
  return c
