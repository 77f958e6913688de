"""Models from elsewhere into a workdir: transformers' MarianMT (OPUS-MT) directories, read
with safetensors' numpy API and SentencePiece (no PyTorch), their ids mapped onto ours."""
