"""The input pipeline: corpora, tokenizer, bucketing, packing, batches, fingerprints, tasks.

`corpora` prepares and opens splits through TFDS (`wmt` for WMT14, `textfiles` for local
files), `tokenizer` trains and loads the shared SentencePiece vocabulary (`vocabularies`: a
run's, one per language with share_vocab=False as a `vocab_pair.VocabPair`), `pipeline` batches
by length (`bucketing`, `packing`) with grain, `fingerprint` identifies a run's data, and
`tasks` is where tasks beyond translation plug in. Runs on the host: no jax.
"""
